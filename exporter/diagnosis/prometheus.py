"""The Prometheus source: :class:`Observations` for a window ending at a given time, from
PromQL over any Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir,
VictoriaMetrics). The queries are in :mod:`exporter.diagnosis.promqueries`; this module runs
them and puts the answers into the windows the chain reads.

Across a fleet, the ``site`` / ``vantage`` external labels of the edge servers stay on every
window, so the chain can tell a probe slow from one carrier's vantage point from the same
probe fast beside the engine. What Prometheus has no series for stays None (or 0 for
counts), so the chain concludes ``no_data`` rather than guessing.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from exporter.config.models import Config, ProbeConfig
from exporter.diagnosis import promqueries as pq
from exporter.diagnosis.observations import (
    EngineWindow,
    GpuWindow,
    Observations,
    PathWindow,
    ProbeWindow,
)
from exporter.diagnosis.promapi import PromClient, PrometheusError, Sample
from exporter.metrics import ProbeOutcome

__all__ = ["PrometheusError", "PrometheusSource", "observe"]

Key = tuple[str, ...]
Results = Mapping[str, list[Sample]]
#: Queries in flight at once: enough that a remote Mimir answers in about one round trip
#: per layer, few enough not to look like a flood to its limits.
PARALLEL = 8


def keyed(samples: Iterable[Sample], key: Key) -> dict[Key, float | None]:
    return {tuple(s.labels.get(k, "") for k in key): s.value for s in samples}


def count(value: float | None) -> int:
    """increase() extrapolates to the window's edges: 9.99 requests were 10."""
    return max(0, round(value)) if value is not None else 0


def per_second(total: float | None, seconds: float) -> float | None:
    return total / seconds if total is not None and seconds > 0 else None


def mean(total: float | None, n: float | None) -> float | None:
    if total is None or not n:
        return None
    return total / n


def covered(steps: float | None, config: Config) -> float | None:
    """Seconds of history a baseline stands on (``promqueries.coverage``); None under
    ``diagnosis.min_baseline``, as the embedded source has no baseline until then."""
    if steps is None:
        return None
    seconds = steps * config.diagnosis.baseline_step
    return seconds if seconds >= config.diagnosis.min_baseline else None


class PrometheusSource:
    """Observations from one Prometheus-compatible API; ``config`` gives the SLOs, the
    thresholds the queries need (stall length, throttle share) and the baseline spans."""

    def __init__(self, client: PromClient, config: Config) -> None:
        self.client = client
        self.config = config

    def run(self, at: dt.datetime, window: float) -> dict[str, list[Sample]]:
        queries = pq.all_queries(window, self.config)
        when = at.timestamp()
        pool = ThreadPoolExecutor(PARALLEL)
        try:
            answers = pool.map(lambda e: self.client.query(e, when), queries.values())
            return dict(zip(queries, answers, strict=True))
        finally:
            # After the first error the rest would only repeat it: cancel what has not
            # started, so an unreachable source costs one timeout, not one per query.
            pool.shutdown(wait=False, cancel_futures=True)

    def observe(self, at: dt.datetime, window: float) -> Observations:
        r = self.run(at, window)
        return Observations(
            at=at,
            window=window,
            source="prometheus",
            probes=tuple(_probes(r, self.config)),
            paths=tuple(_paths(r, self.config)),
            engines=tuple(_engines(r, window, self.config)),
            gpus=tuple(_gpus(r)),
            failing_checks=_failing_checks(r),
        )


def observe(base_url: str, config: Config, at: dt.datetime, window: float,
            timeout: float = 30.0) -> Observations:
    """One window from the API at ``base_url``; raises PrometheusError (one line)."""
    return PrometheusSource(PromClient(base_url, timeout), config).observe(at, window)


# --- probes -------------------------------------------------------------------------------


def _stalls(buckets: list[Sample], key: Key, threshold: float) -> dict[Key, int]:
    """Requests whose longest gap was over ``threshold``: all of them minus those in the
    largest bucket at or under it. The ``le`` strings are compared as numbers ("2" is
    "2.0"), which PromQL label matching could not do."""
    found: dict[Key, dict[float, float]] = {}
    for s in buckets:
        if s.value is None:
            continue
        k = tuple(s.labels.get(x, "") for x in key)
        found.setdefault(k, {})[float(s.labels.get("le", "nan"))] = s.value
    out: dict[Key, int] = {}
    for k, by_le in found.items():
        total = by_le.get(math.inf)
        if total is None:
            continue
        under = [le for le in by_le if le <= threshold]
        out[k] = count(total - (by_le[max(under)] if under else 0.0))
    return out


