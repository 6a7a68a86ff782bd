"""The vocabulary the chain's observations are declared in, once, as data.

A declaration names what to compute over a window (``Increase``, ``Quantile``,
``MeanOverTime``, ...), never how: the embedded windows (:mod:`exporter.diagnosis.embedded`)
and PromQL (:mod:`exporter.diagnosis.promqueries`) are two evaluators of the same leaves,
and the arithmetic on their values (ratios, fallbacks, per-second, counts over a threshold)
is done here, once, for both. So a number the chain reads cannot mean one thing from the
exporter and another from Prometheus; tests/test_diagnosis_agreement.py holds the two
evaluators to the same values on the same samples, declaration by declaration.

Every value is keyed by its ``WindowKey``'s labels (the window it fills: a probe, a path, an
engine, ...) followed by the leaf's ``by`` labels; a key no series gives is absent, never 0.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter import metrics
from exporter.config.models import Config
from exporter.diagnosis import stats
from exporter.metrics.names import FLEET, Quantiles

Values = dict[tuple[str, ...], float]
#: (label, its wanted value or any of several) pairs: hashable, so a leaf is a dict key.
Match = tuple[tuple[str, str | tuple[str, ...]], ...]


@dataclass(frozen=True)
class WindowKey:
    """A window kind: the labels one of its windows is told apart by, and the series whose
    presence says a window has data at a moment (what a baseline's coverage counts)."""

    name: str
    key: tuple[str, ...]
    presence: str


PROBE = WindowKey("probe", (*metrics.PROBE_LABELS, *FLEET), metrics.PROBE_REQUESTS.name)
PATH = WindowKey("path", (*metrics.PATH_LABELS, *FLEET), metrics.PATH_PACKETS_SENT.name)
ROUTE = WindowKey("route", (*metrics.ROUTE_LABELS, *FLEET), metrics.PATH_ROUTE_INFO.name)
ENGINE = WindowKey("engine", (*metrics.ENGINE_TARGET_LABELS, *FLEET), metrics.ENGINE_UP.name)
# GPU indexes repeat on every server, so the instance stays in the key (empty in the
# exporter's own samples).
GPU = WindowKey("gpu", ("instance", *metrics.GPU_LABELS, *FLEET), metrics.GPU_UTILIZATION.name)
# Summed over the watched ports: a carrier's users are one population whichever port.
CLIENTS = WindowKey("clients", (*metrics.CLIENTS_LABELS[:1], *FLEET),
               metrics.CLIENTS_SEGMENTS_SENT.name)
# One per exporter: the host it runs on (the engine's cgroup is a label of its pressure).
HOST = WindowKey("host", FLEET, metrics.HOST_CPUS.name)
CHECK = WindowKey("check", (metrics.EXPORTER_CHECK_RUNS.labels[0], *FLEET),
             metrics.EXPORTER_CHECK_RUNS.name)


# --- leaves: what each evaluator computes itself --------------------------------------------
@dataclass(frozen=True)
class Leaf:
    """One statistic both sources compute natively."""

    #: Over (start, end] of the window rather than from the sample at its start: the
    #: over-time functions, as Prometheus 3 selects a range (the increase needs the start).
    open_start = False


@dataclass(frozen=True)
class Increase(Leaf):
    """``sum by (key, by) (increase(sample{match}[window]))``; ``born``: a series that
    appears inside the window counts from zero (an XID), which ``increase()`` cannot see."""

    sample: str
    by: tuple[str, ...] = ()
    match: Match = ()
    born: bool = False


@dataclass(frozen=True)
class Quantile(Leaf):
    """``histogram_quantile(q, ...)`` over the window's bucket increases per key and
    ``per`` labels, then ``combine`` (max: the worst model; sum: phases added up) over
    ``per``. ``recorded``: the recorded series that is this statistic over names.RATE."""

    q: float
    family: metrics.Family
    match: Match = ()
    per: tuple[str, ...] = ()
    combine: str = "max"
    recorded: Quantiles | None = None


@dataclass(frozen=True)
class MeanOverTime(Leaf):
    """``avg_over_time`` of the sum of the key's series (one per key where it matters)."""

    sample: str
    by: tuple[str, ...] = ()
    match: Match = ()
    open_start = True


@dataclass(frozen=True)
class MaxOverTime(Leaf):
    """Each series' highest value in the window (``history``: in all the history kept),
    then ``combine`` over the key's series (sum: each data-parallel rank's own peak)."""

    sample: str
    combine: str = "max"
    history: bool = False
    open_start = True


@dataclass(frozen=True)
class Last(Leaf):
    """The gauge at the window's end, ``combine`` over the key's series."""

    sample: str
    by: tuple[str, ...] = ()
    combine: str = "max"


@dataclass(frozen=True)
class Seen(Leaf):
    """The highest value each ``by`` group had within ``alerting.route_lookback`` (the
    embedded source: within the history it keeps)."""

    sample: str
    by: tuple[str, ...]
    open_start = True


@dataclass(frozen=True)
class PeakRatio(Leaf):
    """The highest ``sum(increase(num)) / sum(increase(den))`` per key over any window-long
    span of the history, taken every ``diagnosis.baseline_step`` (a subquery's steps, so
    both sources read the same instants): the best the layer has done, e.g. an engine's
    fastest prefill in prompt tokens per second of prefill time."""

    num: str
    den: str


@dataclass(frozen=True)
class Recorded(Leaf):
    """A recorded series that is a ``Baseline``'s statistic, per key (the worst of the
    key's series): what a fleet's central store receives, read by PromQL over names.RATE
    windows. Its rule's span includes the window."""

    series: str


@dataclass(frozen=True)
class InPeak(Leaf):
    """1 while the exporter measuring the key's ``presence`` series is in a peak window."""


# --- arithmetic on leaves: done here, for both sources ------------------------------------
@dataclass(frozen=True)
class Ratio:
    num: Expr
    den: Expr


@dataclass(frozen=True)
class Diff:
    a: Expr
    b: Expr


@dataclass(frozen=True)
class FirstOf:
    """Per key, the first of ``options`` that has a value (the engine families differ)."""

    options: tuple[Expr, ...]


@dataclass(frozen=True)
class PerSecond:
    """Over the seconds the window (or the baseline) actually covers."""

    of: Expr


@dataclass(frozen=True)
class Over:
    """Observations over ``threshold(config)`` in a histogram (over the highest bucket
    bound at or under it): all of them minus those in that bucket."""

    family: metrics.Family
    threshold: Callable[[Config], float]


@dataclass(frozen=True)
class Baseline:
    """``of`` over the off-peak history before the window; absent under
    ``diagnosis.min_baseline`` of it. ``recorded``: the recording rule of the same
    statistic, which a source may read instead (``Evaluation.recorded``)."""

    of: Expr
    recorded: str | None = None


Expr = Leaf | Ratio | Diff | FirstOf | PerSecond | Over | Baseline
LE = "le"


@dataclass(frozen=True)
class Grid(Leaf):
    """The bucket bounds a histogram has in the window: per key, one value per ``le`` (its
    value is no statistic). Over the recording window the Prometheus source reads recorded
    quantiles, not buckets (a fleet's central store receives only those, docs/scaling.md),
    so it knows no grid there: the bounds are absent, and the chain treats them as unknown."""

    family: metrics.Family
    by = (LE,)


def bucket_increases(family: metrics.Family) -> Increase:
    return Increase(f"{family.name}_bucket", (LE,))


def le_text(le: float) -> str:
    """One spelling of a bucket bound for both sources ("2" and "2.0" are one bound)."""
    return repr(float(le))


# --- evaluation -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Evaluation:
    """What an evaluator gives: a leaf's values (in the window, or in the baseline: there
    only the keys whose baseline stands on ``diagnosis.min_baseline``), and the seconds each
    key's window or baseline covers (None: no baseline for that key)."""

    leaf: Callable[[Leaf, WindowKey, bool], Values]
    seconds: Callable[[WindowKey, tuple[str, ...], bool], float | None]
    config: Config
    #: Whether the source reads a Baseline's recorded series instead of computing it.
    recorded: bool = False


def evaluate(expr: Expr, kind: WindowKey, ctx: Evaluation, base: bool = False) -> Values:
    if isinstance(expr, Leaf):
        return ctx.leaf(expr, kind, base)
    if isinstance(expr, Baseline):
        if ctx.recorded and expr.recorded is not None:
            return ctx.leaf(Recorded(expr.recorded), kind, True)
        return evaluate(expr.of, kind, ctx, True)
    if isinstance(expr, Ratio):
        num, den = evaluate(expr.num, kind, ctx, base), evaluate(expr.den, kind, ctx, base)
        return {k: r for k, v in num.items()
                if (r := stats.ratio(v, den.get(k))) is not None}
    if isinstance(expr, Diff):
        a, b = evaluate(expr.a, kind, ctx, base), evaluate(expr.b, kind, ctx, base)
        return {k: v - b[k] for k, v in a.items() if k in b}
    if isinstance(expr, FirstOf):
        out: Values = {}
        for option in expr.options:
            for k, v in evaluate(option, kind, ctx, base).items():
                out.setdefault(k, v)
        return out
    if isinstance(expr, PerSecond):
        of = evaluate(expr.of, kind, ctx, base)
        return {k: r for k, v in of.items()
                if (r := stats.ratio(v, ctx.seconds(kind, k[:len(kind.key)], base)))
                is not None}
    buckets = evaluate(bucket_increases(expr.family), kind, ctx, base)
    return over(buckets, expr.threshold(ctx.config))


def over(buckets: Values, threshold: float) -> Values:
    """Per key, the count over ``threshold`` from ``(key..., le)`` bucket increases."""
    grouped: dict[tuple[str, ...], dict[float, float]] = {}
    for k, v in buckets.items():
        grouped.setdefault(k[:-1], {})[float(k[-1])] = v
    out: Values = {}
    for k, counts in grouped.items():
        total = counts.get(math.inf)
        if total is not None:
            out[k] = total - stats.below(counts, threshold)
    return out


def in_baseline(expr: Expr, recorded: bool = False, base: bool = False
                ) -> list[tuple[Leaf, bool]]:
    """Every leaf under ``expr`` with whether it is read over the baseline (an ``Over``
    reads its bucket increases); ``recorded``: as a source that reads recorded baselines."""
    if isinstance(expr, Leaf):
        return [(expr, base)]
    if isinstance(expr, Baseline):
        if recorded and expr.recorded is not None:
            return [(Recorded(expr.recorded), True)]
        return in_baseline(expr.of, recorded, True)
    if isinstance(expr, Ratio):
        return [*in_baseline(expr.num, recorded, base), *in_baseline(expr.den, recorded, base)]
    if isinstance(expr, Diff):
        return [*in_baseline(expr.a, recorded, base), *in_baseline(expr.b, recorded, base)]
    if isinstance(expr, FirstOf):
        return [x for o in expr.options for x in in_baseline(o, recorded, base)]
    if isinstance(expr, PerSecond):
        return in_baseline(expr.of, recorded, base)
    return [(bucket_increases(expr.family), base)]


# --- observables: a declaration and the window field it fills ----------------------------
Finish = Callable[[Mapping[tuple[str, ...], float], Config], Any]


def scalar(values: Mapping[tuple[str, ...], float], config: Config) -> float | None:
    return values.get(())


def count(values: Mapping[tuple[str, ...], float], config: Config) -> int:
    """increase() extrapolates to the window's edges: 9.99 requests were 10."""
    v = values.get(())
    return max(0, round(v)) if v is not None else 0


@dataclass(frozen=True)
class Observable:
    """One field of a window (``observations.py``), declared: its kind, its expression,
    and how its values for one key become the field's value; ``trend``: the ``/`` page
    draws it over the last hour, so the coarse history keeps what it reads."""

    field: str
    kind: WindowKey
    expr: Expr
    finish: Finish = scalar
    trend: bool = False


_DECLARED = "observable"


def measured(kind: WindowKey, expr: Expr, finish: Finish = scalar, *, default: Any = None,
             factory: Callable[[], Any] | None = None, trend: bool = False) -> Any:
    """A window field declared beside its type: what both sources compute for it. The
    field's default (``default``, or ``factory()``) is its value where no series gives one."""
    meta = {_DECLARED: (kind, expr, finish, trend)}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def table(window: type) -> tuple[Observable, ...]:
    """The declared fields of a window class, in their order."""
    return tuple(Observable(f.name, *f.metadata[_DECLARED]) for f in dataclasses.fields(window)
                 if _DECLARED in f.metadata)


Prepared = dict[str, dict[tuple[str, ...], dict[tuple[str, ...], float]]]


def prepare(table: tuple[Observable, ...], values: Mapping[str, Values]) -> Prepared:
    """Every observable's values grouped by its kind's key (key -> by labels -> value),
    once per evaluation: a thousand paths are one pass, not a thousand scans."""
    out: Prepared = {}
    for o in table:
        n = len(o.kind.key)
        grouped: dict[tuple[str, ...], dict[tuple[str, ...], float]] = {}
        for k, v in values[o.field].items():
            grouped.setdefault(k[:n], {})[k[n:]] = v
        out[o.field] = grouped
    return out


def fill(table: tuple[Observable, ...], prepared: Prepared, labels: Mapping[str, str],
         config: Config) -> dict[str, Any]:
    """The fields of one window; ``labels`` name it (a path's name its route, too)."""
    return {o.field: o.finish(prepared[o.field].get(
        tuple(labels.get(x, "") for x in o.kind.key), {}), config) for o in table}


def keys(prepared: Prepared, *fields: str) -> set[tuple[str, ...]]:
    """The keys any of ``fields`` has a value for: the windows a source found."""
    return {k for f in fields for k in prepared[f]}
