"""The report's plots, drawn by matplotlib as SVG (the ``report`` extra) from the report's
data only, so every plot shows what report.json holds. Each is a data: URI for an <img>:
inlined SVGs would share element ids and clip one another's paths."""

from __future__ import annotations

import base64
import datetime as dt
import io
import math
from collections.abc import Callable, Sequence
from typing import Any

import matplotlib

matplotlib.use("svg")  # before pyplot: no display, no GUI toolkit

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.dates import date2num as _date2num
from matplotlib.figure import Figure

from exporter.report import fmt, tables
from exporter.report.model import Report
from exporter.report.period import DAYTIME

COLORS = ("#2f6db5", "#e07b24", "#7a4fb0", "#2a9d6f", "#c23b3b", "#8a8a8a")
STYLE: dict[str, Any] = {"font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
         "svg.fonttype": "none", "svg.hashsalt": "llm-latency-exporter-report",
         "axes.titlesize": 9, "figure.dpi": 96}


def _style() -> Any:
    return plt.rc_context(STYLE)  # type: ignore[arg-type]  # the stubs want literal keys


def date2num(t: dt.datetime) -> float:
    return float(_date2num(t))  # type: ignore[no-untyped-call]


def _uri(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue().encode()).decode()


def _scale(unit: str) -> tuple[float, str]:
    return (1000.0, "ms") if unit == "s" else (100.0, "%") if unit == "ratio" else (1.0, unit)


def _grouped(ax: Axes, groups: Sequence[str], series: dict[str, Sequence[float | None]],
             unit: str) -> None:
    """Bars of each series side by side for every group; a missing value is no bar."""
    mult, label = _scale(unit)
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        xs = [g + i * width for g in range(len(groups)) if values[g] is not None]
        ys = [float(v) * mult for v in values if v is not None]
        ax.bar(xs, ys, width, label=name, color=COLORS[i % len(COLORS)])
    ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))], groups)
    ax.set_ylabel(label)
    ax.set_ylim(bottom=0)


def carrier(r: Report, i: int) -> str:
    c = r.carriers[i]
    shown = [m for m in c.metrics if any(m.by_class.values())]
    with _style():
        fig, axes = plt.subplots(1, max(len(shown), 1), figsize=(2.3 * max(len(shown), 1), 2.2),
                                 squeeze=False)
        for ax, m in zip(axes[0], shown, strict=False):
            _grouped(ax, ["P50", "P95", "P99"], {
                fmt.class_name(cls, r.peak_windows): [getattr(q, k, None) for k in
                                                      ("p50", "p95", "p99")]
                for cls, q in m.by_class.items()}, m.unit)
            ax.set_title(tables.LABELS.get(m.metric, m.metric))
        axes[0][-1].legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
        fig.suptitle(f"carrier {fmt.scope(c.vantage, c.carrier)}", fontsize=10, y=1.06)
        return _uri(fig)


#: The legend of the budget plot's segments, in the order ``tables.segments`` gives them.
BUDGET = ("network (probes' kernel RTT)", "API server and the rest of the way",
          "engine queue", "prefill")


def budget(r: Report) -> str:
    """One stacked bar per carrier and class: the first token's segments (means, which add
    up), a tick at the probes' mean TTFT and their mean TPOT written beside it."""
    rows = [(f"{fmt.scope(c.vantage, c.carrier)} · {fmt.class_name(cls, r.peak_windows)}",
             parts, c.means.get("ttft", {}).get(cls), c.means.get("tpot", {}).get(cls))
            for c in r.carriers for cls in r.classes
            if (parts := tables.segments(c.means, cls)) is not None]
    mult, unit = _scale("s")
    with _style():
        fig, ax = plt.subplots(figsize=(8, 0.8 + 0.4 * max(len(rows), 1)))
        for y, (_, parts, ttft, tpot) in enumerate(rows):
            left = 0.0
            for j, v in enumerate(parts):
                ax.barh(y, v * mult, left=left, height=0.6, color=COLORS[j % len(COLORS)],
                        label=BUDGET[j] if y == 0 else None)
                left += v * mult
            end = left
            if ttft is not None:
                ax.plot([ttft * mult] * 2, [y - 0.35, y + 0.35], color="black", lw=1.5,
                        label="probes' mean TTFT" if y == 0 else None)
                end = max(end, ttft * mult)
            if tpot is not None:
                ax.text(end, y, f"  TPOT {fmt.value(tpot, 's')}", va="center", fontsize=7)
        ax.set_yticks(range(len(rows)), [name for name, *_ in rows])
        ax.invert_yaxis()
        ax.set_xlabel(f"first token, mean ({unit})")
        ax.set_xlim(left=0)
        ax.margins(x=0.15)
        ax.legend(fontsize=7, frameon=False, loc="upper center", ncol=3,
                  bbox_to_anchor=(0.5, -0.2 - 0.45 / max(len(rows), 1)))
        ax.set_title("where the first token's time goes, per carrier and class")
        return _uri(fig)


def _shade(ax: Axes, r: Report) -> None:
    for span in r.spans:
        if span.cls != DAYTIME:
            ax.axvspan(date2num(span.start), date2num(span.end), color="#f3d9b1", alpha=0.6, lw=0)


