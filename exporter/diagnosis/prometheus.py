"""The Prometheus source: :class:`Observations` for a window ending at a given time, from
PromQL over any Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir,
VictoriaMetrics). The declarations are ``observations.py``'s, their queries
:mod:`exporter.diagnosis.promqueries`'; this module runs them and puts the answers into the
windows the chain reads.

Across a fleet, the ``site`` / ``vantage`` external labels of the edge servers stay on every
window, so the chain can tell a probe slow from one carrier's vantage point from the same
probe fast beside the engine. What Prometheus has no series for stays None (or 0 for
counts), so the chain concludes ``no_data`` rather than guessing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from exporter.config.models import Config
from exporter.diagnosis import declare, finish, observables, rows
from exporter.diagnosis import promqueries as pq
from exporter.diagnosis.alignment import probe_time
from exporter.diagnosis.declare import PROBE, Evaluation, Leaf, Values, WindowKey
from exporter.diagnosis.observations import (
    Observations,
    ProbeWindow,
)
from exporter.diagnosis.promapi import PromClient, PrometheusError, Sample

__all__ = ["PrometheusError", "PrometheusSource", "observe"]

Results = Mapping[pq.Planned, list[Sample]]
#: Queries in flight at once: enough that a remote Mimir answers in about one round trip
#: per layer, few enough not to look like a flood to its limits.
PARALLEL = 8


def _names(leaf: Leaf, kind: WindowKey) -> tuple[str, ...]:
    return (*kind.key, *getattr(leaf, "by", ()))


def values_of(samples: list[Sample], names: tuple[str, ...]) -> Values:
    """One leaf's answer keyed as the declarations key it (bucket bounds as numbers: "2"
    is "2.0", which PromQL label matching could not tell)."""
    out: Values = {}
    for s in samples:
        if s.value is None:
            continue
        out[tuple(declare.le_text(float(s.labels.get(n, "nan"))) if n == declare.LE
                  else s.labels.get(n, "") for n in names)] = s.value
    return out


def context(r: Results, config: Config, window: float) -> Evaluation:
    """The declarations' evaluation context over one set of answers."""
    cache: dict[pq.Planned, Values] = {}
    w = pq.Ranges.of(window, config)

    def answer(planned: pq.Planned, names: tuple[str, ...]) -> Values:
        got = cache.get(planned)
        if got is None:
            got = cache[planned] = values_of(r.get(planned, []), names)
        return got

    def seconds(kind: WindowKey, key: tuple[str, ...], base: bool, before: bool = True
                ) -> float | None:
        if not base:
            return window
        covered = answer((None, kind, before), kind.key).get(key)
        return covered if covered is not None and covered >= config.diagnosis.min_baseline \
            else None

    def leaf(x: Leaf, kind: WindowKey, base: bool) -> Values:
        got = answer((x, kind, base), _names(x, kind))
        if not base:
            return got
        before = not isinstance(x, declare.Recorded)
        n = len(kind.key)
        return {k: v for k, v in got.items() if seconds(kind, k[:n], True, before)}

    return Evaluation(leaf, seconds, config, pq.reads_recorded(w))


class PrometheusSource:
    """Observations from one Prometheus-compatible API; ``config`` gives the SLOs, the
    thresholds (stall length, throttle share) and the baseline spans."""

    def __init__(self, client: PromClient, config: Config) -> None:
        self.client = client
        self.config = config

    def run(self, at: dt.datetime, window: float) -> dict[pq.Planned, list[Sample]]:
        queries = pq.plan(window, self.config)
        when = at.timestamp()
        # The probes up to the engines' last scrape, as the embedded source reads them.
        probes_at = probe_time(self.client, when, self.config)

        def at_time(planned: pq.Planned) -> float:
            leaf, kind, base = planned
            return probes_at if kind == PROBE and leaf is not None and not base else when
        pool = ThreadPoolExecutor(PARALLEL)
        try:
            answers = pool.map(lambda kv: self.client.query(kv[1], at_time(kv[0])),
                               queries.items())
            return dict(zip(queries, answers, strict=True))
        finally:
            # After the first error the rest would only repeat it: cancel what has not
            # started, so an unreachable source costs one timeout, not one per query.
            pool.shutdown(wait=False, cancel_futures=True)

    def observe(self, at: dt.datetime, window: float) -> Observations:
        return observations(self.run(at, window), self.config, at, window)


def observations(r: Results, config: Config, at: dt.datetime, window: float) -> Observations:
    ctx = context(r, config, window)

    def got(table: tuple[declare.Observable, ...]) -> declare.Prepared:
        return declare.prepare(table, {o.field: declare.evaluate(o.expr, o.kind, ctx)
                                       for o in table})

    checks = got(observables.CHECK_TABLE)["check_runs"]
    paths, engines = got(observables.PATH_TABLE), got(observables.ENGINE_TABLE)
    clients = got(observables.CLIENTS_TABLE)
    return Observations(
        at=at,
        window=window,
        source="prometheus",
        probes=tuple(_probes(got(observables.PROBE_TABLE), config)),
        paths=tuple(rows.path(labels, paths, config)
                    for labels in rows.found(declare.PATH, paths, "sent", "rtt_mean")),
        engines=tuple(rows.engine(labels, engines, config)
                      for labels in rows.found(declare.ENGINE, engines, "up", "requests")),
        gpus=tuple(rows.gpus(got(observables.GPU_TABLE), config)),
        clients=tuple(rows.client(labels, clients, config)
                      for labels in rows.found(declare.CLIENTS, clients, "sent", "connections")),
        hosts=tuple(rows.hosts(got(observables.HOST_TABLE), config)),
        failing_checks=tuple(sorted({k[0] for k, runs in checks.items()
                                     if finish.failing(runs)} - {""})),
    )


def observe(base_url: str, config: Config, at: dt.datetime, window: float,
            timeout: float = 30.0) -> Observations:
    """One window from the API at ``base_url``; raises PrometheusError (one line)."""
    return PrometheusSource(PromClient(base_url, timeout), config).observe(at, window)


def _probes(got: declare.Prepared, config: Config) -> list[ProbeWindow]:
    configs = rows.by_name(config.probes)
    return [rows.probe(labels, got, configs.get(labels["probe"]), config)
            for labels in rows.found(declare.PROBE, got, "outcomes", "ttft_p95", "tpot_p95")]
