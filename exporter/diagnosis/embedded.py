"""The embedded source: the declarations of ``observations.py`` evaluated over the exporter's
own windows (``windows.History``) -> ``Observations``.

Each leaf is computed the way PromQL computes it over the same samples (increases,
``histogram_quantile`` over summed bucket increases, ``avg_over_time``), so both sources
hand the chain the same numbers (tests/test_diagnosis_agreement.py). What the history cannot
give yet (a baseline before ``diagnosis.min_baseline`` of off-peak time before the window, a
family no check fills) is absent.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

from exporter import metrics
from exporter.config.models import Config, ProbeConfig
from exporter.diagnosis import declare, finish, observables, rows, stats
from exporter.diagnosis.alignment import probe_windows
from exporter.diagnosis.declare import (
    Evaluation,
    Grid,
    Increase,
    InPeak,
    Last,
    Leaf,
    MaxOverTime,
    MeanOverTime,
    PeakRatio,
    Quantile,
    Seen,
    Values,
    WindowKey,
)
from exporter.diagnosis.observations import (
    ClientWindow,
    Observations,
    PathWindow,
    ProbeWindow,
)
from exporter.diagnosis.stats import Key
from exporter.diagnosis.windows import History, OffPeak, Snapshot, Window


def _wanted(labels: stats.Labels, match: declare.Match) -> bool:
    have = stats._as_dict(labels)
    for name, want in match:
        got = have.get(name, "")
        if (got != want) if isinstance(want, str) else (got not in want):
            return False
    return True


# Every evaluation groups the same few thousand series by the same few label lists.
@lru_cache(maxsize=1 << 16)
def _key(labels: stats.Labels, le: float | None, names: tuple[str, ...]) -> tuple[str, ...]:
    have = stats._as_dict(labels)
    return tuple(declare.le_text(le if le is not None else float("nan"))
                 if n == declare.LE else have.get(n, "") for n in names)


def _group(items: Iterable[tuple[Key, float]], names: tuple[str, ...], match: declare.Match,
           combine: str = "sum") -> Values:
    return _group_plain(((_key(k[1], k[2], names), v) for k, v in items
                         if _wanted(k[1], match)), combine)


@dataclass
class Evaluator:
    """The leaves over one window, its baseline and (for history-long maxima) the history;
    ``history`` is None for a window read on its own (a sparkline's step)."""

    window: Window
    baseline: OffPeak
    history: History | None
    config: Config
    _everything: list[Snapshot] | None = field(default=None, repr=False)
    # Several declarations read one leaf (finished requests: five of them): compute once.
    _done: dict[tuple[Leaf, WindowKey, bool], Values] = field(default_factory=dict, repr=False)

    def context(self) -> Evaluation:
        return Evaluation(self.leaf, self.seconds, self.config)

    def seconds(self, kind: WindowKey, key: tuple[str, ...], base: bool) -> float | None:
        if not base:
            return self.window.span
        return self.baseline.seconds if self.baseline.ready else None

    def _snapshots(self) -> list[Snapshot]:
        if self._everything is None:
            self._everything = list(self.history.everything()) if self.history else []
        return self._everything

    def leaf(self, leaf: Leaf, kind: WindowKey, base: bool) -> Values:
        got = self._done.get((leaf, kind, base))
        if got is None:
            got = self._done[(leaf, kind, base)] = self._leaf(leaf, kind, base)
        return got

    def _leaf(self, leaf: Leaf, kind: WindowKey, base: bool) -> Values:
        w = self.window
        if base and not self.baseline.ready:
            return {}
        if isinstance(leaf, Increase):
            items = self.baseline.items(leaf.sample) if base else w.increase(leaf.sample)
            return _group(items, (*kind.key, *leaf.by), leaf.match)
        if isinstance(leaf, Quantile):
            return self._quantile(leaf, kind, base)
        if base:
            raise ValueError(f"no baseline of {leaf}")
        if isinstance(leaf, MeanOverTime):
            return _mean_over(w.over_time(leaf.sample).items(), (*kind.key, *leaf.by),
                              leaf.match)
        if isinstance(leaf, MaxOverTime):
            series = (_series_max(self._snapshots(), leaf.sample) if leaf.history else
                      ((k, max(vs)) for k, vs in w.over_time(leaf.sample).items()))
            return _group(series, kind.key, (), leaf.combine)
        if isinstance(leaf, Last):
            return _group(w.gauge(leaf.sample), (*kind.key, *leaf.by), (), leaf.combine)
        if isinstance(leaf, Seen):
            return _group(_series_max(self._snapshots(), leaf.sample),
                          (*kind.key, *leaf.by), (), "max")
        if isinstance(leaf, PeakRatio):
            return self._peak_ratio(leaf, kind)
        if isinstance(leaf, Grid):
            bounds = _group(w.increase(f"{leaf.family.name}_bucket"), (*kind.key, *leaf.by), ())
            return {(*k[:-1], declare.le_text(float(k[-1]))): 1.0 for k in bounds}
        if isinstance(leaf, InPeak):
            present = _group(w.gauge(kind.presence), kind.key, ())
            return {k: float(w.last.in_peak) for k in present}
        raise TypeError(leaf)

    def _peak_ratio(self, leaf: PeakRatio, kind: WindowKey) -> Values:
        """At each step boundary of the history (where a subquery evaluates), the increase
        from the newest snapshot at or before it (an instant selector's sample) back to the
        newest one a window before that."""
        snaps = self._snapshots()
        if not snaps:
            return {}
        times = [s.at for s in snaps]
        step, span = self.config.diagnosis.baseline_step, self.window.seconds
        end = self.window.last.at

        def at(t: float) -> Snapshot | None:
            i = bisect.bisect_right(times, t) - 1
            return snaps[i] if i >= 0 else None

        def increase(a: Snapshot, b: Snapshot, sample: str) -> Values:
            before = _group(a.items(sample), kind.key, ())
            return {k: v - before[k] for k, v in _group(b.items(sample), kind.key, ()).items()
                    if k in before}

        best: Values = {}
        t = math.floor(end / step) * step
        while t > end - self.config.diagnosis.history and t - span >= times[0]:
            b = at(t)
            t -= step
            # From the sample a window before the one read at t: the coarse snapshots are
            # a step apart at the exporter's own phase, so a window shorter than a step
            # still spans two of them (on the samples' grid this is the subquery's span).
            a = at(b.at - span) if b is not None else None
            if a is None or b is None or a is b:
                continue
            den = increase(a, b, leaf.den)
            for k, v in increase(a, b, leaf.num).items():
                if den.get(k, 0.0) > 0:
                    best[k] = max(best.get(k, -math.inf), v / den[k])
        return best

    def _quantile(self, leaf: Quantile, kind: WindowKey, base: bool) -> Values:
        sample = f"{leaf.family.name}_bucket"
        items = self.baseline.items(sample) if base else self.window.increase(sample)
        per = _group(items, (*kind.key, *leaf.per, declare.LE), leaf.match)
        counts: dict[tuple[str, ...], dict[float, float]] = {}
        for k, v in per.items():
            counts.setdefault(k[:-1], {})[float(k[-1])] = v
        n = len(kind.key)
        quantiles = ((k, stats.histogram_quantile(leaf.q, c)) for k, c in counts.items())
        return _group_plain(((k[:n], q) for k, q in quantiles if q is not None), leaf.combine)


def _group_plain(items: Iterable[tuple[tuple[str, ...], float]], combine: str) -> Values:
    out: Values = {}
    for k, v in items:
        out[k] = (out[k] + v if combine == "sum" else max(out[k], v)) if k in out else v
    return out


def _mean_over(series: Iterable[tuple[Key, list[float]]], names: tuple[str, ...],
               match: declare.Match) -> Values:
    """``avg_over_time`` of the sum over each key's series at each snapshot."""
    per: dict[tuple[str, ...], dict[int, float]] = {}
    for k, values in series:
        if not _wanted(k[1], match):
            continue
        at = per.setdefault(_key(k[1], k[2], names), {})
        # Align from the newest end: a series that appeared late has fewer values.
        n = len(values)
        for j, v in enumerate(values):
            at[j - n] = at.get(j - n, 0.0) + v
    return {k: sum(vs.values()) / len(vs) for k, vs in per.items() if vs}


def _series_max(snapshots: list[Snapshot], sample: str) -> Iterator[tuple[Key, float]]:
    """Each series' highest value over ``snapshots`` (coarse ones hold their minute's peak)."""
    peak: dict[Key, float] = {}
    for snap in snapshots:
        for k, v in snap.items(sample):
            if v > peak.get(k, -float("inf")):
                peak[k] = v
    return iter(peak.items())


def evaluate(table: tuple[declare.Observable, ...], ctx: Evaluation) -> declare.Prepared:
    values = {o.field: declare.evaluate(o.expr, o.kind, ctx) for o in table}
    return declare.prepare(table, values)


# --- the windows of the config ------------------------------------------------------------
def _probe(cfg: ProbeConfig, config: Config, got: declare.Prepared) -> ProbeWindow:
    found = next((k for f in got.values() for k in f if k[0] == cfg.name), None)
    labels = rows.labels_of(declare.PROBE, found) if found else {
        "probe": cfg.name, "target": urlsplit(cfg.url).netloc, "profile": cfg.profile,
        "carrier": cfg.carrier or "", "engine_target": cfg.engine or ""}
    return rows.probe(labels, got, cfg, config)


def _paths(config: Config, got: declare.Prepared) -> list[PathWindow]:
    if config.paths is None:
        return []
    return [rows.path({"carrier": carrier, "target": t.name, "region": t.region,
                       "protocol": t.protocol}, got, config)
            for carrier, targets in config.paths.carriers.items() for t in targets]


def _clients(config: Config, got: declare.Prepared) -> list[ClientWindow]:
    """Each configured carrier's real users, and those of no list's, where the check
    published them (a carrier no client reached yet has no series: no window)."""
    if config.clients is None:
        return []
    found = {k[0] for k in declare.keys(got, "sent", "connections")}
    return [rows.client({"carrier": carrier}, got, config)
            for carrier in (*config.clients.carriers, metrics.CLIENTS_OTHER_CARRIER)
            if carrier in found]


def failing_checks(w: Window, got: declare.Prepared) -> tuple[str, ...]:
    """Checks that did not once succeed in the window but failed in it, or never ran while
    the window was full: what the chain cannot decide from (``exporter/no_data``)."""
    failing = {k[0] for k, runs in got["check_runs"].items() if finish.failing(runs)}
    if w.span >= w.seconds:
        totals = _group(w.gauge(declare.CHECK.presence), declare.CHECK.key, ())
        failing |= {k[0] for k, n in totals.items() if n == 0}
    return tuple(sorted(failing))


def observe(history: History, config: Config, now: float, seconds: float | None = None
            ) -> Observations:
    """The window ending at ``now`` (``seconds`` long, else the diagnosis window) as the
    chain's input."""
    span = config.diagnosis.window if seconds is None else seconds
    w = history.window_at(now, span)
    if w is None:
        at = dt.datetime.fromtimestamp(now, dt.UTC)
        return Observations(at=at, window=span, source="exporter")
    return observe_window(w, config, now, history.baseline, history, probe_windows(w, config))


def observe_window(
    w: Window, config: Config, now: float, base: OffPeak, history: History | None,
    probes: Mapping[str, Window] | None = None,
) -> Observations:
    """Every layer's statistics over ``w`` (the diagnosis window, or one sparkline step,
    which has no history: no history-long maxima); a probe named in ``probes`` over its
    window there instead (``alignment.py``)."""
    ctx = Evaluator(w, base, history, config).context()
    engines = evaluate(observables.ENGINE_TABLE, ctx)
    # Probes sharing an aligned window share one evaluation of the probe table.
    by_window: dict[int, declare.Prepared] = {}

    def probe_values(name: str) -> declare.Prepared:
        pw = (probes or {}).get(name, w)
        if id(pw) not in by_window:
            c = ctx if pw is w else Evaluator(pw, base, history, config).context()
            by_window[id(pw)] = evaluate(observables.PROBE_TABLE, c)
        return by_window[id(pw)]
    return Observations(
        at=dt.datetime.fromtimestamp(now, dt.UTC),
        window=w.seconds,
        source="exporter",
        probes=tuple(_probe(p, config, probe_values(p.name)) for p in config.probes),
        paths=tuple(_paths(config, evaluate(observables.PATH_TABLE, ctx))),
        engines=tuple(rows.engine({"target": e.name}, engines, config) for e in config.engines),
        gpus=tuple(rows.gpus(evaluate(observables.GPU_TABLE, ctx), config)),
        clients=tuple(_clients(config, evaluate(observables.CLIENTS_TABLE, ctx))),
        hosts=tuple(rows.hosts(evaluate(observables.HOST_TABLE, ctx), config)),
        failing_checks=failing_checks(w, evaluate(observables.CHECK_TABLE, ctx)),
    )
