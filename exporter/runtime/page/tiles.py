"""One tile per probe, path, engine and GPU: the numbers the decision chain read over the
diagnosis window (the current ``Observations``), each beside a sparkline of the same number
over the last hour (``trends.Point``s), red where it is past the threshold the chain uses.

Each value carries its exact number in ``data-value`` (and its name in ``data-metric``), so
a test or a script reads what the page shows without parsing the formatted text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from exporter import metrics
from exporter.diagnosis.observations import (
    EngineWindow,
    GpuWindow,
    Observations,
    PathWindow,
    ProbeWindow,
)
from exporter.diagnosis.thresholds import Thresholds
from exporter.diagnosis.trends import SPAN, Point
from exporter.runtime.page import fmt
from exporter.runtime.page.fmt import esc
from exporter.runtime.page.spark import Series, sparkline

#: The shortest time axis: a young exporter's few minutes are not squeezed into an hour.
MIN_AXIS = 300.0

T = TypeVar("T")
Show = Callable[[float | None], str]


@dataclass(frozen=True)
class Row:
    key: str  # data-metric
    label: str
    pick: Callable[[Observations], float | None]  # the number, from any window
    show: Show
    limit: float | None = None  # past it the value is red, and a dashed line
    top: float | None = None  # the scale's least top (1 for a ratio)
    text: str | None = None  # shown instead of show(value)
    low_is_bad: bool = False
    line: bool = True  # draw the limit on the sparkline


def _find(items: Iterable[T], match: Callable[[T], bool]) -> T | None:
    return next((i for i in items if match(i)), None)


def _success(p: ProbeWindow | None) -> float | None:
    if p is None or not p.requests:
        return None
    return p.outcomes.get(metrics.ProbeOutcome.OK.value, 0) / p.requests


def _queue_share(e: EngineWindow | None) -> float | None:
    total = e.engine_seconds if e is not None else None
    return (e.queue_seconds or 0.0) / total if e is not None and total else None


def _throttled(g: GpuWindow | None, th: Thresholds) -> list[str]:
    return [r for r in (g.clock_events if g else ()) if r in th.throttle_reasons]


def probe_rows(p: ProbeWindow, th: Thresholds) -> list[Row]:
    def get(o: Observations) -> ProbeWindow | None:
        return _find(o.probes, lambda x: x.probe == p.probe)

    def ttft(o: Observations) -> float | None:
        return x.ttft_p95 if (x := get(o)) else None

    def tpot(o: Observations) -> float | None:
        return x.tpot_p95 if (x := get(o)) else None

    ok = _success(p)
    return [
        Row("ttft_p95", "TTFT P95", ttft, fmt.seconds, limit=p.slo_ttft),
        Row("tpot_p95", "TPOT P95", tpot, fmt.seconds, limit=p.slo_tpot),
        Row("success", "success", lambda o: _success(get(o)), fmt.ratio,
            limit=1 - th.failure_ratio, top=1.0, low_is_bad=True,
            text=f"{fmt.ratio(ok)} of {p.requests}"),
    ]


def path_rows(w: PathWindow, th: Thresholds) -> list[Row]:
    def get(o: Observations) -> PathWindow | None:
        return _find(o.paths, lambda x: (x.carrier, x.target) == (w.carrier, w.target))

    def rtt(o: Observations) -> float | None:
        return x.rtt_mean if (x := get(o)) else None

    def loss(o: Observations) -> float | None:
        return x.loss if (x := get(o)) else None

    def jitter(o: Observations) -> float | None:
        return x.jitter if (x := get(o)) else None

    n = len(th.route_class_order)

    def score(o: Observations) -> float | None:
        # Best class on top: n for the first of route_class_order, 0 for one outside it.
        x = get(o)
        return float(n - th.route_rank(x.route_class)) if x and x.route_class else None

    def named(v: float | None) -> str:
        i = n - round(v) if v is not None else -1
        return th.route_class_order[i] if 0 <= i < n else fmt.NONE

    route = w.route_class or fmt.NONE
    if w.best_route_class and w.route_class and w.best_route_class != w.route_class:
        route += f" (best {w.best_route_class})"
    return [
        Row("rtt", "RTT", rtt, fmt.seconds),
        Row("loss", "loss", loss, fmt.ratio, limit=th.loss_ratio,
            text=f"{fmt.ratio(w.loss)} of {w.sent}"),
        Row("jitter", "jitter", jitter, fmt.seconds, limit=th.jitter_seconds),
        Row("route_class", "route class", score, named, top=float(n), text=route),
    ]


def engine_rows(e: EngineWindow, th: Thresholds) -> list[Row]:
    def get(o: Observations) -> EngineWindow | None:
        return _find(o.engines, lambda x: x.engine == e.engine)

    def running(o: Observations) -> float | None:
        return x.running if (x := get(o)) else None

    def waiting(o: Observations) -> float | None:
        return x.waiting if (x := get(o)) else None

    def kv(o: Observations) -> float | None:
        return x.kv_cache_usage if (x := get(o)) else None

    return [
        Row("queue_share", "queue share", lambda o: _queue_share(get(o)), fmt.ratio,
            limit=th.queue_share, top=1.0),
        Row("running", "running", running, fmt.amount),
        Row("waiting", "waiting", waiting, fmt.amount),
        Row("kv_cache_usage", "KV cache", kv, fmt.ratio, limit=th.kv_cache_usage, top=1.0),
    ]


def gpu_rows(g: GpuWindow, th: Thresholds) -> list[Row]:
    def get(o: Observations) -> GpuWindow | None:
        return _find(o.gpus, lambda x: x.gpu == g.gpu)

    def util(o: Observations) -> float | None:
        return x.utilization if (x := get(o)) else None

    def dram(o: Observations) -> float | None:
        return x.dram_bandwidth_utilization if (x := get(o)) else None

    def throttle(o: Observations) -> float | None:
        x = get(o)
        return float(len(_throttled(x, th))) if x else None

    reasons = _throttled(g, th)
    return [
        Row("utilization", "utilization", util, fmt.ratio, top=1.0),
        Row("dram_bandwidth", "DRAM bandwidth", dram, fmt.ratio, limit=th.dram_bandwidth,
            top=1.0),
        # Any configured throttle reason held for alerting.throttle_share is red.
        Row("throttle", "throttle", throttle, fmt.amount, limit=0.5, top=1.0, line=False,
            text=", ".join(reasons) or "none"),
    ]


def _row(row: Row, now: Observations, trend: Sequence[Point], axis: tuple[float, float]) -> str:
    value = row.pick(now)
    bad = (value is not None and row.limit is not None
           and (value < row.limit if row.low_is_bad else value > row.limit))
    series: Series = [(p.end, row.pick(p.obs)) for p in trend]
    svg = sparkline(series, *axis, row.label, row.show, limit=row.limit if row.line else None,
                    top=row.top)
    text = row.text if row.text is not None else row.show(value)
    return (f'<div class="row"><div><span class="k">{esc(row.label)}</span>'
            f'<span class="v{" bad" if bad else ""}" data-metric="{esc(row.key)}" '
            f'data-value="{fmt.attr(value)}">{esc(text)}</span></div>{svg}</div>')


def _tile(kind: str, name: str, sub: str, body: str, state: str = "") -> str:
    return (f'<article class="tile{" " + state if state else ""}" data-kind="{esc(kind)}" '
            f'data-name="{esc(name)}"><p class="kind">{esc(kind)}</p><h3>{esc(name)}</h3>'
            f'<p class="sub">{esc(sub)}</p>{body}</article>')


def axis_of(now: Observations, trend: Sequence[Point]) -> tuple[float, float]:
    end = now.at.timestamp()
    first = trend[0].start if trend else end
    return max(end - SPAN, min(first, end - MIN_AXIS)), end


def _joined(*parts: str) -> str:
    return " · ".join(p for p in parts if p)


def tiles(now: Observations, trend: Sequence[Point], th: Thresholds) -> str:
    """The tiles of every layer, in the chain's order (probes, paths, engines, GPUs)."""
    axis = axis_of(now, trend)

    def rows(items: list[Row]) -> str:
        return "".join(_row(r, now, trend, axis) for r in items)

    up = {True: "up", False: "down", None: "no data"}
    out = [
        *(_tile("probe", p.probe, _joined(p.target, p.profile, p.carrier and
                                          f"carrier {p.carrier}"), rows(probe_rows(p, th)))
          for p in now.probes),
        *(_tile("path", f"{w.carrier} → {w.target}", _joined(
            w.region, w.protocol, "peak" if w.in_peak else ""), rows(path_rows(w, th)))
          for w in now.paths),
        *(_tile("engine", e.engine, up[e.up], rows(engine_rows(e, th)),
                "down" if e.up is False else "") for e in now.engines),
        *(_tile("gpu", f"GPU {g.gpu}", g.name, rows(gpu_rows(g, th))) for g in now.gpus),
    ]
    if not out:
        return ""
    minutes = (axis[1] - axis[0]) / 60
    caption = (f"Numbers over the diagnosis window ({fmt.duration(now.window)}); "
               f"sparklines over the last {minutes:.0f} min, dashed: the threshold.")
    return (f'<section id="layers"><h2>Layers</h2><p class="caption">{esc(caption)}</p>'
            f'<div class="tiles">{"".join(out)}</div></section>')
