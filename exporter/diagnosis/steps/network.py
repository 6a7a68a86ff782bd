"""Step 2: the network floor, per carrier and target, measured before any engine number is
believed: a bad network disguises itself as a slow model."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.observations import EngineWindow, PathWindow, ProbeWindow
from exporter.diagnosis.result import Evidence, Step, Symptom
from exporter.diagnosis.steps import users
from exporter.diagnosis.steps.base import (
    Context,
    Finding,
    ProbeSymptoms,
    conclude,
    pct,
    peak_drift,
    probe_labels,
    probe_scope,
    secs,
    strength,
)

ALL: frozenset[Symptom] = frozenset(("ttft", "tpot", "failures", "long_context"))
FIRST_TOKEN: frozenset[Symptom] = frozenset(("ttft", "long_context"))
#: What each network cause can produce. Loss costs retransmits on every byte (slow first
#: token, choppy stream, resets); an RTT floor only delays what waits on round trips.
EXPLAINS: dict[str, frozenset[Symptom]] = {
    "packet_loss": ALL,
    "peak_congestion": ALL,
    "route_change": ALL,
    "rtt_floor": FIRST_TOKEN,
    "jitter": frozenset(("tpot", "ttft")),
    "connection_setup": FIRST_TOKEN | {"failures"},
    "stream_stalls": frozenset(("tpot",)),
}
#: A network fault drops connections and streams or makes them time out; it never answers
#: with an HTTP status.
FAILS = frozenset(("timeout", "connect", "stream"))
#: Evidence name of the client-minus-engine split of mean TTFTs (bucket grids differ).
MEAN_SPLIT = f"{metrics.PROBE_TTFT.name} mean (_sum / _count)"
#: Evidence name of the engine's own gaps over the stall line.
ENGINE_STALLS = f"{metrics.ENGINE_ITL.name} over alerting.stall_seconds"


def _same(a: str, b: str) -> bool:
    return not a or not b or a == b


def on_path(p: ProbeWindow, path: PathWindow) -> bool:
    """A probe rides a path when it is tagged with the path's carrier, from the same
    vantage point where both are known; an untagged probe rides no carrier's path. Targets
    are not compared: a probe's is its endpoint (host:port), a path's the name config gives
    it, and a carrier tag already says which route the probe's traffic takes."""
    return bool(p.carrier) and p.carrier == path.carrier and _same(p.vantage, path.vantage)


