"""prometheus_client rendering the same batches the exporter's store renders: the reference
its text is held to (tests/test_exposition.py) and timed against (benchmarks/path_scale.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.utils import floatToGoString

from exporter.checks.batch import Batch, Buckets
from exporter.metrics import SCHEMA, Family


class BatchCollector:
    """Yields every family of ``batches`` (owner -> batch) once, owners in order."""

    def __init__(self, batches: Mapping[str, Batch]) -> None:
        self._batches = batches

    def collect(self) -> Iterator[Metric]:
        families: dict[Family, Metric] = {}
        for batch in self._batches.values():
            for family, values, value in batch:
                metric = families.get(family)
                if metric is None:
                    metric = families[family] = Metric(family.base, family.help, family.kind)
                labels = dict(zip(family.labels, values, strict=True))
                if isinstance(value, Buckets):
                    _histogram(metric, family.name, labels, value)
                else:
                    metric.add_sample(family.name, labels, value)
        rank = {f: i for i, f in enumerate(SCHEMA.values())}
        yield from (families[f] for f in sorted(families, key=rank.__getitem__))


def _histogram(metric: Metric, name: str, labels: dict[str, str], value: Buckets) -> None:
    for bound, count in zip(value.bounds, value.counts, strict=True):
        le: str = floatToGoString(bound)  # type: ignore[no-untyped-call]
        metric.add_sample(f"{name}_bucket", {**labels, "le": le}, count)
    if value.count is not None:
        metric.add_sample(f"{name}_count", labels, value.count)
    if value.sum is not None:
        metric.add_sample(f"{name}_sum", labels, value.sum)


def reference_text(batches: Mapping[str, Batch] | Iterable[Batch], openmetrics: bool) -> bytes:
    """``generate_latest`` of the batches (OpenMetrics without its ``# EOF``)."""
    if not isinstance(batches, Mapping):
        batches = {str(i): b for i, b in enumerate(batches)}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BatchCollector(batches))
    if not openmetrics:
        return generate_latest(registry)
    text: bytes = generate_openmetrics(registry)  # type: ignore[no-untyped-call]
    return text[: -len(b"# EOF\n")]
