"""The embedded source: the exporter's own windows (``windows.History``) -> ``Observations``.

Each statistic is the one the Prometheus source reads through PromQL over the same families
(increases, ``histogram_quantile`` over summed bucket increases, ``avg_over_time``), so both
sources hand the chain the same numbers for the same samples. What the history cannot give
yet (a baseline before ``diagnosis.min_baseline`` of off-peak time before the window, a
family no check fills) is None.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from exporter import metrics
from exporter.config.models import Config, EngineConfig, ProbeConfig
from exporter.diagnosis import stats
from exporter.diagnosis.observations import (
    EngineWindow,
    GpuWindow,
    Observations,
    PathWindow,
    ProbeWindow,
)
from exporter.diagnosis.stats import Key
from exporter.diagnosis.windows import Baseline, History, Snapshot, Window

#: Connection-setup phases of llm_probe_phase_seconds (exporter/probing/timing.py) on a new
#: connection; a reused one has none of them.
SETUP_PHASES = ("dns", "connect", "tls")
NEW_CONNECTION = "new"

# Label names, from the schema (never typed here).
_PROBE, _PROBE_TARGET = metrics.PROBE_LABELS[:2]
_OUTCOME = metrics.PROBE_REQUESTS.labels[-1]
_PHASE, _CONNECTION = metrics.PROBE_PHASE.labels[-2:]
(_TARGET,) = metrics.ENGINE_TARGET_LABELS
_PATH_TARGET = metrics.PATH_LABELS[1]
_ROUTE_CLASS = metrics.PATH_ROUTE_INFO.labels[-1]
_METHOD = metrics.PATH_JITTER.labels[-1]
_GPU, _GPU_NAME = metrics.GPU_LABELS[0], metrics.GPU_LABELS[-1]
_REASON = metrics.GPU_CLOCK_EVENT.labels[-1]
_CHECK, _CHECK_OUTCOME = metrics.EXPORTER_CHECK_RUNS.labels


def _bucket(f: metrics.Family) -> str:
    return f"{f.name}_bucket"


def _sum(f: metrics.Family) -> str:
    return f"{f.name}_sum"


def _count(f: metrics.Family) -> str:
    return f"{f.name}_count"


def _int(v: float | None) -> int:
    return round(v) if v is not None else 0


def quantile(
    q: float, items: Iterable[tuple[Key, float]], match: dict[str, str]
) -> float | None:
    return stats.histogram_quantile(q, stats.buckets(items, match))


def _mean_over(
    window: Window, sample: str, match: dict[str, str],
    series: Iterable[tuple[Key, list[float]]] | None = None,
) -> float | None:
    """``avg_over_time`` of the sum over the matching series at each snapshot (among
    ``series``, a part of the window's, where given)."""
    per_snapshot: dict[int, list[float]] = {}
    for key, values in window.over_time(sample).items() if series is None else series:
        if not stats.matches(key[1], match):
            continue
        # Align from the newest end: a series that appeared late has fewer values.
        n = len(values)
        for j, v in enumerate(values):
            per_snapshot.setdefault(j - n, []).append(v)
    if not per_snapshot:
        return None
    combined = [sum(vs) for vs in per_snapshot.values()]
    return sum(combined) / len(combined)


def _max_over(window: Window, sample: str, match: dict[str, str]) -> float | None:
    """``max_over_time`` of the highest matching series: the fullest rank at its fullest."""
    values = [v for key, vs in window.over_time(sample).items()
              if stats.matches(key[1], match) for v in vs]
    return max(values) if values else None


def _over(bucket_increases: list[tuple[Key, float]], match: dict[str, str],
          threshold: float) -> int | None:
    """Observations over ``threshold`` (over the highest bucket bound at or under it)."""
    counts = stats.buckets(bucket_increases, match)
    if not counts:
        return None
    return _int(max(counts.values()) - stats.below(counts, threshold))


def _baseline(base: Baseline, sample: str, match: dict[str, str]) -> float | None:
    return stats.total(base.items(sample), match) if base.ready else None


# --- probes -------------------------------------------------------------------------------
def probe_window(cfg: ProbeConfig, config: Config, w: Window, base: Baseline) -> ProbeWindow:
    match = {_PROBE: cfg.name}

    def inc(sample: str) -> list[tuple[Key, float]]:
        return w.part(sample, _PROBE, cfg.name)
    outcomes = {
        outcome: _int(v)
        for outcome, v in stats.by_label(
            inc(metrics.PROBE_REQUESTS.name), match, _OUTCOME
        ).items()
    }
    ok = outcomes.get(metrics.ProbeOutcome.OK.value, 0)
    target = next(
        (stats.label(k[1], _PROBE_TARGET) for k, _ in w.gauge(metrics.PROBE_REQUESTS.name)
         if stats.matches(k[1], match)),
        urlsplit(cfg.url).netloc,
    )
    stalls = _over(inc(_bucket(metrics.PROBE_STALL)), match, config.alerting.stall_seconds) or 0
    phases = inc(_bucket(metrics.PROBE_PHASE))
    setup = [
        quantile(0.95, phases, {**match, _PHASE: p, _CONNECTION: NEW_CONNECTION})
        for p in SETUP_PHASES
    ]
    present = [s for s in setup if s is not None]
    # P95 of a sum is not a sum of P95s; the sum is its upper bound, which both sources
    # can compute from per-phase histograms (and what "setup dominates TTFT" needs).
    connect_p95 = sum(present) if present else None
    prompt = stats.total(inc(metrics.PROBE_PROMPT_TOKENS.name), match)
    ok_match = {**match, _OUTCOME: metrics.ProbeOutcome.OK.value}
    base_ok = _baseline(base, metrics.PROBE_REQUESTS.name, ok_match)
    base_prompt = _baseline(base, metrics.PROBE_PROMPT_TOKENS.name, match)
    ttft_base = tpot_base = None
    if base.ready:
        ttft_base = quantile(0.95, base.items(_bucket(metrics.PROBE_TTFT)), match)
        tpot_base = quantile(0.95, base.items(_bucket(metrics.PROBE_TPOT)), match)
    return ProbeWindow(
        probe=cfg.name,
        target=target,
        profile=cfg.profile,
        carrier=cfg.carrier or "",
        engine=cfg.engine or "",
        requests=sum(outcomes.values()),
        outcomes=outcomes,
        ttft_p95=quantile(0.95, inc(_bucket(metrics.PROBE_TTFT)), match),
        tpot_p95=quantile(0.95, inc(_bucket(metrics.PROBE_TPOT)), match),
        itl_p99=quantile(0.99, inc(_bucket(metrics.PROBE_ITL)), match),
        stalls=stalls,
        connect_p95=connect_p95,
        prompt_tokens_mean=stats.ratio(prompt, ok) if prompt else None,
        ttft_p95_baseline=ttft_base,
        tpot_p95_baseline=tpot_base,
        prompt_tokens_baseline=stats.ratio(base_prompt, base_ok) if base_prompt else None,
        slo_ttft=cfg.slo.ttft_p95_seconds or config.slo.ttft_p95_seconds,
        slo_tpot=cfg.slo.tpot_p95_seconds or config.slo.tpot_p95_seconds,
        timeout_total=cfg.timeouts.total,
    )


# --- engines ------------------------------------------------------------------------------
#: Finished requests: the finish-reason counter, else the E2E histogram's count, else
#: Triton's succeeded counter (the first family the engine fills).
_REQUEST_SAMPLES = (
    metrics.ENGINE_REQUESTS_FINISHED.name,
    _count(metrics.ENGINE_E2E),
    metrics.ENGINE_REQUESTS_SUCCEEDED.name,
)


def _first_total(
    sources: Iterable[list[tuple[Key, float]]], match: dict[str, str]
) -> float | None:
    for items in sources:
        found = stats.total(items, match)
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class HistoryFacts:
    """What the whole history says, gathered in one pass over it per evaluation."""

    #: engine target -> the most requests seen running at once (summed over ranks, models)
    running_max: dict[str, float]
    #: (carrier, target) -> every route class the route check reported
    route_classes: dict[tuple[str, str], set[str]]
    #: engine target -> the fastest prefill over one window's span (prefill_rates)
    prefill_rate_max: dict[str, float] = field(default_factory=dict)


def history_facts(history: History) -> HistoryFacts:
    running: dict[str, float] = {}
    routes: dict[tuple[str, str], set[str]] = {}
    carrier_key, target_key = metrics.ROUTE_LABELS
    for snap in history.everything():
        per = stats.by_label(snap.items(metrics.ENGINE_REQUESTS_RUNNING.name), {}, _TARGET)
        for target, v in per.items():
            running[target] = max(running.get(target, v), v)
        for k, v in snap.items(metrics.PATH_ROUTE_INFO.name):
            if v == 1:
                where = (stats.label(k[1], carrier_key), stats.label(k[1], target_key))
                routes.setdefault(where, set()).add(stats.label(k[1], _ROUTE_CLASS))
    return HistoryFacts(running, routes, prefill_rates(list(history.everything()),
                                                       history.window))


def prefill_rates(snaps: list[Snapshot], window: float) -> dict[str, float]:
    """Engine target -> the most prompt tokens per second of prefill time over any span of
    ``window`` in the history (each snapshot against the newest one a window older)."""
    prompt, prefill = metrics.ENGINE_PROMPT_TOKENS.name, _sum(metrics.ENGINE_PREFILL_TIME)

    def per(snap: Snapshot, sample: str) -> dict[str, float]:
        return stats.by_label(snap.items(sample), {}, _TARGET)

    best: dict[str, float] = {}
    i = 0
    for j, last in enumerate(snaps):
        while i + 1 < j and snaps[i + 1].at <= last.at - window:
            i += 1
        first = snaps[i]
        if i == j or first.at > last.at - window:
            continue
        tokens, seconds = per(last, prompt), per(last, prefill)
        tokens0, seconds0 = per(first, prompt), per(first, prefill)
        for target, t in tokens.items():
            dt_ = seconds.get(target, 0.0) - seconds0.get(target, 0.0)
            dn = t - tokens0.get(target, 0.0)
            if dt_ > 0 and dn > 0:
                best[target] = max(best.get(target, 0.0), dn / dt_)
    return best


def engine_window(
    cfg: EngineConfig, w: Window, base: Baseline, facts: HistoryFacts, stall_seconds: float
) -> EngineWindow:
    match = {_TARGET: cfg.name}

    def inc(sample: str) -> list[tuple[Key, float]]:
        return w.part(sample, _TARGET, cfg.name)
    up_values = [v for k, v in w.gauge(metrics.ENGINE_UP.name) if stats.matches(k[1], match)]
    requests = _first_total((inc(n) for n in _REQUEST_SAMPLES), match)
    queue = stats.total(inc(_sum(metrics.ENGINE_QUEUE_TIME)), match)
    if queue is None:
        queue = stats.total(inc(metrics.ENGINE_QUEUE_DURATION.name), match)
    prompt = stats.total(inc(metrics.ENGINE_PROMPT_TOKENS.name), match)
    base_requests = (
        _first_total((base.items(n) for n in _REQUEST_SAMPLES), match) if base.ready else None
    )
    base_prompt = _baseline(base, metrics.ENGINE_PROMPT_TOKENS.name, match)
    return EngineWindow(
        engine=cfg.name,
        target=cfg.name,
        up=(up_values[0] == 1) if up_values else None,
        requests=requests or 0.0,
        queue_seconds=queue,
        prefill_seconds=stats.total(inc(_sum(metrics.ENGINE_PREFILL_TIME)), match),
        decode_seconds=stats.total(inc(_sum(metrics.ENGINE_DECODE_TIME)), match),
        ttft_p95=quantile(0.95, inc(_bucket(metrics.ENGINE_TTFT)), match),
        itl_p95=quantile(0.95, inc(_bucket(metrics.ENGINE_ITL)), match),
        stalls=_over(inc(_bucket(metrics.ENGINE_ITL)), match, stall_seconds),
        running=_mean_over(w, metrics.ENGINE_REQUESTS_RUNNING.name, match),
        waiting=_mean_over(w, metrics.ENGINE_REQUESTS_WAITING.name, match),
        running_max=facts.running_max.get(cfg.name),
        kv_cache_usage=_max_over(w, metrics.ENGINE_KV_CACHE_USAGE.name, match),
        preemptions=stats.total(inc(metrics.ENGINE_PREEMPTIONS.name), match) or 0.0,
        prompt_tokens_mean=stats.ratio(prompt, requests),
        prompt_tokens_baseline=stats.ratio(base_prompt, base_requests),
        request_rate=stats.ratio(requests, w.span),
        request_rate_baseline=stats.ratio(base_requests, base.seconds) if base.ready else None,
        prefill_rate_max=facts.prefill_rate_max.get(cfg.name),
    )


# --- paths --------------------------------------------------------------------------------
def _route_classes(items: Iterable[tuple[Key, float]], match: dict[str, str]) -> list[str]:
    return [
        stats.label(k[1], _ROUTE_CLASS)
        for k, v in items
        if v == 1 and stats.matches(k[1], match)
    ]


def path_window(
    carrier: str, target: str, region: str, protocol: str, config: Config, w: Window,
    base: Baseline, facts: HistoryFacts,
) -> PathWindow:
    labels = dict(zip(metrics.PATH_LABELS, (carrier, target, region, protocol), strict=True))
    route = dict(zip(metrics.ROUTE_LABELS, (carrier, target), strict=True))

    def inc(sample: str) -> list[tuple[Key, float]]:
        return w.part(sample, _PATH_TARGET, target)

    sent = stats.total(inc(metrics.PATH_PACKETS_SENT.name), labels) or 0.0
    received = stats.total(inc(metrics.PATH_PACKETS_RECEIVED.name), labels) or 0.0
    rtt_sum = stats.total(inc(_sum(metrics.PATH_RTT)), labels)
    rtt_n = stats.total(inc(_count(metrics.PATH_RTT)), labels)
    def baseline(sample: str) -> float | None:
        return stats.total(base.part(sample, _PATH_TARGET, target), labels) if base.ready else None

    b_sent = baseline(metrics.PATH_PACKETS_SENT.name)
    b_recv = baseline(metrics.PATH_PACKETS_RECEIVED.name)
    b_rtt_sum = baseline(_sum(metrics.PATH_RTT))
    b_rtt_n = baseline(_count(metrics.PATH_RTT))
    jitter_match = {**labels, _METHOD: metrics.PATH_JITTER_RFC3550}
    jitter = w.over_time_part(metrics.PATH_JITTER.name, _PATH_TARGET, target)
    current = _route_classes(w.last_part(metrics.PATH_ROUTE_INFO.name, _PATH_TARGET, target), route)
    order = config.alerting.route_class_order
    seen = facts.route_classes.get((carrier, target), set())
    ranked = sorted((c for c in seen if c in order), key=order.index)
    changes = stats.total(inc(metrics.PATH_ROUTE_CHANGES.name), route)
    return PathWindow(
        carrier=carrier,
        target=target,
        region=region,
        protocol=protocol,
        sent=_int(sent),
        lost=max(0, _int(sent - received)),
        rtt_mean=stats.ratio(rtt_sum, rtt_n),
        jitter=_mean_over(w, metrics.PATH_JITTER.name, jitter_match, series=jitter),
        loss_baseline=(1 - b_recv / b_sent) if b_sent and b_recv is not None else None,
        rtt_baseline=stats.ratio(b_rtt_sum, b_rtt_n),
        in_peak=w.last.in_peak,
        route_class=current[0] if current else None,
        best_route_class=ranked[0] if ranked else None,
        route_changes=_int(changes),
    )


# --- gpus ---------------------------------------------------------------------------------
def gpu_windows(config: Config, w: Window) -> list[GpuWindow]:
    gpu_key = _GPU
    ids: dict[str, dict[str, str]] = {}
    for sample in (metrics.GPU_UTILIZATION.name, metrics.GPU_MEMORY_TOTAL.name):
        for k, _ in w.gauge(sample):
            ids.setdefault(stats.label(k[1], gpu_key), dict(k[1]))
    share = config.alerting.throttle_share
    out = []
    for gpu, labels in sorted(ids.items(), key=lambda kv: (len(kv[0]), kv[0])):
        match = {n: labels.get(n, "") for n in metrics.GPU_LABELS}
        xid = stats.total(w.part(metrics.GPU_XID_ERRORS.name, gpu_key, gpu), match)
        used = stats.total(w.gauge(metrics.GPU_MEMORY_USED.name), match)
        total = stats.total(w.gauge(metrics.GPU_MEMORY_TOTAL.name), match)
        events = []
        for reason in metrics.GPU_CLOCK_EVENT_REASONS:
            # NVML flips per sample: a reason counts when it held for the alerts' share.
            held = _mean_over(w, metrics.GPU_CLOCK_EVENT.name, {**match, _REASON: reason})
            if held is not None and held >= share:
                events.append(reason)
        out.append(GpuWindow(
            gpu=gpu,
            name=match.get(_GPU_NAME, ""),
            utilization=_mean_over(w, metrics.GPU_UTILIZATION.name, match),
            memory_used_ratio=stats.ratio(used, total),
            clock_events=tuple(events),
            xid_errors=_int(xid),
            dram_bandwidth_utilization=_mean_over(
                w, metrics.GPU_DRAM_BANDWIDTH_UTILIZATION.name, match
            ),
        ))
    return out


# --- checks -------------------------------------------------------------------------------
def failing_checks(w: Window) -> tuple[str, ...]:
    """Checks that did not once succeed in the window but failed in it, or never ran while
    the window was full: what the chain cannot decide from (``exporter/no_data``)."""
    runs = w.increase(metrics.EXPORTER_CHECK_RUNS.name)
    ok = stats.by_label(runs, {_CHECK_OUTCOME: metrics.CHECK_SUCCESS}, _CHECK)
    every = stats.by_label(runs, {}, _CHECK)
    failing = {c for c, n in every.items() if n > ok.get(c, 0.0) and ok.get(c, 0.0) == 0}
    if w.span >= w.seconds:
        totals = stats.by_label(w.last.items(metrics.EXPORTER_CHECK_RUNS.name), {}, _CHECK)
        failing |= {c for c, n in totals.items() if n == 0}
    return tuple(sorted(failing))


def observe(history: History, config: Config, now: float) -> Observations:
    """The window ending at ``now`` as the chain's input."""
    w = history.window_at(now)
    if w is None:
        at = dt.datetime.fromtimestamp(now, dt.UTC)
        return Observations(at=at, window=config.diagnosis.window, source="exporter")
    return observe_window(w, config, now, history.baseline, history_facts(history))


#: Facts of no history: what a window read on its own (a sparkline's step) is told.
NO_FACTS = HistoryFacts({}, {})


def observe_window(
    w: Window, config: Config, now: float, base: Baseline, facts: HistoryFacts
) -> Observations:
    """Every layer's statistics over ``w`` (the diagnosis window, or one sparkline step)."""
    paths = []
    if config.paths is not None:
        for carrier, targets in config.paths.carriers.items():
            for t in targets:
                paths.append(
                    path_window(carrier, t.name, t.region, t.protocol, config, w, base, facts)
                )
    return Observations(
        at=dt.datetime.fromtimestamp(now, dt.UTC),
        window=config.diagnosis.window,
        source="exporter",
        probes=tuple(probe_window(p, config, w, base) for p in config.probes),
        paths=tuple(paths),
        engines=tuple(engine_window(e, w, base, facts, config.alerting.stall_seconds)
                      for e in config.engines),
        gpus=tuple(gpu_windows(config, w)),
        failing_checks=failing_checks(w),
    )
