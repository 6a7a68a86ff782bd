"""A sparkline as inline SVG, drawn on the server: nothing to load, nothing to run.

The drawing stretches to its box (``preserveAspectRatio="none"``) while its strokes keep
their width (``vector-effect``), so one SVG fits a 1280 px tile and a phone's. A gap in the
data (a step with no requests) is a gap in the line; a lone point is a dot (a zero-length
stroke with round caps); an SLO or threshold is a dashed line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from exporter.runtime.page.fmt import esc

WIDTH, HEIGHT, PAD = 120.0, 32.0, 3.0

Series = Sequence[tuple[float, float | None]]  # (unix time, value or None)


def _path(xy: list[tuple[float, float]]) -> str:
    if len(xy) == 1:
        x, y = xy[0]
        return f"M{x:.1f} {y:.1f}h0"
    return "M" + "L".join(f"{x:.1f} {y:.1f}" for x, y in xy)


def sparkline(
    series: Series,
    start: float,
    end: float,
    label: str,
    show: Callable[[float | None], str],
    *,
    limit: float | None = None,
    top: float | None = None,
) -> str:
    """``series`` between ``start`` and ``end`` (unix times), scaled from 0 to the largest of
    the values, ``limit`` and ``top``; ``show`` formats the range in the tooltip."""
    # NaN or infinity (a gauge an engine filled so) is a gap, like a step without data.
    series = [(t, v if v is not None and math.isfinite(v) else None) for t, v in series]
    values = [v for _, v in series if v is not None]
    hi = max([*values, *(x for x in (limit, top) if x is not None)], default=0.0)
    hi = hi if hi > 0 else 1.0
    span = max(end - start, 1e-9)

    def xy(t: float, v: float) -> tuple[float, float]:
        x = PAD + min(max((t - start) / span, 0.0), 1.0) * (WIDTH - 2 * PAD)
        return x, HEIGHT - PAD - min(v / hi, 1.0) * (HEIGHT - 2 * PAD)

    segments: list[list[tuple[float, float]]] = [[]]
    for t, v in series:
        if v is None:
            if segments[-1]:
                segments.append([])
            continue
        segments[-1].append(xy(t, max(v, 0.0)))
    d = "".join(_path(s) for s in segments if len(s) > 1)
    dots = "".join(_path(s) for s in segments if len(s) == 1)
    marks = ""
    if limit is not None and limit <= hi:
        y = xy(start, limit)[1]
        marks = f'<path class="limit" d="M0 {y:.1f}H{WIDTH:g}"/>'
    where = (f"{show(min(values))} to {show(max(values))}" if values else "no data")
    title = f"{label}, {len(values)} points: {where}"
    return (
        f'<svg class="spark" viewBox="0 0 {WIDTH:g} {HEIGHT:g}" preserveAspectRatio="none" '
        f'role="img" aria-label="{esc(title)}" data-points="{len(values)}">'
        f"<title>{esc(title)}</title>{marks}"
        + (f'<path class="line" d="{d}"/>' if d else "")
        + (f'<path class="dot" d="{dots}"/>' if dots else "")
        + "</svg>"
    )