def _probe_config(config: Config) -> dict[str, ProbeConfig]:
    return {p.name: p for p in config.probes}


def _probes(r: Results, config: Config) -> list[ProbeWindow]:
    key = pq.PROBE_KEY
    outcomes: dict[Key, dict[str, int]] = {}
    for s in r["probe_outcomes"]:
        k = tuple(s.labels.get(x, "") for x in key)
        n = count(s.value)
        if n:
            outcomes.setdefault(k, {})[s.labels.get("outcome", "")] = n
        else:
            outcomes.setdefault(k, {})
    stat = {name: keyed(r[name], key) for name in (
        "probe_ttft_p95", "probe_tpot_p95", "probe_itl_p99", "probe_connect_p95",
        "probe_prompt_tokens", "probe_prompt_tokens_before", "probe_ok_before",
        "probe_ttft_baseline", "probe_tpot_baseline", "probe_baseline_steps")}
    stalls = _stalls(r["probe_stall_buckets"], key, config.alerting.stall_seconds)
    seen = set(outcomes) | {k for name in ("probe_ttft_p95", "probe_tpot_p95")
                            for k in stat[name]}
    probes = _probe_config(config)
    out = []
    for k in sorted(seen):
        labels = dict(zip(key, k, strict=True))
        got = outcomes.get(k, {})
        probe = probes.get(labels["probe"])
        slo = probe.slo if probe is not None else None
        ok = got.get(ProbeOutcome.OK.value, 0)
        ready = covered(stat["probe_baseline_steps"].get(k), config) is not None

        def base(name: str, k: Key = k, ready: bool = ready) -> float | None:
            return stat[name].get(k) if ready else None

        out.append(ProbeWindow(
            probe=labels["probe"],
            target=labels["target"],
            profile=labels["profile"] or "short",
            carrier=labels["carrier"],
            engine=labels["engine_target"],
            vantage=labels["vantage"],
            site=labels["site"],
            requests=sum(got.values()),
            outcomes=got,
            ttft_p95=stat["probe_ttft_p95"].get(k),
            tpot_p95=stat["probe_tpot_p95"].get(k),
            itl_p99=stat["probe_itl_p99"].get(k),
            stalls=stalls.get(k, 0),
            connect_p95=stat["probe_connect_p95"].get(k),
            prompt_tokens_mean=mean(stat["probe_prompt_tokens"].get(k), ok),
            ttft_p95_baseline=base("probe_ttft_baseline"),
            tpot_p95_baseline=base("probe_tpot_baseline"),
            prompt_tokens_baseline=mean(base("probe_prompt_tokens_before"),
                                        base("probe_ok_before")),
            slo_ttft=(slo.ttft_p95_seconds if slo and slo.ttft_p95_seconds is not None
                      else config.slo.ttft_p95_seconds),
            slo_tpot=(slo.tpot_p95_seconds if slo and slo.tpot_p95_seconds is not None
                      else config.slo.tpot_p95_seconds),
            timeout_total=probe.timeouts.total if probe is not None else None,
        ))
    return out


# --- paths --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Route:
    current: str | None
    best: str | None
    changes: int


def _routes(r: Results, order: list[str]) -> dict[Key, _Route]:
    key = pq.ROUTE_KEY
    classes: dict[Key, list[str]] = {}
    for s in r["route_class"]:
        classes.setdefault(tuple(s.labels.get(x, "") for x in key), []).append(
            s.labels.get("route_class", ""))
    best = keyed(r["route_best_rank"], key)
    changes = keyed(r["route_changes"], key)

    def rank(cls: str) -> int:
        # Classes outside the order (unknown) sort as the worst: never hide a bad route.
        return order.index(cls) if cls in order else len(order)

    out = {}
    for k in set(classes) | set(best) | set(changes):
        current = max(classes.get(k, []), key=rank, default=None)
        b = best.get(k)
        best_cls = order[int(b) - 1] if b is not None and 1 <= int(b) <= len(order) else None
        out[k] = _Route(current, best_cls, count(changes.get(k)))
    return out


