"""The queries the report runs, one per segment, summed per class.

Histograms and counters are read as ``increase(...[segment] @ end)`` per segment and the
counts added up per class, so a class made of many evenings is the sum of its evenings, and
its quantile is the one ``histogram_quantile`` gives over that sum. Gauges (jitter, loss per
burst) are read as their raw samples per segment and pooled per class.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from exporter.diagnosis.promapi import PromClient
from exporter.metrics import Family
from exporter.report.period import Segment

#: Label values identifying one row; "" where the series has no such label.
Key = tuple[str, ...]
#: Key -> class -> ``{le: cumulative count}``.
Buckets = dict[Key, dict[str, dict[float, float]]]
#: Key -> class -> summed value.
Totals = dict[Key, dict[str, float]]
#: Key -> class -> pooled samples.
Samples = dict[Key, dict[str, list[float]]]


def key_of(labels: Mapping[str, str], by: Sequence[str]) -> Key:
    return tuple(str(labels.get(name, "")) for name in by)


class Collector:
    """Runs each query once per segment of the period against one Prometheus."""

    def __init__(self, client: PromClient, segments: Sequence[Segment]) -> None:
        self.client = client
        self.segments = segments

    def buckets(self, family: Family, by: Sequence[str], match: str = "") -> Buckets:
        out: Buckets = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
        for seg in self.segments:
            expr = (f"sum by (le, {', '.join(by)}) "
                    f"(increase({family.name}_bucket{match}{seg.range_at()}))")
            for s in self.client.query(expr, seg.end):
                if s.value is not None:
                    out[key_of(s.labels, by)][seg.cls][float(s.labels["le"])] += s.value
        return out

    def totals(self, family: Family, by: Sequence[str], match: str = "") -> Totals:
        return self._increase(family.name, by, match)

    def means(self, family: Family, by: Sequence[str], match: str = "") -> Totals:
        """A histogram's mean per class: its sums over its counts, each class's segments
        added up first (means add up where quantiles do not)."""
        sums = self._increase(f"{family.name}_sum", by, match)
        counts = self._increase(f"{family.name}_count", by, match)
        out: Totals = defaultdict(lambda: defaultdict(float))
        for key, per in counts.items():
            for cls, n in per.items():
                if n > 0 and cls in sums.get(key, {}):
                    out[key][cls] = sums[key][cls] / n
        return out

    def _increase(self, name: str, by: Sequence[str], match: str) -> Totals:
        out: Totals = defaultdict(lambda: defaultdict(float))
        for seg in self.segments:
            expr = f"sum by ({', '.join(by)}) (increase({name}{match}{seg.range_at()}))"
            for s in self.client.query(expr, seg.end):
                if s.value is not None:
                    out[key_of(s.labels, by)][seg.cls] += s.value
        return out

    def samples(self, family: Family, by: Sequence[str], match: str = "") -> Samples:
        out: Samples = defaultdict(lambda: defaultdict(list))
        for seg in self.segments:
            for series in self.client.query_series(f"{family.name}{match}{seg.range_at()}",
                                                   seg.end):
                values = [v for _, v in series.samples if v is not None]
                out[key_of(series.labels, by)][seg.cls].extend(values)
        return out
