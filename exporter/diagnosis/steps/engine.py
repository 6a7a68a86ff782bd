"""Step 3: the engine. Down first; then where its time goes: queued (capacity) or inference,
and within inference prefill vs decode; KV cache near full with preemptions; one
data-parallel rank far above its peers (imbalance), which takes over a queue that is its."""

from __future__ import annotations

from collections.abc import Mapping

from exporter import metrics
from exporter.diagnosis.causes import (
    DOWN,
    FIRST_TOKEN,
    IMBALANCE,
    KV_CACHE_PRESSURE,
    QUEUEING,
    SLOW_DECODE,
    SLOW_PREFILL,
    SPEC_DECODE,
    TPOT,
    Cause,
)
from exporter.diagnosis.observations import EngineWindow
from exporter.diagnosis.result import Evidence
from exporter.diagnosis.steps import budget
from exporter.diagnosis.steps.base import (
    Case,
    EngineState,
    Finding,
    Outcome,
    Standing,
)
from exporter.diagnosis.steps.symptom import failures
from exporter.diagnosis.steps.words import pct, resolution, secs, strength

#: Evidence names: the families read and the arithmetic done on them.
QUEUE_SHARE = "queue / (queue + prefill + decode) of " + metrics.ENGINE_QUEUE_TIME.name
PER_REQUEST = "{} per request"
#: The same gauge's mean over the model's other data-parallel ranks.
PEERS = "{} mean of the other dp_ranks"
#: The exact split's queue part over the TTFTs it split, of a linked probe.
EXACT_QUEUE_SHARE = (f"queue / (network_frontend + queue + prefill) of "
                     f"{metrics.PROBE_SERVER_TIMING.name}")


def state(case: Case, e: EngineWindow) -> EngineState:
    probes = case.linked(e)
    mine = [p for p in case.obs.probes if e in case.engines_of(p)]
    slo_ttft = min([p.slo_ttft for p in mine] or [case.thresholds.slo_ttft])
    slo_tpot = min([p.slo_tpot for p in mine] or [case.thresholds.slo_tpot])
    # The engine's own numbers decide where it has them: a probe slow while the engine's own
    # TTFT is fine lost its time on the way (the client-minus-engine split), not here. Only
    # without them do the linked probes' open symptoms (those the network did not explain)
    # stand in.
    first = (e.ttft_p95 > slo_ttft if e.ttft_p95 is not None
             else any(s.open & FIRST_TOKEN for s in probes))
    decode = (e.itl_p95 > slo_tpot if e.itl_p95 is not None
              else any("tpot" in s.open for s in probes))
    own = (e.ttft_p95 or 0) > slo_ttft or (e.itl_p95 or 0) > slo_tpot
    return EngineState(e, probes, first, decode, slo_ttft, slo_tpot, own)


