"""Step 2: the network floor, per carrier and target, measured before any engine number is
believed: a bad network disguises itself as a slow model."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.causes import (
    CONNECTION_SETUP,
    JITTER,
    PACKET_LOSS,
    PEAK_CONGESTION,
    ROUTE_CHANGE,
    RTT_FLOOR,
    STREAM_STALLS,
    Cause,
)
from exporter.diagnosis.observations import (
    SETUP_ROUND_TRIPS,
    EngineWindow,
    PathWindow,
    ProbeWindow,
)
from exporter.diagnosis.result import Evidence
from exporter.diagnosis.steps import users
from exporter.diagnosis.steps.base import (
    Case,
    Finding,
    Outcome,
    Part,
    ProbeSymptoms,
    Standing,
    peak_drift,
)
from exporter.diagnosis.steps.words import pct, probe_labels, probe_scope, secs, strength
from exporter.metrics import ProbeOutcome

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


def _path_findings(case: Case, path: PathWindow, riders: tuple[ProbeSymptoms, ...],
                   slo_ttft: float, cleared: list[Evidence]) -> list[Finding]:
    lines = case.thresholds
    labels = {"carrier": path.carrier, "target": path.target, "vantage": path.vantage}
    # Where it was measured from too: loss seen from one carrier's vantage point is that
    # vantage point's path, not every path on the carrier.
    scope = {"carrier": path.carrier, "target": path.target, "site": path.site,
             "vantage": path.vantage}
    where = f"{path.carrier.capitalize()} path to {path.target}"
    out: list[Finding] = []

    def add(cause: Cause, headline: str, evidence: list[Evidence], s: float,
            over_line: bool = False) -> None:
        # over_line: the path's numbers are over its cause's alert line, reported whether or
        # not a probe feels it yet.
        out.append(Finding(cause, dict(scope), headline, evidence, s, riders,
                           Standing.OVER_LINE if over_line else Standing.EXPLAINS))

    loss, rtt = path.loss, path.rtt_mean
    loss_e = case.evidence(metrics.PATH_LOSS.name, loss, labels, lines.loss_ratio,
                           path.loss_baseline) if loss is not None else None
    rtt_budget = lines.rtt_budget_share * slo_ttft
    rtt_e = case.evidence(metrics.PATH_RTT.name, rtt, labels, rtt_budget / lines.rtt_round_trips,
                          path.rtt_baseline) if rtt is not None else None
    # Evening peak vs off-peak: a loss or RTT that only the peak has is congestion on the
    # carrier's interconnect, and subsumes the plain loss / RTT finding of the same path.
    peak = peak_drift(case, path.in_peak, (loss, loss_e, path.loss_baseline),
                      (rtt, rtt_e, path.rtt_baseline))
    if peak:
        what = (f"loses {pct(loss)} of packets (off-peak {pct(path.loss_baseline or 0)})"
                if loss_e in peak and loss is not None else
                f"RTT {secs(rtt or 0)} at peak (off-peak {secs(path.rtt_baseline or 0)})")
        add(PEAK_CONGESTION, f"{where} {what} in the evening peak", peak,
            strength(peak[0].value, (peak[0].baseline or 0) * lines.drift_ratio),
            over_line=loss_e in peak)
    elif loss is not None and loss_e is not None:
        if loss > lines.loss_ratio:
            add(PACKET_LOSS, f"{where} loses {pct(loss)} of packets (threshold "
                f"{pct(lines.loss_ratio)})", [loss_e], strength(loss, lines.loss_ratio, 0.7),
                over_line=True)
        else:
            cleared.append(loss_e)
    # A worse route class than this target's best, or a change: the return path moved
    # (CN2 GIA to 163 is the classic evening downgrade). It subsumes the RTT floor.
    worse = (path.route_class is not None and path.best_route_class is not None
             and lines.route_rank(path.route_class) > lines.route_rank(path.best_route_class))
    if worse or path.route_changes > 0:
        ev = [case.evidence(metrics.PATH_ROUTE_CHANGES.name, path.route_changes,
                            {**labels, "route_class": path.route_class or ""}, 0)]
        if rtt_e is not None:
            ev.append(rtt_e)
        was = f" from {path.best_route_class}" if worse else ""
        now = f" to {path.route_class}" if path.route_class else ""
        add(ROUTE_CHANGE, f"{where} changed route{was}{now} "
            f"({path.route_changes} change(s) in the window)", ev, 0.8 if worse else 0.65,
            over_line=worse)
    elif rtt is not None and rtt_e is not None and not peak:
        floor = rtt * lines.rtt_round_trips
        if floor > rtt_budget:
            add(RTT_FLOOR, f"{where} has RTT {secs(rtt)}: {lines.rtt_round_trips} round trips "
                f"take {secs(floor)} of the {secs(slo_ttft)} TTFT SLO", [rtt_e],
                strength(floor, rtt_budget))
        else:
            cleared.append(rtt_e)
    if path.jitter is not None:
        e = case.evidence(metrics.PATH_JITTER.name, path.jitter, labels, lines.jitter_seconds)
        if path.jitter > lines.jitter_seconds:
            add(JITTER, f"{where} has jitter {secs(path.jitter)} (threshold "
                f"{secs(lines.jitter_seconds)})", [e], strength(path.jitter, lines.jitter_seconds),
                over_line=True)
        else:
            cleared.append(e)
    return out


def _probe_findings(case: Case, ps: ProbeSymptoms, cleared: list[Evidence],
                    splits: list[Evidence]) -> list[Finding]:
    """What one symptomatic probe's own timings say about the network."""
    lines, p = case.thresholds, ps.probe
    out: list[Finding] = []
    engines = case.engines_of(p)
    engine = engines[0] if engines else None
    # Stalls the client sees while the engine emits tokens steadily happen on the way. An
    # engine with gaps of its own as long (a preempted request waits to be recomputed) may
    # be where they come from: the engine step judges those.
    stalled = (p.stalls > 0 or (p.itl_p99 or 0) > lines.stall_seconds)
    if stalled and engine is not None and engine.itl_p95 is not None and engine.up:
        e = case.evidence(metrics.ENGINE_ITL.name, engine.itl_p95, {"engine": engine.engine},
                          p.slo_tpot, grid=engine.itl_buckets)
        own = case.evidence(ENGINE_STALLS, engine.stalls or 0, {"engine": engine.engine}, 0)
        if engine.stalls:
            cleared.extend((e, own))
        elif engine.itl_p95 <= p.slo_tpot:
            out.append(Finding(
                STREAM_STALLS, probe_scope(p),
                f"The {p.probe} probe sees {p.stalls} stall(s) (inter-token P99 "
                f"{secs(p.itl_p99 or 0)}) while {engine.engine}'s inter-token P95 is "
                f"{secs(engine.itl_p95)}", [e, *ps.evidence], 0.8, (ps,)))
    # The TTFT's part between client and engine (the network, a gateway, the engine's HTTP
    # server). A big share is evidence for this step; a small one clears the network for
    # this probe.
    outside = _outside_engine(case, p, engine)
    if outside is not None and outside.threshold is not None:
        (splits if outside.value > outside.threshold else cleared).append(outside)
    return out


