"""One tile per probe, path, carrier of real users, engine, GPU and host: the numbers the
decision chain read over the diagnosis window (the current ``Observations``), each beside a
sparkline of the same number over the last hour (``trends.Point``s), red where it is past
the threshold the chain uses.

Each value carries its exact number in ``data-value`` (and its name in ``data-metric``), so
a test or a script reads what the page shows without parsing the formatted text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from exporter import metrics
from exporter.diagnosis.host_window import HostWindow
from exporter.diagnosis.observations import (
    ClientWindow,
    EngineWindow,
    GpuWindow,
    Observations,
    PathWindow,
    ProbeWindow,
)
from exporter.diagnosis.steps.network import on_path
from exporter.diagnosis.steps.words import bucket_of
from exporter.diagnosis.thresholds import Thresholds
from exporter.diagnosis.trends import SPAN, Point
from exporter.runtime.page import fmt
from exporter.runtime.page.fmt import esc
from exporter.runtime.page.spark import Series, sparkline

#: The shortest time axis: a young exporter's few minutes are not squeezed into an hour.
MIN_AXIS = 300.0

Show = Callable[[float | None], str]
Item = ProbeWindow | PathWindow | ClientWindow | EngineWindow | GpuWindow | HostWindow
#: What identifies one tile's item in every point's Observations.
Key = tuple[str, ...]


@dataclass(frozen=True)
class Row:
    key: str  # data-metric
    label: str
    pick: Callable[[Any], float | None]  # the number, from this tile's item in any window
    show: Show
    limit: float | None = None  # past it the value is red, and a dashed line
    top: float | None = None  # the scale's least top (1 for a ratio)
    text: str | None = None  # shown instead of show(value)
    low_is_bad: bool = False
    line: bool = True  # draw the limit on the sparkline


def key_of(item: Item) -> Key:
    if isinstance(item, ProbeWindow):
        return ("probe", item.probe)
    if isinstance(item, PathWindow):
        return ("path", item.carrier, item.target)
    if isinstance(item, ClientWindow):
        return ("clients", item.carrier, item.site)
    if isinstance(item, EngineWindow):
        return ("engine", item.engine)
    if isinstance(item, HostWindow):
        return ("host", item.site, item.vantage)
    return ("gpu", item.gpu)


def _items(o: Observations) -> Iterator[Item]:
    yield from o.probes
    yield from o.paths
    yield from o.clients
    yield from o.engines
    yield from o.gpus
    yield from o.hosts


def _success(p: ProbeWindow) -> float | None:
    return p.outcomes.get(metrics.ProbeOutcome.OK.value, 0) / p.requests if p.requests else None


def _queue_share(e: EngineWindow) -> float | None:
    total = e.engine_seconds
    return (e.queue_seconds or 0.0) / total if total else None


def _throttled(g: GpuWindow, th: Thresholds) -> list[str]:
    return [r for r in g.clock_events if r in th.throttle_reasons]


def quantile_text(value: float | None, grid: Sequence[float], limit: float) -> str:
    """A P95 as shown, with its histogram bucket where the SLO lies inside it: whether it
    is over the SLO is then the interpolation's guess (as the diagnosis says)."""
    bucket = bucket_of(value, grid) if value is not None else None
    if bucket is None or not bucket[0] < limit < bucket[1]:
        return fmt.seconds(value)
    return (f"{fmt.seconds(value)} (one bucket: {fmt.seconds(bucket[0])} to "
            f"{fmt.seconds(bucket[1])})")


def probe_rows(p: ProbeWindow, th: Thresholds) -> list[Row]:
    return [
        Row("ttft_p95", "TTFT P95", lambda x: x.ttft_p95, fmt.seconds, limit=p.slo_ttft,
            text=quantile_text(p.ttft_p95, p.ttft_buckets, p.slo_ttft)),
        Row("tpot_p95", "TPOT P95", lambda x: x.tpot_p95, fmt.seconds, limit=p.slo_tpot,
            text=quantile_text(p.tpot_p95, p.tpot_buckets, p.slo_tpot)),
        Row("success", "success", _success, fmt.ratio, limit=1 - th.failure_ratio, top=1.0,
            low_is_bad=True, text=f"{fmt.ratio(_success(p))} of {p.requests}"),
    ]