def _paths(r: Results, config: Config) -> list[PathWindow]:
    key = pq.PATH_KEY
    stat = {name: keyed(r[name], key) for name in (
        "path_sent", "path_received", "path_rtt_mean", "path_jitter", "path_loss_baseline",
        "path_rtt_baseline", "path_in_peak", "path_baseline_steps")}
    routes = _routes(r, config.alerting.route_class_order)
    out = []
    for k in sorted(set(stat["path_sent"]) | set(stat["path_rtt_mean"])):
        labels = dict(zip(key, k, strict=True))
        sent = count(stat["path_sent"].get(k))
        received = count(stat["path_received"].get(k))
        route = routes.get(tuple(labels[x] for x in pq.ROUTE_KEY), _Route(None, None, 0))
        ready = covered(stat["path_baseline_steps"].get(k), config) is not None
        out.append(PathWindow(
            carrier=labels["carrier"],
            target=labels["target"],
            region=labels["region"],
            protocol=labels["protocol"] or "icmp",
            vantage=labels["vantage"],
            site=labels["site"],
            sent=sent,
            lost=max(0, sent - received),
            rtt_mean=stat["path_rtt_mean"].get(k),
            jitter=stat["path_jitter"].get(k),
            loss_baseline=stat["path_loss_baseline"].get(k) if ready else None,
            rtt_baseline=stat["path_rtt_baseline"].get(k) if ready else None,
            in_peak=bool(stat["path_in_peak"].get(k)),
            route_class=route.current,
            best_route_class=route.best,
            route_changes=route.changes,
        ))
    return out


# --- engines ------------------------------------------------------------------------------


def _engines(r: Results, window: float, config: Config) -> list[EngineWindow]:
    key = pq.ENGINE_KEY
    stat = {name: keyed(samples, key) for name, samples in r.items()
            if name.startswith("engine_") and name != "engine_itl_buckets"}
    stalls = _stalls(r["engine_itl_buckets"], key, config.alerting.stall_seconds)
    out = []
    for k in sorted(set(stat["engine_up"]) | set(stat["engine_requests"])):
        labels = dict(zip(key, k, strict=True))

        def get(name: str, k: Key = k) -> float | None:
            return stat[name].get(k)

        up = get("engine_up")
        requests = get("engine_requests")
        # Counts from before the window, over the history they actually cover.
        span = covered(get("engine_baseline_steps"), config)
        before = get("engine_requests_before") if span else None
        out.append(EngineWindow(
            engine=labels["target"],
            site=labels["site"],
            up=None if up is None else up >= 1,
            requests=requests or 0.0,
            queue_seconds=get("engine_queue_seconds"),
            prefill_seconds=get("engine_prefill_seconds"),
            decode_seconds=get("engine_decode_seconds"),
            ttft_p95=get("engine_ttft_p95"),
            itl_p95=get("engine_itl_p95"),
            stalls=stalls.get(k),
            running=get("engine_running"),
            waiting=get("engine_waiting"),
            running_max=get("engine_running_max"),
            kv_cache_usage=get("engine_kv_cache_usage"),
            preemptions=get("engine_preemptions") or 0.0,
            prompt_tokens_mean=mean(get("engine_prompt_tokens"), requests),
            prompt_tokens_baseline=mean(get("engine_prompt_tokens_before"), before),
            request_rate=per_second(requests, window),
            request_rate_baseline=per_second(before, span or 0.0),
            prefill_rate_max=get("engine_prefill_rate_max"),
        ))
    return out


# --- GPUs and checks ----------------------------------------------------------------------


def _gpus(r: Results) -> list[GpuWindow]:
    key = pq.GPU_KEY
    stat = {name: keyed(samples, key) for name, samples in r.items()
            if name.startswith("gpu_") and name != "gpu_clock_events"}
    events: dict[Key, list[str]] = {}
    for s in r["gpu_clock_events"]:
        events.setdefault(tuple(s.labels.get(x, "") for x in key), []).append(
            s.labels.get("reason", ""))
    seen = sorted(set(stat["gpu_utilization"]) | set(stat["gpu_memory_used_ratio"])
                  | set(events))
    index = key.index("gpu")
    # An index names a GPU only within one server: qualify it where two servers of a site
    # report the same one.
    sites: dict[tuple[str, str], set[Key]] = {}
    for k in seen:
        labels = dict(zip(key, k, strict=True))
        sites.setdefault((labels["site"], labels["gpu"]), set()).add(k)
    out = []
    for k in seen:
        labels = dict(zip(key, k, strict=True))
        shared = len(sites[(labels["site"], labels["gpu"])]) > 1
        out.append(GpuWindow(
            gpu=f"{labels['instance']}/{k[index]}" if shared else k[index],
            name=labels["name"],
            site=labels["site"],
            utilization=stat["gpu_utilization"].get(k),
            memory_used_ratio=stat["gpu_memory_used_ratio"].get(k),
            clock_events=tuple(sorted(events.get(k, []))),
            xid_errors=count(stat["gpu_xid_errors"].get(k)),
            dram_bandwidth_utilization=stat["gpu_dram_bandwidth"].get(k),
        ))
    return out


def _failing_checks(r: Results) -> tuple[str, ...]:
    return tuple(sorted({s.labels.get("check", "") for s in r["failing_checks"]} - {""}))