def _outside_engine(case: Case, p: ProbeWindow, engine: EngineWindow | None
                    ) -> Evidence | None:
    """Exact where the engine timed the probe's own requests: the network_frontend share
    of those TTFTs (``split=exact`` on the evidence), applied to the TTFT P95, with the
    share over which it is the network's as threshold. Else the client's TTFT minus the
    engine's (``part=client_minus_engine``): two distributions of different requests."""
    if p.exact_splits and p.network_frontend_share is not None and p.ttft_p95:
        gap = p.network_frontend_share * p.ttft_p95
        return case.evidence(metrics.PROBE_SERVER_TIMING.name, gap,
                             {**probe_labels(p), "part": metrics.ServerPart.NETWORK_FRONTEND.value,
                       "split": metrics.ServerSplit.EXACT.value},
                             case.thresholds.client_network_share * p.ttft_p95)
    if engine is not None and engine.up:
        return client_minus_engine(case, p, engine)
    return None


def client_minus_engine(case: Case, p: ProbeWindow, engine: EngineWindow
                        ) -> Evidence | None:
    """The probe's TTFT minus its engine's own, with the share of the probe's TTFT over
    which it is the network's as threshold (and the engine's figure as baseline).

    P95s are subtracted only when both histograms have one bucket grid: each is interpolated
    inside its own buckets, and on two grids (the probe's, and vLLM's, which jumps from
    0.25 s to 0.5 s) their difference is as much the two resolutions as the network. Else
    the means are (each _sum over its _count): exact whatever the buckets, and a difference
    of means is the mean difference, where a difference of P95s is no P95 of anything.
    Without either pair there is no split: a guess would clear or blame the network."""
    share = case.thresholds.client_network_share
    labels = {**probe_labels(p), "part": "client_minus_engine"}
    if p.ttft_buckets and p.ttft_buckets == engine.ttft_buckets and p.ttft_p95 and \
            engine.ttft_p95 is not None:
        return case.evidence(metrics.PROBE_TTFT.name, max(0.0, p.ttft_p95 - engine.ttft_p95),
                             labels, share * p.ttft_p95, engine.ttft_p95)
    if p.ttft_mean and engine.ttft_mean is not None:
        return case.evidence(MEAN_SPLIT, max(0.0, p.ttft_mean - engine.ttft_mean), labels,
                             share * p.ttft_mean, engine.ttft_mean)
    return None