def _path_findings(ctx: Context, path: PathWindow, riders: tuple[ProbeSymptoms, ...],
                   slo_ttft: float, cleared: list[Evidence]) -> list[Finding]:
    th = ctx.th
    labels = {"carrier": path.carrier, "target": path.target, "vantage": path.vantage}
    # Where it was measured from too: loss seen from one carrier's vantage point is that
    # vantage point's path, not every path on the carrier.
    scope = {"carrier": path.carrier, "target": path.target, "site": path.site,
             "vantage": path.vantage}
    where = f"{path.carrier.capitalize()} path to {path.target}"
    out: list[Finding] = []

    def add(cause: str, headline: str, evidence: list[Evidence], s: float,
            own: bool = False) -> None:
        # own: the path's numbers are over an alert's line (exporter/monitoring/findings.py),
        # reported whether or not a probe feels it yet.
        out.append(Finding("network", cause, dict(scope), headline, evidence, s,
                           EXPLAINS[cause], riders, unobserved=not riders,
                           own=own, fails=FAILS))

    loss, rtt = path.loss, path.rtt_mean
    loss_e = ctx.ev(metrics.PATH_LOSS.name, loss, labels, th.loss_ratio,
                    path.loss_baseline) if loss is not None else None
    rtt_budget = th.rtt_budget_share * slo_ttft
    rtt_e = ctx.ev(metrics.PATH_RTT.name, rtt, labels, rtt_budget / th.rtt_round_trips,
                   path.rtt_baseline) if rtt is not None else None
    # Evening peak vs off-peak: a loss or RTT that only the peak has is congestion on the
    # carrier's interconnect, and subsumes the plain loss / RTT finding of the same path.
    peak = peak_drift(ctx, path.in_peak, (loss, loss_e, path.loss_baseline),
                      (rtt, rtt_e, path.rtt_baseline))
    if peak:
        what = (f"loses {pct(loss)} of packets (off-peak {pct(path.loss_baseline or 0)})"
                if loss_e in peak and loss is not None else
                f"RTT {secs(rtt or 0)} at peak (off-peak {secs(path.rtt_baseline or 0)})")
        add("peak_congestion", f"{where} {what} in the evening peak", peak,
            strength(peak[0].value, (peak[0].baseline or 0) * th.drift_ratio),
            own=loss_e in peak)
    elif loss is not None and loss_e is not None:
        if loss > th.loss_ratio:
            add("packet_loss", f"{where} loses {pct(loss)} of packets (threshold "
                f"{pct(th.loss_ratio)})", [loss_e], strength(loss, th.loss_ratio, 0.7),
                own=True)
        else:
            cleared.append(loss_e)
    # A worse route class than this target's best, or a change: the return path moved
    # (CN2 GIA to 163 is the classic evening downgrade). It subsumes the RTT floor.
    worse = (path.route_class is not None and path.best_route_class is not None
             and th.route_rank(path.route_class) > th.route_rank(path.best_route_class))
    if worse or path.route_changes > 0:
        ev = [ctx.ev(metrics.PATH_ROUTE_CHANGES.name, path.route_changes,
                     {**labels, "route_class": path.route_class or ""}, 0)]
        if rtt_e is not None:
            ev.append(rtt_e)
        was = f" from {path.best_route_class}" if worse else ""
        now = f" to {path.route_class}" if path.route_class else ""
        add("route_change", f"{where} changed route{was}{now} "
            f"({path.route_changes} change(s) in the window)", ev, 0.8 if worse else 0.65,
            own=worse)
    elif rtt is not None and rtt_e is not None and not peak:
        floor = rtt * th.rtt_round_trips
        if floor > rtt_budget:
            add("rtt_floor", f"{where} has RTT {secs(rtt)}: {th.rtt_round_trips} round trips "
                f"take {secs(floor)} of the {secs(slo_ttft)} TTFT SLO", [rtt_e],
                strength(floor, rtt_budget))
        else:
            cleared.append(rtt_e)
    if path.jitter is not None:
        e = ctx.ev(metrics.PATH_JITTER.name, path.jitter, labels, th.jitter_seconds)
        if path.jitter > th.jitter_seconds:
            add("jitter", f"{where} has jitter {secs(path.jitter)} (threshold "
                f"{secs(th.jitter_seconds)})", [e], strength(path.jitter, th.jitter_seconds),
                own=True)
        else:
            cleared.append(e)
    return out


def _probe_findings(ctx: Context, ps: ProbeSymptoms, cleared: list[Evidence],
                    splits: list[Evidence]) -> list[Finding]:
    """What one symptomatic probe's own timings say about the network."""
    th, p = ctx.th, ps.probe
    out: list[Finding] = []
    labels = probe_labels(p)
    engines = ctx.engines_of(p)
    if p.connect_p95 is not None and p.ttft_p95:
        e = ctx.ev(metrics.PROBE_PHASE.name, p.connect_p95, {**labels, "phase": "setup"},
                   th.connection_setup_share * p.ttft_p95)
        if p.connect_p95 > th.connection_setup_share * p.ttft_p95:
            out.append(Finding(
                "network", "connection_setup", probe_scope(p),
                f"DNS, connect and TLS take {secs(p.connect_p95)} of the {p.probe} probe's "
                f"{secs(p.ttft_p95)} TTFT P95", [e],
                strength(p.connect_p95, th.connection_setup_share * p.ttft_p95),
                EXPLAINS["connection_setup"], (ps,), fails=FAILS))
        else:
            cleared.append(e)
    engine = engines[0] if engines else None
    # Stalls the client sees while the engine emits tokens steadily happen on the way. An
    # engine with gaps of its own as long (a preempted request waits to be recomputed) may
    # be where they come from: the engine step judges those.
    stalled = (p.stalls > 0 or (p.itl_p99 or 0) > th.stall_seconds)
    if stalled and engine is not None and engine.itl_p95 is not None and engine.up:
        e = ctx.ev(metrics.ENGINE_ITL.name, engine.itl_p95, {"engine": engine.engine},
                   p.slo_tpot, grid=engine.itl_buckets)
        own = ctx.ev(ENGINE_STALLS, engine.stalls or 0, {"engine": engine.engine}, 0)
        if engine.stalls:
            cleared.extend((e, own))
        elif engine.itl_p95 <= p.slo_tpot:
            out.append(Finding(
                "network", "stream_stalls", probe_scope(p),
                f"The {p.probe} probe sees {p.stalls} stall(s) (inter-token P99 "
                f"{secs(p.itl_p99 or 0)}) while {engine.engine}'s inter-token P95 is "
                f"{secs(engine.itl_p95)}", [e, *ps.evidence], 0.8,
                EXPLAINS["stream_stalls"], (ps,), fails=FAILS))
    # The TTFT's part between client and engine (the network, a gateway, the engine's HTTP
    # server). A big share is evidence for this step; a small one clears the network for
    # this probe.
    outside = _outside_engine(ctx, p, engine)
    if outside is not None and outside.threshold is not None:
        (splits if outside.value > outside.threshold else cleared).append(outside)
    return out