def _findings(case: Case, st: EngineState, cleared: list[Evidence],
              ranks: list[Finding]) -> list[Finding] | None:
    """The engine's findings besides ``ranks`` (its imbalanced ranks, which take over a queue
    that is theirs); None when the numbers needed to split its time are missing."""
    lines, e = case.thresholds, st.engine
    lab = {"engine": e.engine, "target": e.target}
    scope = {"engine": e.engine, "site": e.site}  # engine names repeat across sites
    out: list[Finding] = []

    def add(cause: Cause, headline: str, ev: list[Evidence], s: float,
            over_line: bool = st.own) -> None:
        out.append(Finding(cause, dict(scope), headline, ev, s, st.probes,
                           Standing.OVER_LINE if over_line else Standing.EXPLAINS))

    if e.up is False:
        add(DOWN, f"Engine {e.engine} is down (its metrics endpoint does not answer)",
            [case.evidence(metrics.ENGINE_UP.name, 0, lab, 1)], 0.95)
        return out
    for value, metric, slo, grid in (
            (e.ttft_p95, metrics.ENGINE_TTFT.name, st.slo_ttft, e.ttft_buckets),
            (e.itl_p95, metrics.ENGINE_ITL.name, st.slo_tpot, e.itl_buckets)):
        if value is not None:
            cleared.append(case.evidence(metric, value, lab, slo, grid=grid))
    # A full cache and a long queue are over their alerts' lines on their own (the engine
    # pages before the probes feel it); slow prefill or decode needs a slow engine.
    kv = e.kv_cache_usage
    if kv is not None and kv > lines.kv_cache_usage and e.preemptions > 0:
        add(KV_CACHE_PRESSURE, f"Engine {e.engine}'s KV cache is {pct(kv)} full with "
            f"{e.preemptions:.0f} preemption(s) in the window",
            [case.evidence(metrics.ENGINE_KV_CACHE_USAGE.name, kv, lab, lines.kv_cache_usage),
             case.evidence(metrics.ENGINE_PREEMPTIONS.name, e.preemptions, lab, 0)],
            strength(e.preemptions, 1.0, 0.75), over_line=True)
    # A part of the first token over its own line (the API server, a KV handover, a prefill
    # the prefix cache no longer spares) is a verdict whether or not the engine is slow yet,
    # as its alert pages.
    for why in budget.first_token(case, st, lab):
        add(why.cause, why.headline, why.evidence, why.strength, over_line=True)
    # Drafts accepted far less than off-peak are over their alert's line on their own; a
    # slow stream then gets the engine's decode as more evidence below. The probes' TPOT
    # shows it where the engine's inter-token latency may not: each step's gap stays.
    spec = budget.stream(case, st, lab)
    if spec is not None:
        add(spec.cause, spec.headline, spec.evidence, spec.strength, over_line=True)
        out[-1].narrower = TPOT
    total = e.engine_seconds
    known = total is not None and e.requests >= 1 and total > 0
    exact = _exact_queue(case, st, lab)
    if not known and exact is None:
        return (out or None) if st.slow else out
    # LLMEngineCapacityBound's condition: the engine's own histograms, over all requests.
    capacity = known and e.queue_share is not None and e.queue_share > lines.queue_share
    if exact is not None:
        # The engine's own timing of the symptomatic probes' requests: how much of their
        # first token they spent queued, exactly, rather than the engine-wide share.
        share, q = exact
    else:
        assert e.queue_share is not None
        share = e.queue_share
        q = case.evidence(QUEUE_SHARE, share, lab, lines.queue_share)
    if share > lines.queue_share:
        ev = [q]
        if e.waiting is not None:
            ev.append(case.evidence(metrics.ENGINE_REQUESTS_WAITING.name, e.waiting, lab, 0))
        if e.running is not None:
            ev.append(case.evidence(metrics.ENGINE_REQUESTS_RUNNING.name, e.running, lab,
                                    e.running_max))
        what = ("of the linked probes' TTFT queued (the engine's own timing of them)"
                if exact is not None else "of its time queueing")
        headline = (f"Engine {e.engine} spends {pct(share)} {what} "
                    f"({e.waiting or 0:.3g} waiting, {e.running or 0:.3g} running)")
        queued = [f for f in ranks if any(
            x.metric == metrics.ENGINE_REQUESTS_WAITING.name for x in f.evidence)]
        # Queued because the cache cannot admit more, or waiting for its KV: one cause.
        taker = next((f for f in out if QUEUEING in f.cause.absorbs), None)
        if taker is not None:
            taker.evidence.extend(ev)
            if taker.narrower is not None:  # a stream's cause: the queue's first tokens too
                taker.narrower = None
                taker.headline += ("; each answer takes more steps, and requests queue "
                                   f"behind them ({pct(share)} {what})")
        elif queued:  # the queue is one rank's: the cause is the imbalance
            queued[0].evidence.extend(ev)
        else:
            add(QUEUEING, headline, ev, strength(share, lines.queue_share),
                over_line=capacity or st.own)
        return out
    cleared.append(q)
    if not known:  # not queueing, exactly; prefill and decode need the engine's numbers
        return (out or None) if st.slow else out
    spec_slow = spec is not None and (st.slow_decode or any("tpot" in ps.open
                                                            for ps in st.probes))
    # A preempting cache recomputes what it preempted: its engine's time is not split.
    preempting = any(f.cause is KV_CACHE_PRESSURE for f in out)
    if preempting or not (st.slow or spec_slow):
        return out
    assert e.prefill_seconds is not None and e.decode_seconds is not None
    # Inference dominates: which half. Per-request means say where the time went; the
    # engine's own TTFT / ITL say whether it is over the line.
    n = e.requests
    if st.slow_first:
        ev = [case.evidence(PER_REQUEST.format(metrics.ENGINE_PREFILL_TIME.name),
                            e.prefill_seconds / n, lab)]
        coarse = ""
        if e.ttft_p95 is not None:
            ev.append(case.evidence(metrics.ENGINE_TTFT.name, e.ttft_p95, lab, st.slo_ttft,
                                    grid=e.ttft_buckets))
            coarse = resolution(e.ttft_p95, e.ttft_buckets, st.slo_ttft, "TTFT SLO")
        # Where the first token's time goes beyond prefill names the cause (found above,
        # with this as more evidence); else prefill is it, with how much of the excess it
        # accounts for.
        taken = next((f for f in out if SLOW_PREFILL in f.cause.absorbs), None)
        server = budget.instead_of_prefill(case, st, lab, e.prefill_seconds / n)
        if taken is not None:
            taken.evidence.extend(x for x in ev if x not in taken.evidence)
        elif server is not None:
            add(server.cause, server.headline, [*server.evidence, *ev], server.strength,
                over_line=False)
        else:
            add(SLOW_PREFILL, f"Engine {e.engine}'s prefill takes "
                f"{secs(e.prefill_seconds / n)} per request with little queueing "
                f"({pct(share)}){budget.accounts(e.prefill_seconds / n, budget.over_first(st))}"
                f"{coarse}", ev, strength(e.ttft_p95 or st.slo_ttft, st.slo_ttft, 0.6))
    if st.slow_decode or spec_slow:
        ev = [case.evidence(PER_REQUEST.format(metrics.ENGINE_DECODE_TIME.name),
                            e.decode_seconds / n, lab)]
        coarse = ""
        if e.itl_p95 is not None:
            ev.append(case.evidence(metrics.ENGINE_ITL.name, e.itl_p95, lab, st.slo_tpot,
                                    grid=e.itl_buckets))
            coarse = resolution(e.itl_p95, e.itl_buckets, st.slo_tpot, "TPOT SLO")
        stretched = next((f for f in out if SLOW_DECODE in f.cause.absorbs), None)
        drafts = next((f for f in out if f.cause is SPEC_DECODE), None)
        if drafts is not None:
            drafts.headline += coarse
            drafts.evidence.extend(x for x in ev if x not in drafts.evidence)
        elif stretched is not None:
            stretched.headline += (f"; its prefill chunks stretch the decode steps beside them "
                                   f"(inter-token P95 {secs(e.itl_p95 or 0)})")
            stretched.evidence.extend(x for x in ev if x not in stretched.evidence)
        else:
            add(SLOW_DECODE, f"Engine {e.engine} decodes slowly: inter-token P95 "
                f"{secs(e.itl_p95 or 0)} (SLO {secs(st.slo_tpot)}), decode "
                f"{secs(e.decode_seconds / n)} per request{coarse}", ev,
                strength(e.itl_p95 or st.slo_tpot, st.slo_tpot, 0.6))
    return out