#: (lost, of what) segment counts of the stream's own loss (TCP_INFO of its connections).
STREAM_LOSS = (
    (metrics.TcpSegments.RETRANSMITTED, metrics.TcpSegments.SENT),
    (metrics.TcpSegments.OUT_OF_ORDER, metrics.TcpSegments.RECEIVED),
)


def _stream_loss(case: Case, p: ProbeWindow, ps: ProbeSymptoms | None,
                 findings: list[Finding], cleared: list[Evidence]) -> Finding | None:
    """The probe's own stream lost packets: its connection retransmitted, or the server's
    segments arrived out of order, over the loss line (LLMProbeStreamPacketLoss's
    condition). Network evidence for its carrier whatever ICMP to the carrier says
    (carriers rate-limit echoes): it joins a loss finding on the probe's carrier, or is one
    of its own, over the line whether or not the probe's users feel it yet. ``ps``: the
    probe's symptoms, when it has any (then a clean stream is evidence that clears)."""
    lines = case.thresholds
    evidence: list[Evidence] = []
    worst = 0.0
    for (part, whole), ratio in zip(STREAM_LOSS, (p.tcp_retransmit_ratio,
                                                  p.tcp_out_of_order_ratio), strict=True):
        if ratio is None:
            continue
        e = case.evidence(metrics.PROBE_TCP_SEGMENTS.name, ratio,
                          {**probe_labels(p), "segments": f"{part.value}/{whole.value}"},
                          lines.loss_ratio)
        if ratio > lines.loss_ratio:
            evidence.append(e)
            worst = max(worst, ratio)
        elif ps is not None:
            cleared.append(e)
    if not evidence:
        return None
    riders = (ps,) if ps is not None else ()
    for f in findings:
        if _carrier_loss(f, p):
            f.evidence.extend(evidence)
            f.probes = (*f.probes, *(r for r in riders if r not in f.probes))
            return None
    where = f" on {p.carrier}" if p.carrier else ""
    # The carrier's ICMP loss under its line, beside it: what the stream contradicts.
    evidence += [e for e in cleared if e.metric == metrics.PATH_LOSS.name and p.carrier
                 and e.labels.get("carrier") == p.carrier]
    return Finding(
        PACKET_LOSS, probe_scope(p),
        f"The {p.probe} probe's TCP stream{where} loses packets: "
        + ", ".join(f"{e.labels['segments']} {pct(e.value)}" for e in evidence
                    if e.metric == metrics.PROBE_TCP_SEGMENTS.name)
        + f" (threshold {pct(lines.loss_ratio)})",
        evidence, strength(worst, lines.loss_ratio, 0.7), riders, Standing.OVER_LINE)


def _carrier_loss(f: Finding, p: ProbeWindow) -> bool:
    """A loss finding on the probe's carrier, seen from its vantage point."""
    return f.cause in (PACKET_LOSS, PEAK_CONGESTION) and bool(p.carrier) and \
        f.scope.get("carrier") == p.carrier and _same(p.vantage, f.scope.get("vantage", ""))


def _loss_on_way(findings: list[Finding], p: ProbeWindow) -> Finding | None:
    """The loss finding on the probe's way: its own stream's, or its carrier's."""
    for f in findings:
        own = f.cause is PACKET_LOSS and bool(p.carrier) and f.scope.get("probe") == p.probe
        if own or ("probe" not in f.scope and _carrier_loss(f, p)):
            return f
    return None