def _outside_engine(ctx: Context, p: ProbeWindow, engine: EngineWindow | None
                    ) -> Evidence | None:
    """Exact where the engine timed the probe's own requests: the network_frontend share
    of those TTFTs (``split=exact`` on the evidence), applied to the TTFT P95, with the
    share over which it is the network's as threshold. Else the client's TTFT minus the
    engine's (``part=client_minus_engine``): two distributions of different requests."""
    if p.exact_splits and p.network_frontend_share is not None and p.ttft_p95:
        gap = p.network_frontend_share * p.ttft_p95
        return ctx.ev(metrics.PROBE_SERVER_TIMING.name, gap,
                      {**probe_labels(p), "part": metrics.ServerPart.NETWORK_FRONTEND.value,
                       "split": metrics.ServerSplit.EXACT.value},
                      ctx.th.client_network_share * p.ttft_p95)
    if engine is not None and engine.up:
        return client_minus_engine(ctx, p, engine)
    return None


def client_minus_engine(ctx: Context, p: ProbeWindow, engine: EngineWindow
                        ) -> Evidence | None:
    """The probe's TTFT minus its engine's own, with the share of the probe's TTFT over
    which it is the network's as threshold (and the engine's figure as baseline).

    P95s are subtracted only when both histograms have one bucket grid: each is interpolated
    inside its own buckets, and on two grids (the probe's, and vLLM's, which jumps from
    0.25 s to 0.5 s) their difference is as much the two resolutions as the network. Else
    the means are (each _sum over its _count): exact whatever the buckets, and a difference
    of means is the mean difference, where a difference of P95s is no P95 of anything.
    Without either pair there is no split: a guess would clear or blame the network."""
    share = ctx.th.client_network_share
    labels = {**probe_labels(p), "part": "client_minus_engine"}
    if p.ttft_buckets and p.ttft_buckets == engine.ttft_buckets and p.ttft_p95 and \
            engine.ttft_p95 is not None:
        return ctx.ev(metrics.PROBE_TTFT.name, max(0.0, p.ttft_p95 - engine.ttft_p95), labels,
                      share * p.ttft_p95, engine.ttft_p95)
    if p.ttft_mean and engine.ttft_mean is not None:
        return ctx.ev(MEAN_SPLIT, max(0.0, p.ttft_mean - engine.ttft_mean), labels,
                      share * p.ttft_mean, engine.ttft_mean)
    return None


#: (lost, of what) segment counts of the stream's own loss (TCP_INFO of its connections).
STREAM_LOSS = (
    (metrics.TcpSegments.RETRANSMITTED, metrics.TcpSegments.SENT),
    (metrics.TcpSegments.OUT_OF_ORDER, metrics.TcpSegments.RECEIVED),
)


