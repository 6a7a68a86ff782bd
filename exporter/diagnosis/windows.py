"""Bounded in-memory history of the exporter's own registry: the embedded source's windows.

Every ``diagnosis.interval`` the evaluator hands :meth:`History.record` the current values
of the samples the chain reads (``families.KINDS``, derived from the declarations). A
snapshot stores one float per scalar (a counter, a gauge, one histogram bucket, a ``_sum``,
a ``_count``) in an ``array('d')`` beside a layout (the keys) that consecutive snapshots
share, so its cost is 8 bytes a scalar. Fine snapshots cover ``diagnosis.window``; one a
minute (``DiagnosisConfig.baseline_step``), of the samples read over a baseline, the whole
history or the page's last hour only (``families.COARSE_SAMPLES``), covers
``diagnosis.history``. Both deques have a fixed ``maxlen`` and the number of scalars per
snapshot is capped, so memory is bounded whatever the registry does (docs/dev/diagnosis.md,
"Embedded windows: memory").
"""

from __future__ import annotations

import logging
import math
from array import array
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from exporter.config.policy import DiagnosisConfig
from exporter.diagnosis.families import (
    COARSE_GAUGES,
    COARSE_SAMPLES,
    KINDS,
    PEAK,
    RawSample,
)
from exporter.diagnosis.stats import Key, Labels, part

log = logging.getLogger("exporter.diagnosis")

#: Scalars kept per fine snapshot at most, and per coarse one; past them the rest are
#: dropped (and logged once). About 4x and 5x what 10 probes, 3 engines, 30 paths and 8 GPUs
#: need, so the bound bites only on a cardinality accident.
MAX_VALUES = 20_000
MAX_COARSE_VALUES = 5_000
#: Baselines need this much off-peak time in the history (``diagnosis.min_baseline``).
MIN_BASELINE_SECONDS: float = DiagnosisConfig.model_fields["min_baseline"].default


@dataclass(frozen=True, slots=True, eq=False)
class Layout:
    """The keys of a snapshot's values, shared by every snapshot with the same series."""

    keys: tuple[Key, ...]
    index: dict[Key, int] = field(repr=False)
    by_sample: dict[str, tuple[int, ...]] = field(repr=False)
    #: Positions of counter and histogram values (the others are gauges).
    monotonic: tuple[int, ...] = field(repr=False)

    @classmethod
    def of(cls, keys: tuple[Key, ...]) -> Layout:
        by: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            by.setdefault(k[0], []).append(i)
        mono = tuple(i for i, k in enumerate(keys) if KINDS[k[0]][0])
        return cls(keys, {k: i for i, k in enumerate(keys)},
                   {s: tuple(p) for s, p in by.items()}, mono)


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    at: float  # unix time
    in_peak: bool
    layout: Layout
    values: array[float]

    def get(self, key: Key) -> float | None:
        i = self.layout.index.get(key)
        return None if i is None else self.values[i]

    def items(self, sample: str) -> Iterator[tuple[Key, float]]:
        keys, values = self.layout.keys, self.values
        for i in self.layout.by_sample.get(sample, ()):
            yield keys[i], values[i]


def increases(first: Snapshot | None, last: Snapshot, sample: str) -> Iterator[tuple[Key, float]]:
    """Increase of every ``sample`` series from ``first`` to ``last`` (reset-corrected)."""
    for key, v in last.items(sample):
        base = first.get(key) if first is not None else None
        yield key, v - (base or 0.0)