#: Per path window (by identity, in one render), the worst of its probes' own streams:
#: (retransmitted / sent, out of order / received), from TCP_INFO.
Streams = dict[int, tuple[float | None, float | None]]


def _worst(values: Iterator[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def streams_of(o: Observations) -> Streams:
    """The probe streams riding each path of ``o`` (the chain's ``on_path``): the worst
    probe's, as LLMProbeStreamPacketLoss and the network step judge each probe alone."""
    out: Streams = {}
    for w in o.paths:
        riders = [p for p in o.probes if on_path(p, w)]
        out[id(w)] = (_worst(p.tcp_retransmit_ratio for p in riders),
                      _worst(p.tcp_out_of_order_ratio for p in riders))
    return out


def path_rows(w: PathWindow, th: Thresholds, streams: Streams | None = None) -> list[Row]:
    n = len(th.route_class_order)
    streams = {} if streams is None else streams
    none: tuple[float | None, float | None] = (None, None)

    def score(x: PathWindow) -> float | None:
        # Best class on top: n for the first of route_class_order, 0 for one outside it.
        return float(n - th.route_rank(x.route_class)) if x.route_class else None

    def named(v: float | None) -> str:
        i = n - round(v) if v is not None else -1
        return th.route_class_order[i] if 0 <= i < n else fmt.NONE

    route = w.route_class or fmt.NONE
    if w.best_route_class and w.route_class and w.best_route_class != w.route_class:
        route += f" (best {w.best_route_class})"
    return [
        Row("rtt", "RTT", lambda x: x.rtt_mean, fmt.seconds),
        Row("loss", "loss", lambda x: x.loss, fmt.ratio, limit=th.loss_ratio,
            text=f"{fmt.ratio(w.loss)} of {w.sent}"),
        Row("jitter", "jitter", lambda x: x.jitter, fmt.seconds, limit=th.jitter_seconds),
        Row("route_class", "route class", score, named, top=float(n), text=route),
        # The probes' own streams on this carrier: loss that ICMP may not show (carriers
        # that prioritise echoes), over the same line as the path's loss.
        Row("stream_retransmission", "stream retransmitted",
            lambda x: streams.get(id(x), none)[0], fmt.ratio, limit=th.loss_ratio),
        Row("stream_out_of_order", "stream out of order",
            lambda x: streams.get(id(x), none)[1], fmt.ratio, limit=th.loss_ratio),
    ]


def client_rows(c: ClientWindow, th: Thresholds) -> list[Row]:
    # Judged only over enough segments, as the chain judges it: red under that is noise.
    judged = c.sent >= th.clients_min_segments
    rtt = fmt.seconds(c.rtt_mean)
    if c.rtt_p95 is not None:
        rtt += f" (P95 {fmt.seconds(c.rtt_p95)})"
    return [
        Row("connections", "connections", lambda x: x.connections, fmt.amount),
        Row("retransmission", "retransmitted", lambda x: x.retransmission, fmt.ratio,
            limit=th.loss_ratio if judged else None,
            text=f"{fmt.ratio(c.retransmission)} of {c.sent}"),
        Row("rtt", "RTT", lambda x: x.rtt_mean, fmt.seconds, text=rtt),
    ]


def engine_rows(e: EngineWindow, th: Thresholds) -> list[Row]:
    return [
        Row("queue_share", "queue share", _queue_share, fmt.ratio, limit=th.queue_share,
            top=1.0),
        Row("running", "running", lambda x: x.running, fmt.amount),
        Row("waiting", "waiting", lambda x: x.waiting, fmt.amount),
        Row("kv_cache_usage", "KV cache", lambda x: x.kv_cache_usage, fmt.ratio,
            limit=th.kv_cache_usage, top=1.0),
    ]


def gpu_rows(g: GpuWindow, th: Thresholds) -> list[Row]:
    return [
        Row("utilization", "utilization", lambda x: x.utilization, fmt.ratio, top=1.0),
        Row("dram_bandwidth", "DRAM bandwidth", lambda x: x.dram_bandwidth_utilization,
            fmt.ratio, limit=th.dram_bandwidth, top=1.0),
        # Any configured throttle reason held for alerting.throttle_share is red.
        Row("throttle", "throttle", lambda x: float(len(_throttled(x, th))), fmt.amount,
            limit=0.5, top=1.0, line=False, text=", ".join(_throttled(g, th)) or "none"),
    ]


def _scope(h: HostWindow) -> str:
    """The engine's cgroup where measured (what the chain judges), else the host's."""
    return metrics.ENGINE_SCOPE if h.engine_measured else metrics.HOST_SCOPE


def host_rows(h: HostWindow, th: Thresholds) -> list[Row]:
    def waited(resource: str) -> Callable[[Any], float | None]:
        return lambda x: x.pressure.get((_scope(x), resource))
    return [
        Row("cpu_pressure", "waiting for CPU", waited("cpu"), fmt.ratio,
            limit=th.host_cpu_pressure, top=1.0),
        Row("memory_pressure", "waiting for memory", waited("memory"), fmt.ratio,
            limit=th.host_memory_pressure, top=1.0),
        Row("io_pressure", "waiting for IO", waited("io"), fmt.ratio,
            limit=th.host_io_pressure, top=1.0),
        Row("memory_available", "memory available", lambda x: x.memory_available_ratio,
            fmt.ratio, top=1.0),
    ]


def _row(row: Row, item: Item, history: list[tuple[float, Item | None]],
         axis: tuple[float, float]) -> str:
    value = row.pick(item)
    bad = (value is not None and row.limit is not None
           and (value < row.limit if row.low_is_bad else value > row.limit))
    series: Series = [(t, row.pick(x) if x is not None else None) for t, x in history]
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
    """The tiles of every layer, in the chain's order (probes, paths and real users,
    engines, GPUs, hosts)."""
    axis = axis_of(now, trend)
    # Each point's items by key, once per render: a row's series is then one lookup a point.
    index = [(p.end, {key_of(x): x for x in _items(p.obs)}) for p in trend]
    streams = streams_of(now)
    for point in trend:
        streams.update(streams_of(point.obs))

    def rows(item: Item, made: list[Row]) -> str:
        key = key_of(item)
        history = [(t, items.get(key)) for t, items in index]
        return "".join(_row(r, item, history, axis) for r in made)

    up = {True: "up", False: "down", None: "no data"}
    out = [
        *(_tile("probe", p.probe, _joined(p.target, p.profile, p.carrier and
                                          f"carrier {p.carrier}"), rows(p, probe_rows(p, th)))
          for p in now.probes),
        *(_tile("path", f"{w.carrier} → {w.target}", _joined(
            w.region, w.protocol, "peak" if w.in_peak else ""), rows(w, path_rows(w, th, streams)))
          for w in now.paths),
        *(_tile("clients", f"{c.carrier} users", _joined(
            "real users", c.site, "peak" if c.in_peak else ""), rows(c, client_rows(c, th)))
          for c in now.clients),
        *(_tile("engine", e.engine, up[e.up], rows(e, engine_rows(e, th)),
                "down" if e.up is False else "") for e in now.engines),
        *(_tile("gpu", f"GPU {g.gpu}", g.name, rows(g, gpu_rows(g, th))) for g in now.gpus),
        *(_tile("host", h.vantage or h.site or "this host",
                f"{_scope(h)} pressure" + (f" · {h.cpus:.0f} CPUs" if h.cpus else ""),
                rows(h, host_rows(h, th))) for h in now.hosts),
    ]
    if not out:
        return ""
    minutes = (axis[1] - axis[0]) / 60
    caption = (f"Numbers over the diagnosis window ({fmt.duration(now.window)}); "
               f"sparklines over the last {minutes:.0f} min, dashed: the threshold.")
    return (f'<section id="layers"><h2>Layers</h2><p class="caption">{esc(caption)}</p>'
            f'<div class="tiles">{"".join(out)}</div></section>')