def _stream_loss(ctx: Context, p: ProbeWindow, ps: ProbeSymptoms | None,
                 findings: list[Finding], cleared: list[Evidence]) -> Finding | None:
    """The probe's own stream lost packets: its connection retransmitted, or the server's
    segments arrived out of order, over the loss line (LLMProbeStreamPacketLoss's
    condition). Network evidence for its carrier whatever ICMP to the carrier says
    (carriers rate-limit echoes): it joins a loss finding on the probe's carrier, or is one
    of its own, over the line whether or not the probe's users feel it yet. ``ps``: the
    probe's symptoms, when it has any (then a clean stream is evidence that clears)."""
    th = ctx.th
    evidence: list[Evidence] = []
    worst = 0.0
    for (part, whole), ratio in zip(STREAM_LOSS, (p.tcp_retransmit_ratio,
                                                  p.tcp_out_of_order_ratio), strict=True):
        if ratio is None:
            continue
        e = ctx.ev(metrics.PROBE_TCP_SEGMENTS.name, ratio,
                   {**probe_labels(p), "segments": f"{part.value}/{whole.value}"},
                   th.loss_ratio)
        if ratio > th.loss_ratio:
            evidence.append(e)
            worst = max(worst, ratio)
        elif ps is not None:
            cleared.append(e)
    if not evidence:
        return None
    riders = (ps,) if ps is not None else ()
    for f in findings:
        if f.cause in ("packet_loss", "peak_congestion") and p.carrier and \
                f.scope.get("carrier") == p.carrier and \
                _same(p.vantage, f.scope.get("vantage", "")):
            f.evidence.extend(evidence)
            f.probes = (*f.probes, *(r for r in riders if r not in f.probes))
            return None
    where = f" on {p.carrier}" if p.carrier else ""
    # The carrier's ICMP loss under its line, beside it: what the stream contradicts.
    evidence += [e for e in cleared if e.metric == metrics.PATH_LOSS.name and p.carrier
                 and e.labels.get("carrier") == p.carrier]
    return Finding(
        "network", "packet_loss", probe_scope(p),
        f"The {p.probe} probe's TCP stream{where} loses packets: "
        + ", ".join(f"{e.labels['segments']} {pct(e.value)}" for e in evidence
                    if e.metric == metrics.PROBE_TCP_SEGMENTS.name)
        + f" (threshold {pct(th.loss_ratio)})",
        evidence, strength(worst, th.loss_ratio, 0.7), EXPLAINS["packet_loss"], riders,
        unobserved=not riders, own=True, fails=FAILS)


def evaluate(ctx: Context, sick: list[ProbeSymptoms]) -> tuple[Step, list[Finding],
                                                                 list[Evidence]]:
    """The step, its findings, and the client-minus-engine splits over their share (the
    time is between client and engine, whether or not a path names the cause)."""
    th = ctx.th
    findings: list[Finding] = []
    cleared: list[Evidence] = []
    decided = False
    for path in ctx.obs.paths:
        if path.sent < th.min_requests or ctx.failing("path", f"{path.carrier}/{path.target}"):
            continue
        decided = True
        riders = tuple(s for s in sick if on_path(s.probe, path))
        tagged = any(on_path(p, path) for p in ctx.obs.probes)
        slos = [s.probe.slo_ttft for s in riders] or [
            p.slo_ttft for p in ctx.obs.probes if on_path(p, path)] or [th.slo_ttft]
        found = _path_findings(ctx, path, riders, min(slos), cleared)
        # A path fault no symptomatic probe rides is only worth naming where no probe rides
        # it at all (nothing could have shown the symptom), or where its numbers are over an
        # alert's line (the loss pages before users feel it: the network floor first).
        findings.extend(f for f in found if riders or not tagged or f.own)
    # Real users per carrier (the clients check), beside the paths.
    decided = users.evaluate(ctx, sick, findings, cleared, EXPLAINS, FAILS) or decided
    splits: list[Evidence] = []
    for ps in sick:
        found = _probe_findings(ctx, ps, cleared, splits)
        decided = decided or bool(found) or bool(splits) or bool(cleared)
        findings.extend(found)
    # By identity: a fleet's probes share names across vantage points.
    symptoms = {id(ps.probe): ps for ps in sick}
    for p in ctx.obs.probes:
        stream = _stream_loss(ctx, p, symptoms.get(id(p)), findings, cleared)
        if stream is not None:
            decided = True
            findings.append(stream)
    return conclude("network", findings, cleared + splits, decided), findings, splits
