"""The PromQL evaluator of the declarations of ``observations.py``: one instant query per
leaf, aggregated to the key of the window it fills (probe, path, route, engine, GPU,
check), all evaluated at the end of the diagnosis window. The arithmetic on the answers
(ratios, fallbacks, counts over a threshold) is ``d.evaluate``'s, shared with the
embedded source.

Names come from :mod:`exporter.metrics` (raw families) and :mod:`exporter.metrics.names`
(recorded series); none is typed here. A recorded ``*_rate5m`` series is read when the
diagnosis window is the recording window, since then it is the same statistic and already
computed (and it is what a fleet's central store receives); for any other window the
quantile is computed the way the rule computes it, over the diagnosis window, because a 5m
P95 read at the end of a 10m window would ignore half of it.

Baselines are what the embedded source keeps: the increases of the off-peak steps of
``diagnosis.baseline_step`` before the window (a subquery over
``alerting.baseline_window``; a step counts when no peak window was on at either end), and
how much history they stand on is counted the same way, per key.

Every key keeps the fleet's external labels (``site``, ``vantage``, docs/scaling.md) and
drops ``job`` / ``instance``, so one probe name seen from two vantage points stays two
windows while two replicas of a scrape job do not split one.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter import metrics
from exporter.config.models import Config
from exporter.diagnosis import declare as d
from exporter.diagnosis import observables
from exporter.diagnosis.declare import Leaf, Quantile, WindowKey
from exporter.metrics.names import RATE, SOURCE, alternation, prom_duration

_PEAK = metrics.EXPORTER_PEAK_WINDOW.name
#: (leaf, kind, over the baseline) -> its query; (None, kind, before) is the kind's
#: baseline coverage, before the window (True) or up to now (False).
Planned = tuple[Leaf | None, WindowKey, bool]


def by(labels: tuple[str, ...]) -> str:
    return ", ".join(labels)


@dataclass(frozen=True)
class Ranges:
    """The window as PromQL writes it, and the spans the baselines reach back over."""

    range: str  # "10m"
    baseline: str  # alerting.baseline_window
    history: str  # diagnosis.history: the batch limit seen in practice
    lookback: str  # alerting.route_lookback
    step: str  # diagnosis.baseline_step: the baselines' resolution
    step_seconds: float

    @classmethod
    def of(cls, seconds: float, config: Config) -> Ranges:
        return cls(prom_duration(seconds), prom_duration(config.alerting.baseline_window),
                   prom_duration(config.diagnosis.history),
                   prom_duration(config.alerting.route_lookback),
                   prom_duration(config.diagnosis.baseline_step), config.diagnosis.baseline_step)


def matcher(match: d.Match) -> str:
    if not match:
        return ""
    parts = [f'{k}="{v}"' if isinstance(v, str) else f'{k}=~"{alternation(v)}"'
             for k, v in match]
    return "{" + ", ".join(parts) + "}"


def _gate(w: Ranges) -> str:
    """Steps during which a peak window was on at some sample (both ends included)."""
    return (f"unless on ({by(SOURCE)}) "
            f"(max by ({by(SOURCE)}) (max_over_time({_PEAK}[{w.step}])) > 0)")


def offpeak(labels: tuple[str, ...], series: str, w: Ranges) -> str:
    """The increase of ``series`` over the off-peak steps before the window, per labels:
    each step's counter at its end less at its start (a step with a reset: its samples'
    increase), so that consecutive steps add up to the whole change, as the embedded
    source's snapshots do. ``increase()`` alone reads only the samples inside the step and
    loses what changed between the last of one step and the first of the next: half of
    every change where the step is two scrapes, all of a counter that moves once a step
    (a real vLLM's prefix-cache hits, read every second on a 2 s step)."""
    change = f"({series} - {series} offset {w.step}) >= 0 or increase({series}[{w.step}])"
    inner = f"sum by ({by(labels)}) (({change}) {_gate(w)})"
    return f"sum_over_time(({inner})[{w.baseline}:{w.step}] offset {w.range})"


def coverage(kind: WindowKey, w: Ranges, before: bool = True) -> str:
    """Seconds of off-peak steps before the window in which the kind's series has data at
    both ends: the embedded baseline's ``seconds``, per key (a new deployment's 12h baseline
    window holds minutes, and a rate over 12h of them is no rate). Up to now (not
    ``before``) for the recorded baselines, whose rules include the window."""
    p = kind.presence
    present = f"group by ({by(kind.key)}) (({p} and {p} offset {w.step}) {_gate(w)})"
    shift = f" offset {w.range}" if before else ""
    return (f"count_over_time(({present})[{w.baseline}:{w.step}]{shift})"
            f" * {w.step_seconds:g}")


def reads_recorded(w: Ranges) -> bool:
    """Recorded series are this window's statistics over the recording window only."""
    return w.range == RATE


def _quantile(leaf: Quantile, k: tuple[str, ...], w: Ranges, base: bool) -> str:
    m = matcher(leaf.match)
    if reads_recorded(w) and not base and not leaf.match and leaf.recorded is not None:
        return f"max by ({by(k)}) ({dict(leaf.recorded.by_quantile())[leaf.q]})"
    labels = (d.LE, *k, *leaf.per)
    bucket = f"{leaf.family.name}_bucket{m}"
    counts = (offpeak(labels, bucket, w) if base
              else f"sum by ({by(labels)}) (rate({bucket}[{w.range}]))")
    # A series with nothing in the window gives NaN, which would make a sum NaN: left out.
    kept = " >= 0" if leaf.combine == "sum" else ""
    return f"{leaf.combine} by ({by(k)}) (histogram_quantile({leaf.q:g}, {counts}){kept})"


def leaf_query(leaf: Leaf, kind: WindowKey, base: bool, w: Ranges) -> str:
    k = kind.key
    if isinstance(leaf, Quantile):
        return _quantile(leaf, k, w, base)
    if isinstance(leaf, d.Recorded):
        return f"max by ({by(k)}) ({leaf.series})"
    if isinstance(leaf, d.Increase):
        s = f"{leaf.sample}{matcher(leaf.match)}"
        labels = (*k, *leaf.by)
        if base:
            return offpeak(labels, s, w)
        if leaf.born:
            # A series new in the window counts from zero, as the exporter created it.
            return (f"sum by ({by(labels)}) ((increase({s}[{w.range}]) and {s} offset "
                    f"{w.range})\nor\n{s})")
        return f"sum by ({by(labels)}) (increase({s}[{w.range}]))"
    if base:
        raise ValueError(f"no baseline of {leaf}")
    if isinstance(leaf, d.MeanOverTime):
        s = f"{leaf.sample}{matcher(leaf.match)}"
        return f"sum by ({by((*k, *leaf.by))}) (avg_over_time({s}[{w.range}]))"
    if isinstance(leaf, d.MaxOverTime):
        span = w.history if leaf.history else w.range
        return f"{leaf.combine} by ({by(k)}) (max_over_time({leaf.sample}[{span}]))"
    if isinstance(leaf, d.Last):
        return f"{leaf.combine} by ({by((*k, *leaf.by))}) ({leaf.sample})"
    if isinstance(leaf, d.PeakRatio):
        num = f"sum by ({by(k)}) (increase({leaf.num}[{w.range}]))"
        den = f"sum by ({by(k)}) (increase({leaf.den}[{w.range}]))"
        return f"max_over_time(({num}\n/\n({den} > 0))[{w.history}:{w.step}])"
    if isinstance(leaf, d.Seen):
        return f"max by ({by((*k, *leaf.by))}) (max_over_time({leaf.sample}[{w.lookback}]))"
    if isinstance(leaf, d.Grid):
        return f"group by ({by((*k, *leaf.by))}) ({leaf.family.name}_bucket)"
    if isinstance(leaf, d.InPeak):
        # Each window takes the peak-window state of the exporter that measures it.
        return (f"max by ({by(k)}) (group by ({by(SOURCE)}, {by(k)}) ({kind.presence})\n"
                f"* on ({by(SOURCE)}) group_left\nmax by ({by(SOURCE)}) ({_PEAK}))")
    raise TypeError(leaf)


def plan(seconds: float, config: Config) -> dict[Planned, str]:
    """Every query the declarations need over a window of ``seconds``: each leaf once, and
    the coverage of each kind that has a baseline."""
    w = Ranges.of(seconds, config)
    out: dict[Planned, str] = {}
    for table in observables.TABLES:
        for o in table:
            for leaf, base in d.in_baseline(o.expr, reads_recorded(w)):
                if isinstance(leaf, d.Grid) and reads_recorded(w):
                    continue  # the buckets stay at a fleet's edge (d.Grid)
                out.setdefault((leaf, o.kind, base), leaf_query(leaf, o.kind, base, w))
                if base:
                    before = not isinstance(leaf, d.Recorded)
                    out.setdefault((None, o.kind, before), coverage(o.kind, w, before))
    return out


def all_queries(seconds: float, config: Config) -> dict[str, str]:
    """The queries by a readable name (what a test or a person lists)."""
    out: dict[str, str] = {}
    for (leaf, kind, base), expr in plan(seconds, config).items():
        what = "coverage" if leaf is None else type(leaf).__name__
        out[f"{kind.name}.{what}{'.baseline' if base else ''}.{len(out)}"] = expr
    return out
