"""The last hour of the embedded windows as points, for the sparklines of the ``/`` page.

A point is the embedded source's statistics (``embedded.observe_window``) over one step of the
history: between two consecutive coarse snapshots (one a minute), and a last one from the
newest coarse snapshot to the newest fine one, so a sparkline ends at the current moment. The
numbers are the tiles' numbers computed the same way over a shorter span; no second history
is kept. A coarse step never changes once both its ends exist, so its point is computed once
and remembered (per config: a reload can change the SLOs and the target list).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from exporter.config.models import Config
from exporter.diagnosis.embedded import observe_window
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.windows import History, OffPeak, Snapshot, Window

#: How far back the sparklines reach.
SPAN = 3600.0


@dataclass(frozen=True)
class Point:
    start: float  # unix time of the step's first snapshot
    end: float  # and of its last: the point's place on the time axis
    obs: Observations


class Trends:
    """Points over the last :data:`SPAN` of one history, remembered per coarse step."""

    def __init__(self) -> None:
        self._config: Config | None = None
        self._done: dict[tuple[float, float], Point] = {}

    def points(self, history: History, config: Config, now: float) -> tuple[Point, ...]:
        if config is not self._config:
            self._config, self._done = config, {}
        coarse = [s for s in history.coarse if now - s.at <= SPAN]
        out = [self._step(a, b, config) for a, b in pairwise(coarse)]
        keep = {(p.start, p.end) for p in out}
        self._done = {k: p for k, p in self._done.items() if k in keep}
        tail = _tail(history, coarse[-1] if coarse else None, now)
        if tail is not None:
            a, b = tail
            out.append(_point(a, b, config))
        return tuple(out)

    def _step(self, a: Snapshot, b: Snapshot, config: Config) -> Point:
        key = (a.at, b.at)
        found = self._done.get(key)
        if found is None:
            found = self._done[key] = _point(a, b, config)
        return found


def _point(a: Snapshot, b: Snapshot, config: Config) -> Point:
    window = Window((a, b), b.at - a.at)
    return Point(a.at, b.at, observe_window(window, config, b.at, OffPeak(), None))


def _tail(history: History, last: Snapshot | None, now: float) -> tuple[Snapshot, Snapshot] | None:
    """From the newest coarse snapshot to the newest fine one. It starts at the fine snapshot
    the coarse one was projected from: the coarse one lacks the families only the chain reads,
    and an increase from a missing series would be the whole counter."""
    fine = [s for s in history.fine if s.at <= now]
    if last is None or not fine or fine[-1].at <= last.at:
        return None
    start = next((s for s in fine if s.at == last.at), None)
    if start is None:
        start = fine[0]  # the coarse step outlived the fine window: the window's start
    return (start, fine[-1]) if start is not fine[-1] else None