def timeline(r: Report) -> str:
    """Route class per route and verdict episodes over the period; peak windows shaded."""
    rows: list[tuple[str, list[tuple[dt.datetime, dt.datetime, str]]]] = []
    for route in r.routes:
        cls = route.changes[0].old if route.changes else max(route.share,
                                                             key=route.share.__getitem__)
        bars, since = [], r.start
        for ch in route.changes:
            bars.append((since, ch.at, cls))
            since, cls = ch.at, ch.new
        bars.append((since, r.end, cls))
        rows.append((f"route {route.carrier}/{route.target} {route.direction}", bars))
    for e in r.verdicts:
        rows.append((f"{e.layer}/{e.cause}", [(e.start, e.end, "primary" if e.primary else
                                               "named")]))
    names = sorted({b[2] for _, bars in rows for b in bars})
    color = {n: COLORS[i % len(COLORS)] for i, n in enumerate(names)}
    with _style():
        fig, ax = plt.subplots(figsize=(9, 0.5 + 0.4 * max(len(rows), 1)))
        _shade(ax, r)
        for y, (_, bars) in enumerate(rows):
            for start, end, name in bars:
                left, right = date2num(start), date2num(end)
                ax.barh(y, right - left, left=left, height=0.6, color=color[name])
                ax.text((left + right) / 2, y, name, ha="center", va="center", fontsize=7,
                        color="white")
        ax.set_yticks(range(len(rows)), [n for n, _ in rows])
        ax.set_xlim(date2num(r.start), date2num(r.end))
        ax.xaxis_date()
        ax.invert_yaxis()
        fig.autofmt_xdate()
        ax.set_title("route class and diagnosis verdicts (peak windows shaded)")
        return _uri(fig)


def outcomes(r: Report) -> str:
    probes = [fmt.scope(o.vantage, o.probe) for o in r.outcomes]
    totals: dict[str, list[float]] = {}
    for i, o in enumerate(r.outcomes):
        for c in o.by_class.values():
            for name, n in (c.outcomes if c else {}).items():
                totals.setdefault(name, [0.0] * len(probes))[i] += n
    with _style():
        fig, ax = plt.subplots(figsize=(7, 0.8 + 0.35 * max(len(probes), 1)))
        left = [0.0] * len(probes)
        for j, (name, ns) in enumerate(sorted(totals.items(), key=lambda kv: -sum(kv[1]))):
            ax.barh(probes, ns, left=left, label=name, color=COLORS[j % len(COLORS)])
            left = [a + b for a, b in zip(left, ns, strict=True)]
        ax.set_xlabel("requests in the period")
        ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
        return _uri(fig)


def queue(r: Report) -> str:
    """Share of the period's requests per queue-time bucket, engines side by side."""
    bounds = sorted({b.le for q in r.queue for b in q.buckets if b.share > 0},
                    key=lambda le: math.inf if le is None else le)
    names = [fmt.value(le, "s") if le is not None else "more" for le in bounds]
    with _style():
        fig, ax = plt.subplots(figsize=(7, 2.4))
        _grouped(ax, [f"≤ {n}" if n != "more" else n for n in names], {
            f"{q.target} {q.model}": [next((b.share for b in q.buckets if b.le == le), None)
                                      for le in bounds] for q in r.queue}, "ratio")
        ax.set_ylabel("% of requests")
        ax.set_xlabel("queue time (engine histogram bucket)")
        ax.legend(fontsize=7, frameon=False)
        return _uri(fig)


def goodput(r: Report) -> str:
    with _style():
        fig, ax = plt.subplots(figsize=(7, 2.2))
        _grouped(ax, [fmt.scope(g.vantage, g.probe) for g in r.goodput], {
            fmt.class_name(c, r.peak_windows): [g.by_class.get(c) for g in r.goodput]
            for c in r.classes}, "ratio")
        ax.axhline(r.slo.objective * 100, color="#c23b3b", lw=1, ls="--", label="objective")
        ax.set_ylim(0, 105)
        ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1, 1))
        return _uri(fig)


def bench(r: Report) -> str:
    assert r.bench is not None
    latency = {k.removesuffix("_s"): d for k, d in r.bench.summary.get("latency", {}).items()
               if d}
    qs = ["p50", "p95", "p99"]
    with _style():
        fig, ax = plt.subplots(figsize=(7, 2.2))
        _grouped(ax, list(latency), {q: [d.get(q) for d in latency.values()] for q in qs}, "s")
        ax.set_yscale("log")
        ax.autoscale(axis="y")  # _grouped's 0 floor has no place on a log axis
        ax.legend(fontsize=7, frameon=False)
        ax.set_title(f"bench {r.bench.source}")
        return _uri(fig)


def plots(r: Report) -> dict[str, str]:
    """Every plot the sections name, as data: URIs by key."""
    out: dict[str, str] = {f"carrier-{i}": carrier(r, i) for i in range(len(r.carriers))}
    makers: dict[str, tuple[bool, Callable[[Report], str]]] = {
        "budget": (tables.has_budget(r), budget),
        "timeline": (bool(r.routes or r.verdicts), timeline),
        "outcomes": (bool(r.outcomes), outcomes),
        "queue": (bool(r.queue), queue),
        "goodput": (bool(r.goodput), goodput),
        "bench": (r.bench is not None, bench),
    }
    out.update({key: make(r) for key, (wanted, make) in makers.items() if wanted})
    return out