@dataclass(frozen=True)
class Window:
    """The fine snapshots of one window: ``first`` is the newest at or before its start."""

    snapshots: tuple[Snapshot, ...]
    seconds: float  # the configured window
    # Several windows read one family (every probe reads the TTFT buckets): compute once.
    _increases: dict[str, list[tuple[Key, float]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    _over_time: dict[str, dict[Key, list[float]]] = field(
        default_factory=dict, repr=False, compare=False
    )
    # (what, sample, label) -> label value -> its series (stats.part)
    _parts: dict[tuple[str, str, str], dict[str, list[Any]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def first(self) -> Snapshot:
        return self.snapshots[0]

    @property
    def last(self) -> Snapshot:
        return self.snapshots[-1]

    @property
    def span(self) -> float:
        """Seconds the window's samples actually cover (less than ``seconds`` early on)."""
        return self.last.at - self.first.at

    def increase(self, sample: str) -> list[tuple[Key, float]]:
        """``increase(sample[w])`` without PromQL's extrapolation to the window's edges (a
        ratio or a quantile is the same either way)."""
        cached = self._increases.get(sample)
        if cached is None:
            cached = (
                list(increases(self.first, self.last, sample)) if len(self.snapshots) > 1 else []
            )
            self._increases[sample] = cached
        return cached

    def part(self, sample: str, label: str, value: str) -> list[tuple[Key, float]]:
        """The increases of the ``sample`` series whose ``label`` is ``value``: one index pass
        per family, not one scan per probe, path or engine (quadratic at 1000 targets)."""
        return part(self._parts, ("inc", sample, label), lambda: self.increase(sample), value)

    def gauge(self, sample: str) -> Iterator[tuple[Key, float]]:
        return self.last.items(sample)

    def last_part(self, sample: str, label: str, value: str) -> list[tuple[Key, float]]:
        """``gauge`` of the series whose ``label`` is ``value``, like ``part``."""
        return part(self._parts, ("last", sample, label), lambda: self.gauge(sample), value)

    def over_time_part(self, sample: str, label: str, value: str) -> list[Any]:
        """``over_time`` items of the series whose ``label`` is ``value``, like ``part``."""
        return part(self._parts, ("over", sample, label), self.over_time(sample).items, value)

    def over_time(self, sample: str) -> dict[Key, list[float]]:
        """Every series of ``sample`` with its values over the window (``*_over_time``),
        oldest first; the start snapshot counts only when it is the only one."""
        cached = self._over_time.get(sample)
        if cached is None:
            cached = {}
            for snap in self.snapshots[1:] or self.snapshots:
                for key, v in snap.items(sample):
                    cached.setdefault(key, []).append(v)
            self._over_time[sample] = cached
        return cached


@dataclass
class OffPeak:
    """Increases summed over the off-peak intervals of the coarse history that ended before
    the window: the window is never its own baseline (PromQL's ``offset``)."""

    min_seconds: float = MIN_BASELINE_SECONDS
    seconds: float = 0.0
    acc: dict[Key, float] = field(default_factory=dict)
    _index: dict[str, list[tuple[Key, float]]] | None = field(default=None, repr=False)
    _parts: dict[tuple[str, str, str], dict[str, list[Any]]] = field(
        default_factory=dict, repr=False
    )

    def add(self, a: Snapshot, b: Snapshot, sign: float) -> None:
        if a.in_peak or b.in_peak:
            return
        self._index = None
        self._parts.clear()
        self.seconds += sign * (b.at - a.at)
        keys, values = b.layout.keys, b.values
        for i in b.layout.monotonic:
            key = keys[i]
            base = a.get(key)
            d = values[i] - (base or 0.0)
            left = self.acc.get(key, 0.0) + sign * d
            if sign < 0 and left <= 1e-9 * max(1.0, abs(d)):
                # What an evicted interval added is gone; float residue is not a count.
                self.acc.pop(key, None)
            else:
                self.acc[key] = left

    @property
    def ready(self) -> bool:
        return self.seconds >= self.min_seconds

    def items(self, sample: str) -> list[tuple[Key, float]]:
        if self._index is None:
            index: dict[str, list[tuple[Key, float]]] = {}
            for k, v in self.acc.items():
                index.setdefault(k[0], []).append((k, v))
            self._index = index
        return self._index.get(sample, [])

    def part(self, sample: str, label: str, value: str) -> list[tuple[Key, float]]:
        """``items`` of the series whose ``label`` is ``value``, indexed once per change."""
        return part(self._parts, ("base", sample, label), lambda: self.items(sample), value)


class History:
    """Fine snapshots for the window, coarse ones for the history, both bounded."""

    def __init__(
        self,
        window: float,
        interval: float,
        history: float,
        coarse_step: float = 60.0,
        max_values: int = MAX_VALUES,
        max_coarse_values: int = MAX_COARSE_VALUES,
        min_baseline: float = MIN_BASELINE_SECONDS,
    ) -> None:
        self.window, self.interval, self.history = window, interval, history
        self.min_baseline = min_baseline
        self.coarse_step = max(coarse_step, interval)
        self.max_values = max_values
        self.max_coarse_values = max_coarse_values
        # One start snapshot before the window, and slack for ticks that come early.
        self.fine: deque[Snapshot] = deque(maxlen=math.ceil(window / interval) + 2)
        self.coarse: deque[Snapshot] = deque(maxlen=math.ceil(history / self.coarse_step) + 1)
        self.baseline = OffPeak(min_baseline)
        #: Coarse intervals in the baseline: those between coarse[0] and coarse[joined].
        self._joined = 0
        #: Highest value of each coarse gauge since the last coarse snapshot.
        self._peaks: dict[Key, float] = {}
        self._state: dict[Key, tuple[float, float, float]] = {}  # raw, corrected, last seen
        self._layout: Layout | None = None
        self._coarse_from: tuple[Layout, Layout, tuple[int, ...]] | None = None
        self._capped = False
        self._keys: dict[tuple[str, tuple[tuple[str, str], ...]], Key] = {}

    @classmethod
    def from_config(cls, cfg: DiagnosisConfig) -> History:
        return cls(cfg.window, cfg.interval, cfg.history, cfg.baseline_step,
                   min_baseline=cfg.min_baseline)

    def same_shape(self, cfg: DiagnosisConfig) -> bool:
        return (self.window, self.interval, self.history, self.min_baseline) == (
            cfg.window, cfg.interval, cfg.history, cfg.min_baseline
        )

    # --- recording ------------------------------------------------------------------------
    def record(self, samples: Iterable[RawSample], at: float) -> Snapshot:
        first_ever = not self.fine and not self.coarse
        in_peak = False
        rows: list[tuple[Key, float]] = []
        cache = self._keys
        if len(cache) > 2 * self.max_values:
            cache.clear()  # series churn: start the cache again rather than grow it
        for name, labels, value in samples:
            if name == PEAK:
                in_peak = in_peak or value == 1
                continue
            if name not in KINDS:
                continue  # a sample no declaration reads (the runtime's store leaves these out)
            # collect() yields labels in the family's label order, so the items are a stable
            # cache key; sorting and parsing le once per series, not once per snapshot.
            raw = (name, tuple(labels.items()))
            key = cache.get(raw)
            if key is None:
                le_text = labels.get("le")
                rest: Labels = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
                key = cache[raw] = (name, rest, None if le_text is None else float(le_text))
            rows.append((key, value))
        if len(rows) > self.max_values:
            if not self._capped:
                log.warning(
                    "diagnosis history capped",
                    extra={"values": len(rows), "kept": self.max_values},
                )
                self._capped = True
            rows = rows[: self.max_values]
        keys = tuple(k for k, _ in rows)
        layout = self._layout
        if layout is None or layout.keys != keys:
            layout = self._layout = Layout.of(keys)
        values = array("d", self._corrected(rows, at, first_ever))
        snap = Snapshot(at, in_peak, layout, values)
        self.fine.append(snap)
        self._hold_peaks(snap)
        if not self.coarse or at - self.coarse[-1].at >= self.coarse_step - self.interval / 2:
            self._push_coarse(self._project(snap))
            self._prune(at)
        return snap

    def _corrected(self, rows: list[tuple[Key, float]], at: float, first_ever: bool) -> Iterator[
        float
    ]:
        state = self._state
        for key, raw in rows:
            mono, own = KINDS[key[0]]
            if not mono:
                yield raw
                continue
            prev = state.get(key)
            if prev is None:
                corrected = raw if own and not first_ever else 0.0
            else:
                prev_raw, prev_corr, _ = prev
                corrected = prev_corr + (raw - prev_raw if raw >= prev_raw else raw)
            state[key] = (raw, corrected, at)
            yield corrected

    def _project(self, snap: Snapshot) -> Snapshot:
        cached = self._coarse_from
        if cached is None or cached[0] is not snap.layout:
            pos = tuple(
                i for i, k in enumerate(snap.layout.keys) if k[0] in COARSE_SAMPLES
            )[: self.max_coarse_values]
            cached = self._coarse_from = (
                snap.layout, Layout.of(tuple(snap.layout.keys[i] for i in pos)), pos
            )
        _, layout, pos = cached
        peaks = self._peaks
        keys = snap.layout.keys
        values = array("d", (peaks.pop(keys[i], snap.values[i]) for i in pos))
        room = self.max_coarse_values - len(values)
        if peaks and room > 0:
            # Gauges gone since the last coarse snapshot (a route class replaced by another)
            # are kept with their peak this once, so the history still knows they were.
            gone = list(peaks.items())[:room]
            layout = Layout.of(layout.keys + tuple(k for k, _ in gone))
            values.extend(v for _, v in gone)
        peaks.clear()
        if self.coarse and self.coarse[-1].layout.keys == layout.keys:
            layout = self.coarse[-1].layout
        return Snapshot(snap.at, snap.in_peak, layout, values)

    def _hold_peaks(self, snap: Snapshot) -> None:
        peaks = self._peaks
        keys, values = snap.layout.keys, snap.values
        for sample in COARSE_GAUGES:
            for i in snap.layout.by_sample.get(sample, ()):
                v = values[i]
                if v > peaks.get(keys[i], -math.inf):
                    peaks[keys[i]] = v

    def _push_coarse(self, snap: Snapshot) -> None:
        coarse, base = self.coarse, self.baseline
        if len(coarse) == coarse.maxlen:
            oldest = coarse.popleft()
            if self._joined > 0:
                base.add(oldest, coarse[0], -1.0)
                self._joined -= 1
        coarse.append(snap)
        # An interval joins the baseline once it lies wholly before the window.
        cutoff = snap.at - self.window
        while self._joined + 1 < len(coarse) and coarse[self._joined + 1].at <= cutoff:
            base.add(coarse[self._joined], coarse[self._joined + 1], 1.0)
            self._joined += 1

    def _prune(self, at: float) -> None:
        # Reset state of series gone for longer than the history can remember them.
        stale = [k for k, (_, _, seen) in self._state.items() if at - seen > self.history]
        for key in stale:
            del self._state[key]

    # --- reading ----------------------------------------------------------------------------
    def window_at(self, now: float, seconds: float | None = None) -> Window | None:
        """The fine snapshots of the window ending at ``now`` (``seconds`` long, else the
        diagnosis window); None before the first."""
        span = self.window if seconds is None else seconds
        snaps = [s for s in self.fine if s.at <= now]
        if not snaps:
            return None
        start = now - span
        i = max((j for j, s in enumerate(snaps) if s.at <= start), default=0)
        return Window(tuple(snaps[i:]), span)

    def everything(self) -> Iterator[Snapshot]:
        """Coarse snapshots, then the fine ones newer than the last coarse (history order)."""
        yield from self.coarse
        last = self.coarse[-1].at if self.coarse else -math.inf
        yield from (s for s in self.fine if s.at > last)

    @property
    def values(self) -> int:
        """Scalars held in all snapshots (what memory grows with)."""
        return sum(len(s.values) for s in self.fine) + sum(len(s.values) for s in self.coarse)
