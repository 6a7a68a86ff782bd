"""Every number the chain reads, declared once: one table per window kind, one row per field
of :mod:`exporter.diagnosis.observations`. Both sources evaluate these rows (the embedded
windows in ``embedded.py``, PromQL in ``promqueries.py``); a new observation is a field in
``observations.py`` and a row here, and tests/test_diagnosis_agreement.py covers it.

Names come from the schema (:mod:`exporter.metrics`) and the recorded series from
:mod:`exporter.metrics.names`; none is typed here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from exporter import metrics
from exporter.config.models import Config
from exporter.diagnosis.declare import (
    CHECK,
    CLIENTS,
    ENGINE,
    GPU,
    PATH,
    PROBE,
    ROUTE,
    Baseline,
    Diff,
    FirstOf,
    Grid,
    Increase,
    InPeak,
    Last,
    MaxOverTime,
    MeanOverTime,
    Observable,
    Over,
    PeakRatio,
    PerSecond,
    Quantile,
    Ratio,
    Seen,
    count,
)
from exporter.metrics import names

#: Connection-setup phases of llm_probe_phase_seconds (exporter/probing/timing.py) on a new
#: connection; a reused one has none of them.
SETUP_PHASES = ("dns", "connect", "tls")
NEW_CONNECTION = "new"

_OUTCOME = metrics.PROBE_REQUESTS.labels[-1]
_PHASE, _CONNECTION = metrics.PROBE_PHASE.labels[-2:]
_ROUTE_CLASS = metrics.PATH_ROUTE_INFO.labels[-1]
_METHOD = metrics.PATH_JITTER.labels[-1]
_REASON = metrics.GPU_CLOCK_EVENT.labels[-1]
#: The engine's models (and engine kind) under one target: the worst of them is its P95.
_MODEL = tuple(x for x in metrics.ENGINE_SERIES_LABELS if x not in ("target", "dp_rank"))
#: What tells one data-parallel rank of an engine apart: ranks are per model.
RANK = tuple(x for x in metrics.ENGINE_SERIES_LABELS if x in ("model", "dp_rank"))
By = Mapping[tuple[str, ...], float]


def _stall(config: Config) -> float:
    return config.alerting.stall_seconds


def _sum(family: metrics.Family) -> str:
    return f"{family.name}_sum"


def _count(family: metrics.Family) -> str:
    return f"{family.name}_count"


def outcomes(values: By, config: Config) -> dict[str, int]:
    return {k[0]: n for k, v in values.items() if (n := max(0, round(v)))}


def count_or_none(values: By, config: Config) -> int | None:
    return count(values, config) if () in values else None


def grid(values: By, config: Config) -> tuple[float, ...]:
    """The finite bucket bounds a histogram has in the window, lowest first: the grid its
    quantiles are interpolated on (what the evidence quotes as their resolution)."""
    return tuple(sorted({b for k in values if math.isfinite(b := float(k[0]))}))


def by_rank(values: By, config: Config) -> dict[tuple[str, str], float]:
    """Per (model, dp_rank), where the engine has data-parallel ranks at all."""
    return {(k[0], k[1]): v for k, v in values.items() if k[1]}


def or_zero(values: By, config: Config) -> float:
    return values.get((), 0.0)


def up(values: By, config: Config) -> bool | None:
    v = values.get(())
    return None if v is None else v >= 1


def in_peak(values: By, config: Config) -> bool:
    return bool(values.get(()))


def _rank(config: Config, cls: str) -> int:
    # Classes outside the order (unknown) sort as the worst: never hide a bad route.
    order = config.alerting.route_class_order
    return order.index(cls) if cls in order else len(order)


def current_class(values: By, config: Config) -> str | None:
    """The route class reported now; the worst of them should two be."""
    on = [k[0] for k, v in values.items() if v >= 1]
    return max(on, key=lambda c: _rank(config, c), default=None)


def best_class(values: By, config: Config) -> str | None:
    """The best class of the route order the route had (unknown ones rank nowhere)."""
    order = config.alerting.route_class_order
    seen = [k[0] for k, v in values.items() if v >= 1 and k[0] in order]
    return min(seen, key=order.index, default=None)


def clock_events(values: By, config: Config) -> tuple[str, ...]:
    """Reasons that held the clocks for over alerting.throttle_share of the window: NVML
    flips per sample, so one sample is no throttle (as LLMGPUThrottled)."""
    share = config.alerting.throttle_share
    return tuple(sorted(k[0] for k, v in values.items() if v > share))


_PART = metrics.PROBE_SERVER_TIMING.labels[-1]
_SPLIT = metrics.PROBE_SERVER_SPLIT.labels[-1]
_SEGMENTS = metrics.PROBE_TCP_SEGMENTS.labels[-1]
#: The exact split's parts of the TTFT; their sum over the window is those TTFTs' sum.
_TTFT_PARTS = tuple(p.value for p in (metrics.ServerPart.NETWORK_FRONTEND,
                                      metrics.ServerPart.QUEUE, metrics.ServerPart.PREFILL))


def _part(*parts: str) -> Increase:
    return Increase(_sum(metrics.PROBE_SERVER_TIMING), match=((_PART, parts),))


def _segments(kind: metrics.TcpSegments) -> Increase:
    return Increase(metrics.PROBE_TCP_SEGMENTS.name, match=((_SEGMENTS, kind.value),))


_REQUESTS = Increase(metrics.PROBE_REQUESTS.name)
_OK = Increase(metrics.PROBE_REQUESTS.name, match=((_OUTCOME, metrics.ProbeOutcome.OK.value),))
_PROMPT = Increase(metrics.PROBE_PROMPT_TOKENS.name)

PROBE_TABLE: tuple[Observable, ...] = (
    Observable("outcomes", PROBE, Increase(metrics.PROBE_REQUESTS.name, (_OUTCOME,)),
               outcomes),
    Observable("ttft_p95", PROBE, Quantile(0.95, metrics.PROBE_TTFT, recorded=names.PROBE_TTFT)),
    Observable("ttft_buckets", PROBE, Grid(metrics.PROBE_TTFT), grid),
    Observable("ttft_mean", PROBE, Ratio(Increase(_sum(metrics.PROBE_TTFT)),
                                         Increase(_count(metrics.PROBE_TTFT)))),
    Observable("tpot_p95", PROBE, Quantile(0.95, metrics.PROBE_TPOT, recorded=names.PROBE_TPOT)),
    Observable("itl_p99", PROBE, Quantile(0.99, metrics.PROBE_ITL)),
    Observable("stalls", PROBE, Over(metrics.PROBE_STALL, _stall), count),
    # P95 of a sum is not a sum of P95s; the sum is its upper bound, which both sources
    # compute from the per-phase histograms (and what "setup dominates TTFT" needs).
    Observable("connect_p95", PROBE, Quantile(
        0.95, metrics.PROBE_PHASE, ((_CONNECTION, NEW_CONNECTION), (_PHASE, SETUP_PHASES)),
        per=(_PHASE,), combine="sum")),
    Observable("prompt_tokens_mean", PROBE, Ratio(_PROMPT, _OK)),
    Observable("ttft_p95_baseline", PROBE, Baseline(
        Quantile(0.95, metrics.PROBE_TTFT), names.PROBE_TTFT_PEAK.baseline)),
    Observable("tpot_p95_baseline", PROBE, Baseline(
        Quantile(0.95, metrics.PROBE_TPOT), names.PROBE_TPOT_PEAK.baseline)),
    Observable("prompt_tokens_baseline", PROBE, Baseline(Ratio(_PROMPT, _OK))),
    Observable("exact_splits", PROBE, Increase(
        metrics.PROBE_SERVER_SPLIT.name, match=((_SPLIT, metrics.ServerSplit.EXACT.value),)),
        count),
    Observable("network_frontend_share", PROBE, Ratio(
        _part(metrics.ServerPart.NETWORK_FRONTEND.value), _part(*_TTFT_PARTS))),
    Observable("queue_share", PROBE, Ratio(
        _part(metrics.ServerPart.QUEUE.value), _part(*_TTFT_PARTS))),
    Observable("tcp_retransmit_ratio", PROBE, Ratio(
        _segments(metrics.TcpSegments.RETRANSMITTED), _segments(metrics.TcpSegments.SENT))),
    Observable("tcp_out_of_order_ratio", PROBE, Ratio(
        _segments(metrics.TcpSegments.OUT_OF_ORDER), _segments(metrics.TcpSegments.RECEIVED))),
)

_SENT = Increase(metrics.PATH_PACKETS_SENT.name)
_RECEIVED = Increase(metrics.PATH_PACKETS_RECEIVED.name)
_RTT = Ratio(Increase(_sum(metrics.PATH_RTT)), Increase(_count(metrics.PATH_RTT)))

PATH_TABLE: tuple[Observable, ...] = (
    Observable("sent", PATH, _SENT, count),
    Observable("lost", PATH, Diff(_SENT, _RECEIVED), count),
    Observable("rtt_mean", PATH, _RTT),
    Observable("jitter", PATH, MeanOverTime(
        metrics.PATH_JITTER.name, match=((_METHOD, metrics.PATH_JITTER_RFC3550),))),
    Observable("loss_baseline", PATH, Baseline(Ratio(Diff(_SENT, _RECEIVED), _SENT),
                                               names.PATH_LOSS_BASELINE)),
    Observable("rtt_baseline", PATH, Baseline(_RTT)),
    Observable("in_peak", PATH, InPeak(), in_peak),
    Observable("route_class", ROUTE, Last(metrics.PATH_ROUTE_INFO.name, (_ROUTE_CLASS,)),
               current_class),
    Observable("best_route_class", ROUTE, Seen(metrics.PATH_ROUTE_INFO.name, (_ROUTE_CLASS,)),
               best_class),
    Observable("route_changes", ROUTE, Increase(metrics.PATH_ROUTE_CHANGES.name), count),
)

#: Finished requests: the finish-reason counter, else the E2E histogram's count, else
#: Triton's succeeded counter (the first family the engine fills).
_FINISHED = FirstOf((Increase(metrics.ENGINE_REQUESTS_FINISHED.name),
                     Increase(_count(metrics.ENGINE_E2E)),
                     Increase(metrics.ENGINE_REQUESTS_SUCCEEDED.name)))
_ENGINE_PROMPT = Increase(metrics.ENGINE_PROMPT_TOKENS.name)

ENGINE_TABLE: tuple[Observable, ...] = (
    Observable("up", ENGINE, Last(metrics.ENGINE_UP.name), up),
    Observable("requests", ENGINE, _FINISHED, or_zero),
    # Triton has duration counters instead of histograms.
    Observable("queue_seconds", ENGINE, FirstOf((
        Increase(_sum(metrics.ENGINE_QUEUE_TIME)),
        Increase(metrics.ENGINE_QUEUE_DURATION.name)))),
    Observable("prefill_seconds", ENGINE, Increase(_sum(metrics.ENGINE_PREFILL_TIME))),
    Observable("decode_seconds", ENGINE, Increase(_sum(metrics.ENGINE_DECODE_TIME))),
    Observable("ttft_p95", ENGINE, Quantile(0.95, metrics.ENGINE_TTFT, per=_MODEL,
                                            recorded=names.ENGINE_TTFT)),
    Observable("itl_p95", ENGINE, Quantile(0.95, metrics.ENGINE_ITL, per=_MODEL,
                                           recorded=names.ENGINE_ITL)),
    Observable("ttft_buckets", ENGINE, Grid(metrics.ENGINE_TTFT), grid),
    Observable("itl_buckets", ENGINE, Grid(metrics.ENGINE_ITL), grid),
    Observable("ttft_mean", ENGINE, Ratio(Increase(_sum(metrics.ENGINE_TTFT)),
                                          Increase(_count(metrics.ENGINE_TTFT)))),
    Observable("stalls", ENGINE, Over(metrics.ENGINE_ITL, _stall), count_or_none),
    Observable("running", ENGINE, MeanOverTime(metrics.ENGINE_REQUESTS_RUNNING.name)),
    Observable("waiting", ENGINE, MeanOverTime(metrics.ENGINE_REQUESTS_WAITING.name)),
    # Each data-parallel rank has its own batch limit: the sum of their maxima is the
    # engine's, seen in practice over the whole history.
    Observable("running_max", ENGINE, MaxOverTime(
        metrics.ENGINE_REQUESTS_RUNNING.name, combine="sum", history=True)),
    # The fullest rank at its fullest: a preempting cache frees blocks as it preempts.
    Observable("kv_cache_usage", ENGINE, MaxOverTime(metrics.ENGINE_KV_CACHE_USAGE.name)),
    # Each rank's own queue and cache, for one rank far above its peers (engine/imbalance);
    # means over the window, as LLMEngineImbalance reads them: an imbalance is sustained.
    Observable("waiting_by_rank", ENGINE, MeanOverTime(
        metrics.ENGINE_REQUESTS_WAITING.name, RANK), by_rank),
    Observable("kv_by_rank", ENGINE, MeanOverTime(metrics.ENGINE_KV_CACHE_USAGE.name, RANK),
               by_rank),
    Observable("preemptions", ENGINE, Increase(metrics.ENGINE_PREEMPTIONS.name), or_zero),
    Observable("prompt_tokens_mean", ENGINE, Ratio(_ENGINE_PROMPT, _FINISHED)),
    Observable("prompt_tokens_baseline", ENGINE, Baseline(Ratio(_ENGINE_PROMPT, _FINISHED))),
    # What a prompt costs is judged at the engine's best prefill, so a prefill that slowed
    # is the engine's (slow_prefill), not the prompt's.
    Observable("prefill_rate_max", ENGINE, PeakRatio(
        metrics.ENGINE_PROMPT_TOKENS.name, _sum(metrics.ENGINE_PREFILL_TIME))),
    Observable("request_rate", ENGINE, PerSecond(_FINISHED)),
    Observable("request_rate_baseline", ENGINE, Baseline(PerSecond(_FINISHED))),
)

GPU_TABLE: tuple[Observable, ...] = (
    Observable("utilization", GPU, MeanOverTime(metrics.GPU_UTILIZATION.name)),
    # The peak of both: memory is judged full by its fullest moment.
    Observable("memory_used_ratio", GPU, Ratio(MaxOverTime(metrics.GPU_MEMORY_USED.name),
                                               MaxOverTime(metrics.GPU_MEMORY_TOTAL.name))),
    Observable("clock_events", GPU, MeanOverTime(metrics.GPU_CLOCK_EVENT.name, (_REASON,)),
               clock_events),
    Observable("xid_errors", GPU, Increase(metrics.GPU_XID_ERRORS.name, born=True), count),
    Observable("dram_bandwidth_utilization", GPU,
               MeanOverTime(metrics.GPU_DRAM_BANDWIDTH_UTILIZATION.name)),
)

_CLIENT_SENT = Increase(metrics.CLIENTS_SEGMENTS_SENT.name)
_CLIENT_RETRANS = Increase(metrics.CLIENTS_SEGMENTS_RETRANSMITTED.name)
_CLIENT_RTT = Ratio(Increase(_sum(metrics.CLIENTS_RTT)), Increase(_count(metrics.CLIENTS_RTT)))

#: Real users per carrier (the clients check): retransmissions are loss as TCP saw it on
#: the users' own streams, whatever ICMP to a chosen target says.
CLIENTS_TABLE: tuple[Observable, ...] = (
    Observable("connections", CLIENTS, MeanOverTime(metrics.CLIENTS_CONNECTIONS.name)),
    Observable("sent", CLIENTS, _CLIENT_SENT, count),
    Observable("retransmitted", CLIENTS, _CLIENT_RETRANS, count),
    Observable("rtt_p95", CLIENTS, Quantile(0.95, metrics.CLIENTS_RTT)),
    Observable("rtt_mean", CLIENTS, _CLIENT_RTT),
    Observable("retransmission_baseline", CLIENTS, Baseline(Ratio(_CLIENT_RETRANS,
                                                                  _CLIENT_SENT))),
    Observable("rtt_baseline", CLIENTS, Baseline(_CLIENT_RTT)),
    Observable("in_peak", CLIENTS, InPeak(), in_peak),
)


def runs(values: By, config: Config) -> dict[tuple[str, ...], float]:
    return dict(values)


#: What ``Observations.failing_checks`` is decided from (``failing``).
CHECK_TABLE: tuple[Observable, ...] = (
    Observable("check_runs", CHECK, Increase(
        metrics.EXPORTER_CHECK_RUNS.name, (metrics.EXPORTER_CHECK_RUNS.labels[-1],)), runs),
)

TABLES: tuple[tuple[Observable, ...], ...] = (
    PROBE_TABLE, PATH_TABLE, ENGINE_TABLE, GPU_TABLE, CLIENTS_TABLE, CHECK_TABLE)


def failing(runs: Mapping[tuple[str, ...], float]) -> bool:
    """Failed runs in the window and not one success: what the chain cannot decide from."""
    ok = sum(v for k, v in runs.items() if k[0] == metrics.CHECK_SUCCESS)
    return ok == 0 and any(v > 0 for k, v in runs.items() if k[0] != metrics.CHECK_SUCCESS)
