"""What a family is, and the one table of them all: every section module defines its
families here, once.

Checks, rule and dashboard generators and docs/metrics.md all read names from here, so a
name is never typed twice. Conventions (design.md): namespace ``llm_``, base units, counters
end in ``_total``, absent-not-zero for anything a source does not provide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

NAMESPACE = "llm"


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Family:
    """One metric family: its full exposed name (counters include ``_total``)."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None
    section: str = "exporter"

    @property
    def base(self) -> str:
        """Name without the ``_total`` suffix, as prometheus_client wants for counters."""
        if self.kind is Kind.COUNTER and self.name.endswith("_total"):
            return self.name[: -len("_total")]
        return self.name

    def create(
        self, registry: CollectorRegistry, buckets: Sequence[float] | None = None
    ) -> Counter | Gauge | Histogram:
        """A prometheus_client object for this family on ``registry`` (a histogram with
        ``buckets`` instead of the declared ones): for the runtime's own families only, as
        checks publish batches (``exporter/checks/batch.py``)."""
        labels = list(self.labels)
        if self.kind is Kind.COUNTER:
            return Counter(self.base, self.help, labels, registry=registry)
        if self.kind is Kind.GAUGE:
            return Gauge(self.name, self.help, labels, registry=registry)
        bounds = buckets or self.buckets
        assert bounds is not None, f"{self.name}: histogram without buckets"
        return Histogram(self.name, self.help, labels, buckets=bounds, registry=registry)

    def counter(self, registry: CollectorRegistry) -> Counter:
        assert self.kind is Kind.COUNTER
        metric = self.create(registry)
        assert isinstance(metric, Counter)
        return metric

    def gauge(self, registry: CollectorRegistry) -> Gauge:
        assert self.kind is Kind.GAUGE
        metric = self.create(registry)
        assert isinstance(metric, Gauge)
        return metric

    def histogram(
        self, registry: CollectorRegistry, buckets: Sequence[float] | None = None
    ) -> Histogram:
        assert self.kind is Kind.HISTOGRAM
        metric = self.create(registry, buckets)
        assert isinstance(metric, Histogram)
        return metric

    def gauge_family(self) -> GaugeMetricFamily:
        """An empty family for the runtime's custom collectors (values added by the caller)."""
        assert self.kind is Kind.GAUGE
        return GaugeMetricFamily(self.name, self.help, labels=list(self.labels))


SCHEMA: dict[str, Family] = {}


def define(
    name: str,
    kind: Kind,
    help: str,
    labels: Sequence[str] = (),
    buckets: Sequence[float] | None = None,
    section: str = "exporter",
) -> Family:
    assert name.startswith(NAMESPACE + "_"), name
    assert name not in SCHEMA, f"{name} defined twice"
    assert (kind is Kind.COUNTER) == name.endswith("_total"), f"{name}: counter suffix"
    # promtool check metrics rejects these on anything but a histogram or summary.
    assert kind is Kind.HISTOGRAM or not name.endswith(("_count", "_sum", "_bucket")), \
        f"{name}: histogram suffix"
    fam = Family(name, kind, help, tuple(labels), tuple(buckets) if buckets else None, section)
    SCHEMA[name] = fam
    return fam
