"""Quantiles as PromQL computes them, and the peak-minus-daytime differences."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from exporter.bench.summary import percentile
from exporter.diagnosis.stats import histogram_quantile, quantile_bucket
from exporter.report.model import Diff, Metric, Quantiles, Unit
from exporter.report.period import DAYTIME

QUANTILES = (0.5, 0.95, 0.99)
NAMES = ("p50", "p95", "p99")


def from_buckets(counts: Mapping[float, float] | None) -> Quantiles | None:
    """``histogram_quantile`` of each quantile over cumulative counts; None with no data."""
    if not counts:
        return None
    p50, p95, p99 = (histogram_quantile(q, counts) for q in QUANTILES)
    if p50 is None:
        return None
    buckets: dict[str, tuple[float, float | None]] = {}
    for name, q in zip(NAMES, QUANTILES, strict=True):
        found = quantile_bucket(q, counts)
        if found is not None:
            buckets[name] = (found[0], found[1] if math.isfinite(found[1]) else None)
    return Quantiles(count=max(counts.values()), p50=p50, p95=p95, p99=p99, buckets=buckets)


def from_samples(values: Sequence[float] | None) -> Quantiles | None:
    """``quantile_over_time`` of each quantile over pooled samples; None with none."""
    if not values:
        return None
    ordered = sorted(values)
    p50, p95, p99 = (percentile(ordered, q * 100) for q in QUANTILES)
    return Quantiles(count=len(ordered), p50=p50, p95=p95, p99=p99)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def metric(name: str, unit: Unit, by_class: Mapping[str, Quantiles | None],
           classes: Sequence[str]) -> Metric:
    """The statistic for every class (absent ones null), and each peak window minus
    daytime."""
    full = {cls: by_class.get(cls) for cls in classes}
    day = full.get(DAYTIME)
    diff = {}
    for cls in classes:
        if cls == DAYTIME:
            continue
        peak = full[cls]
        diff[cls] = Diff(**{
            q: _minus(getattr(peak, q, None), getattr(day, q, None))
            for q in NAMES
        })
    return Metric(metric=name, unit=unit, by_class=full, diff=diff)


def ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den
