"""Numbers as the HTML and Markdown show them, each with its unit; and the JSON pointer of
each shown number, so a reader (or a test) can find it in report.json."""

from __future__ import annotations

import datetime as dt

from exporter.report.period import DAYTIME

DASH = "-"


def value(v: float | None, unit: str, signed: bool = False) -> str:
    if v is None:
        return DASH
    sign = "+" if signed and v > 0 else ""
    if unit == "s":
        if abs(v) < 1:
            return f"{sign}{v * 1000:.3g} ms"
        return f"{sign}{v:.3g} s"
    if unit == "ratio":
        return f"{sign}{v * 100:.3g}%"
    return f"{sign}{v:.3g} {unit}"


def change(rel: float | None) -> str:
    return DASH if rel is None else f"{rel * 100:+.1f}%"


def count(n: float | None) -> str:
    return DASH if n is None else f"{n:,.0f}"


def when(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float) -> str:
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def class_name(cls: str, windows: dict[str, str]) -> str:
    if cls == DAYTIME:
        return "daytime"
    return f"{cls} ({windows[cls]})" if cls in windows else cls


def scope(vantage: str, name: str) -> str:
    return f"{name or DASH} @ {vantage}" if vantage else (name or DASH)


def pointer(*parts: object) -> str:
    """RFC 6901: ``/carriers/0/metrics/1/by_class/daytime/p95``."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)
