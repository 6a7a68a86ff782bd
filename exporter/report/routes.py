"""Route class per carrier over the period: the share of time in each class and every
change, from ``llm_path_route_info`` (one series per class, 1 while it is the last
traceroute's) and the exporter's own count of changes."""

from __future__ import annotations

import datetime as dt
from collections import Counter

from exporter import metrics
from exporter.diagnosis.promapi import PromClient
from exporter.report.collect import Key, key_of
from exporter.report.model import Route, RouteChange
from exporter.report.sections import VANTAGE

BY = (VANTAGE, "carrier", "target")
#: No hop answered: says nothing about the route, so never a change (as in the exporter).
UNKNOWN = "unknown"


def _at(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.UTC)


def routes(client: PromClient, start: float, end: float, step: float) -> list[Route]:
    seen: dict[Key, dict[float, set[str]]] = {}
    for series in client.query_range(metrics.PATH_ROUTE_INFO.name, start, end, step):
        cls = series.labels.get("route_class", "")
        points = seen.setdefault(key_of(series.labels, BY), {})
        for t, v in series.samples:
            if v is not None:
                points.setdefault(t, set()).add(cls)
    counted = {key_of(s.labels, BY): s.value for s in client.query(
        f"sum by ({', '.join(BY)}) (increase({metrics.PATH_ROUTE_CHANGES.name}"
        f"[{round((end - start) * 1000)}ms] @ {end:.3f}))", end)}
    out = []
    for key in sorted(seen):
        share, changes = timeline(seen[key])
        out.append(Route(
            vantage=key[0], carrier=key[1], target=key[2],
            direction="in" if key[0] else "out", share=share,
            changes=[RouteChange(at=_at(t), old=a, new=b) for t, a, b in changes],
            changes_counted=counted.get(key)))
    return out


def timeline(points: dict[float, set[str]]) -> tuple[dict[str, float],
                                                     list[tuple[float, str, str]]]:
    """The share of points in each class, and each change as (time, old, new)."""
    share: Counter[str] = Counter()
    changes: list[tuple[float, str, str]] = []
    current: str | None = None
    for t in sorted(points):
        known = points[t] - {UNKNOWN}
        # While the old class's series goes stale both may be present: a change is when
        # the current class is gone, not when a second one appears.
        if known and current not in known:
            new = sorted(known)[0]
            if current is not None:
                changes.append((t, current, new))
            current = new
        share[current if current in known else UNKNOWN] += 1
    total = sum(share.values())
    return {c: n / total for c, n in sorted(share.items())}, changes
