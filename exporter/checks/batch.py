"""What a check publishes: one immutable batch of samples per run (node_exporter's
``Update(ch)``), and the plain state a check keeps between runs to build it.

A sample is ``(family, label values, value)``: the family from the one schema
(``exporter/metrics``), its label values in the family's label order, and a float (a
counter's or a gauge's value) or ``Buckets`` (a histogram's). A batch holds every series the
check owns now; what it leaves out is gone. The runtime alone renders, snapshots and serves
them (``exporter/runtime/exposition.py``), so nothing here knows a text format.

Counters and histograms are cumulative: a check keeps them in a ``Ledger`` across runs, and
``Ledger.batch()`` freezes them, so a batch never sees a counter go backwards. A check names
each label it gives the ledger (``{**labels, "outcome": "ok"}``), never relies on a
position: a family's label order is the schema's business, and a value put under the
wrong label would otherwise publish silently. The ledger checks the names against the
family's and keeps the values in its order, so a sample stays the plain tuple above.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from exporter.metrics import Family, Kind

#: Label values in the family's label order: how a sample carries them.
Labels = tuple[str, ...]
#: Label values by name: how a check gives them, exactly the family's label names.
Named = Mapping[str, str]
#: For a family without labels.
NO_LABELS: Named = MappingProxyType({})


def label_values(family: Family, labels: Named) -> Labels:
    """``labels`` as ``family``'s label values, in its order. They must name exactly its
    labels: an extra or misspelt name fails here, naming the family, where it would
    otherwise be dropped unseen or end as a bare KeyError."""
    names = family.labels
    try:
        values = tuple(map(labels.__getitem__, names))
    except KeyError:
        values = ()
    assert len(values) == len(names) == len(labels), (
        f"{family.name}: wrong labels {sorted(set(labels).symmetric_difference(names))}"
        f" (given {sorted(labels)}, the family's are {list(names)})"
    )
    return values


@dataclass(frozen=True, slots=True)
class Buckets:
    """One histogram series: cumulative counts per upper bound (ascending, ``+Inf`` last
    where the source has it), and ``_sum`` and ``_count`` where known (an engine's may not)."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float | None
    count: float | None


Value = float | Buckets
Sample = tuple[Family, Labels, Value]
#: Everything one check owns now; tuples all the way down, so it is never changed once handed.
Batch = tuple[Sample, ...]


class Counter:
    """One counter series: only ever goes up."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, by: float = 1.0) -> None:
        if by < 0:
            raise ValueError(f"a counter cannot go down (inc by {by})")
        self.value += by


class Gauge:
    """One gauge series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)


class Histogram:
    """One histogram series, counting each observation once in the first bucket whose upper
    bound it does not exceed (Prometheus's ``le``)."""

    __slots__ = ("_counts", "_sum", "bounds")

    def __init__(self, bounds: Sequence[float]) -> None:
        ordered = tuple(sorted(float(b) for b in bounds))
        self.bounds = ordered if ordered and ordered[-1] == math.inf else (*ordered, math.inf)
        self._counts = [0.0] * len(self.bounds)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self._sum += value

    def merge(self, counts: Sequence[float], total: float) -> None:
        """Add observations binned elsewhere (``counts[i]`` in bucket ``i`` by
        ``bisect_left(bounds, value)``, not cumulative) whose values sum to ``total``: a
        worker thread's tally, added on the event loop in one step."""
        assert len(counts) == len(self._counts), "counts per bucket, +Inf included"
        for i, n in enumerate(counts):
            self._counts[i] += n
        self._sum += total

    def freeze(self) -> Buckets:
        counts = tuple(itertools.accumulate(self._counts))
        return Buckets(self.bounds, counts, self._sum, counts[-1])


Series = Counter | Gauge | Histogram


class Ledger:
    """The series one check owns, by family and label values, in the order first created.

    ``counter``, ``gauge`` and ``histogram`` return the series (created at zero on first
    use, so pre-creating one is calling it once); ``remove`` makes one absent again. Each
    takes the labels by name (``label_values``); a check on a hot path keeps the series it
    returned rather than asking again."""

    def __init__(self) -> None:
        # Keyed by the family's name, unique in the schema: hashing the Family dataclass
        # would hash every field on every call.
        self._series: dict[tuple[str, Labels], tuple[Family, Series]] = {}

    def _get(self, family: Family, labels: Named, bounds: Sequence[float] | None) -> Series:
        key = (family.name, label_values(family, labels))
        found = self._series.get(key)
        if found is not None:
            return found[1]
        series: Series
        if family.kind is Kind.HISTOGRAM:
            declared = bounds or family.buckets
            assert declared is not None, f"{family.name}: histogram without buckets"
            series = Histogram(declared)
        else:
            series = Counter() if family.kind is Kind.COUNTER else Gauge()
        self._series[key] = (family, series)
        return series

    def counter(self, family: Family, labels: Named = NO_LABELS) -> Counter:
        series = self._get(family, labels, None)
        assert isinstance(series, Counter), family.name
        return series

    def gauge(self, family: Family, labels: Named = NO_LABELS) -> Gauge:
        series = self._get(family, labels, None)
        assert isinstance(series, Gauge), family.name
        return series

    def histogram(
        self, family: Family, labels: Named = NO_LABELS, bounds: Sequence[float] | None = None
    ) -> Histogram:
        """``bounds`` replace the family's declared buckets (a config chose its own)."""
        series = self._get(family, labels, bounds)
        assert isinstance(series, Histogram), family.name
        return series

    def remove(self, family: Family, labels: Named = NO_LABELS) -> None:
        self._series.pop((family.name, label_values(family, labels)), None)

    def batch(self) -> Batch:
        return tuple(
            (family, labels, s.freeze() if isinstance(s, Histogram) else s.value)
            for (_, labels), (family, s) in self._series.items()
        )