def peers(by_rank: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    """Per (model, dp_rank), the mean of the same model's other ranks (none for a model
    with one rank)."""
    out: dict[tuple[str, str], float] = {}
    for (model, rank) in by_rank:
        others = [v for (m, r), v in by_rank.items() if m == model and r != rank]
        if others:
            out[(model, rank)] = sum(others) / len(others)
    return out


def imbalance(case: Case, st: EngineState) -> list[Finding]:
    """One finding per data-parallel rank whose mean queue or KV-cache usage is far above
    the mean of its model's other ranks: LLMEngineImbalance's condition. The others' mean,
    not their median: the alert computes the same number, and PromQL has no median of the
    other series; with two ranks, the commonest data-parallel size, they are one number."""
    lines, e = case.thresholds, st.engine
    waiting, kv = metrics.ENGINE_REQUESTS_WAITING.name, metrics.ENGINE_KV_CACHE_USAGE.name
    found: dict[str, Finding] = {}
    for by_rank, metric in ((e.waiting_by_rank, waiting), (e.kv_by_rank, kv)):
        for (model, rank), peer in sorted(peers(by_rank).items()):
            value = by_rank[(model, rank)]
            line = (max(lines.imbalance_min_waiting, lines.imbalance_ratio * peer)
                    if metric == waiting else peer + lines.imbalance_kv_gap)
            if value < line:
                continue
            labels = {"engine": e.engine, "target": e.target, "model": model, "dp_rank": rank}
            ev = [case.evidence(metric, value, labels, line),
                  case.evidence(PEERS.format(metric), peer, labels)]
            what = (f"{value:.3g} requests waiting on average against {peer:.3g} on its peers"
                    if metric == waiting else
                    f"its KV cache {pct(value)} used against {pct(peer)} on its peers")
            f = found.get(rank)
            if f is not None:
                f.headline += f", and {what}"
                f.evidence.extend(ev)
                f.strength = max(f.strength, strength(value, line))
                continue
            scope = {"engine": e.engine, "site": e.site, "dp_rank": rank}
            found[rank] = Finding(
                IMBALANCE, scope,
                f"Engine {e.engine}'s data-parallel rank {rank} ({model}) has {what}", ev,
                strength(value, line), st.probes, Standing.OVER_LINE)
    return list(found.values())


def _exact_queue(case: Case, st: EngineState, lab: dict[str, str]
                 ) -> tuple[float, Evidence] | None:
    """The largest queue share of the TTFT among the linked symptomatic probes the engine
    timed exactly (``split=exact`` on the evidence); None where none was."""
    shares = [(ps.probe.queue_share, ps.probe.probe) for ps in st.probes
              if ps.probe.exact_splits and ps.probe.queue_share is not None]
    if not shares:
        return None
    share, probe = max((v, name) for v, name in shares if v is not None)
    return share, case.evidence(EXACT_QUEUE_SHARE, share, {
        **lab, "probe": probe, "part": metrics.ServerPart.QUEUE.value,
        "split": metrics.ServerSplit.EXACT.value}, case.thresholds.queue_share)


def serving(case: Case, e: EngineWindow) -> bool:
    """Linked probes get answers: the engine serves even where its metrics do not answer,
    so a failing engine check is missing data, not an engine down."""
    mine = [p for p in case.obs.probes if e in case.engines_of(p)
            and p.requests >= case.thresholds.min_requests]
    return bool(mine) and all(failures(p) / p.requests <= case.thresholds.failure_ratio
                              for p in mine)


def evaluate(case: Case) -> Outcome:
    """Leaves the engines it could judge (``case.engines``) and those it could not
    (``case.unobservable``)."""
    findings: list[Finding] = []
    cleared: list[Evidence] = []
    for e in case.obs.engines:
        lab = {"engine": e.engine, "target": e.target}
        if e.up is None or (e.up is not False and case.failing("engine", e.engine)) or (
                e.up is False and serving(case, e)):
            # No numbers of this engine in the window: nothing to decide from.
            case.unobservable.append(e.engine)
            if e.up is False:
                cleared.append(case.evidence(metrics.ENGINE_UP.name, 0, lab, 1))
            continue
        st = state(case, e)
        ranks = imbalance(case, st) if e.up else []
        found = _findings(case, st, cleared, ranks)
        if found is None and not ranks:
            case.unobservable.append(e.engine)
            continue
        case.engines.append(st)
        findings.extend((*(found or ()), *ranks))
    return Outcome.of("engine", findings, cleared, bool(case.engines))