def _setup(case: Case, p: ProbeWindow, ps: ProbeSymptoms | None, findings: list[Finding],
           cleared: list[Evidence]) -> Finding | None:
    """A new connection's DNS, connect and TLS beyond the round trips they take (TCP's
    handshake and TLS's), over ``connection_setup_share`` of the probe's TTFT SLO: what a
    user opening a connection waits before the first token the probe times (its TTFT
    starts once connected); or connections that time out opening, failures of the probe's
    own. Over its line whether or not the probe is slow; a loss on the probe's way takes
    it over (a lost SYN waits for its retry). A far path's round trips are the RTT floor's."""
    lines = case.thresholds
    timed_out = p.outcomes.get(ProbeOutcome.TIMEOUT_CONNECT.value, 0)
    failing = ps is not None and ps.failure == "connect" and "failures" in ps.open \
        and timed_out > 0
    if p.connect_p95 is None and not failing:
        return None
    # The probe's own connection's RTT (TCP_INFO), as LLMProbeConnectionSetupSlow reads it.
    rtt = p.tcp_rtt_mean or 0.0
    trips = SETUP_ROUND_TRIPS * rtt
    line = lines.connection_setup_share * p.slo_ttft
    ev: list[Evidence] = []
    slow = p.connect_p95 is not None and p.connect_p95 > line + trips
    if p.connect_p95 is not None:
        e = case.evidence(metrics.PROBE_PHASE.name, p.connect_p95,
                          {**probe_labels(p), "phase": "setup"}, line + trips)
        if not slow and not failing:
            if ps is not None:
                cleared.append(e)
            return None
        ev.append(e)
    loss = _loss_on_way(findings, p)
    if loss is not None:
        loss.evidence.extend(ev)
        return None
    if slow:
        assert p.connect_p95 is not None
        what = (f"New connections of the {p.probe} probe take {secs(p.connect_p95)} to open "
                f"(DNS, connect, TLS; P95), {secs(p.connect_p95 - trips)} beyond their round "
                f"trips at RTT {secs(rtt)}: users who open one wait that before their first "
                "token")
        s = strength(p.connect_p95 - trips, line)
    else:
        what = (f"{timed_out} of the {p.probe} probe's connections timed out opening "
                "(no answer to their SYNs within the probe's connect timeout)")
        s = 0.7
    if ps is not None:
        ev.extend(ps.evidence)
    return Finding(CONNECTION_SETUP, probe_scope(p), what, ev, s,
                   (ps,) if ps is not None else (), Standing.OVER_LINE)


def _paths(case: Case) -> Part:
    """Each carrier's path to each target."""
    lines, part = case.thresholds, Part()
    for path in case.obs.paths:
        if path.sent < lines.min_requests or \
                case.failing("path", f"{path.carrier}/{path.target}"):
            continue
        part.decided = True
        riders = tuple(s for s in case.sick if on_path(s.probe, path))
        tagged = any(on_path(p, path) for p in case.obs.probes)
        slos = [s.probe.slo_ttft for s in riders] or [
            p.slo_ttft for p in case.obs.probes if on_path(p, path)] or [lines.slo_ttft]
        found = _path_findings(case, path, riders, min(slos), part.cleared)
        # A path fault no symptomatic probe rides is only worth naming where no probe rides
        # it at all (nothing could have shown the symptom), or where its numbers are over an
        # alert's line (the loss pages before users feel it: the network floor first).
        part.findings.extend(f for f in found if riders or not tagged
                             or f.standing is Standing.OVER_LINE)
    return part


def _merge(findings: list[Finding], found: list[Finding]) -> None:
    """A carrier's real-user finding of a cause a path of the same carrier (and site)
    already has is more evidence for that verdict, not a second one."""
    for f in found:
        same = next((g for g in findings if g.cause is f.cause
                     and g.scope.get("carrier") == f.scope["carrier"]
                     and g.scope.get("site", "") == f.scope.get("site", "")), None)
        if same is None:
            findings.append(f)
        else:
            same.absorb(f)


def evaluate(case: Case) -> Outcome:
    """Leaves the client-minus-engine splits over their share (``case.splits``): the time
    is between client and engine, whether or not a path names the cause."""
    paths = _paths(case)
    findings, cleared, decided = paths.findings, paths.cleared, paths.decided
    # Real users per carrier (the clients check), beside the paths.
    clients = users.evaluate(case)
    _merge(findings, clients.findings)
    cleared += clients.cleared
    decided = clients.decided or decided
    for ps in case.sick:
        found = _probe_findings(case, ps, cleared, case.splits)
        decided = decided or bool(found) or bool(case.splits) or bool(cleared)
        findings.extend(found)
    # By identity: a fleet's probes share names across vantage points.
    symptoms = {id(ps.probe): ps for ps in case.sick}
    for p in case.obs.probes:
        mine = symptoms.get(id(p))
        for found_p in (_stream_loss(case, p, mine, findings, cleared),
                        _setup(case, p, mine, findings, cleared)):
            if found_p is not None:
                decided = True
                findings.append(found_p)
    # A stall on a stream that loses packets is a retransmission waiting out its timeout
    # (200 ms at least, doubling with each loss of the same segment).
    for stall in [f for f in findings if f.cause is STREAM_STALLS]:
        loss = _loss_on_way(findings, stall.probes[0].probe)
        if loss is not None and STREAM_STALLS in loss.cause.absorbs:
            loss.absorb(stall)
    return Outcome.of("network", findings, cleared + case.splits, decided)
