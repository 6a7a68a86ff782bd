"""Text for the page: every string passes the secret boundary, then HTML escaping; numbers
get the unit a reader expects (ms or s, a percentage, an age)."""

from __future__ import annotations

import html
import math
from typing import Any

from exporter import redact
from exporter.config.values import format_duration

#: Shown where a statistic has no data in the window.
NONE = "\u2013"  # an en dash


def esc(value: Any) -> str:
    """``value`` as HTML text: redacted (server-supplied strings may carry a credential an
    engine echoed), then escaped (they may carry markup)."""
    return html.escape(redact.text("" if value is None else str(value)))


def attr(value: float | None) -> str:
    """A number for a ``data-value`` attribute, exact (the tests read it back)."""
    return "" if value is None or not math.isfinite(value) else repr(float(value))


def seconds(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return NONE
    if value < 0.01:
        return f"{value * 1000:.1f} ms"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s"


def ratio(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return NONE
    pct = value * 100
    return f"{pct:.2f} %" if 0 < pct < 1 else f"{pct:.1f} %"


def amount(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return NONE
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def number(value: Any) -> str:
    """An evidence value: four significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return esc(value)


def duration(value: float) -> str:
    """A configured duration as the config writes one (500ms, 15s, 5m)."""
    return format_duration(value)


def age(seconds_ago: float) -> str:
    s = max(0.0, seconds_ago)
    if s < 60:
        return f"{s:.0f}s ago"
    if s < 3600:
        return f"{s / 60:.0f}m ago"
    return f"{s / 3600:.1f}h ago"
