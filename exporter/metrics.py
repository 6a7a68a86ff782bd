"""The metric schema: every family the exporter serves, defined once.

Checks, rule and dashboard generators and docs/metrics.md all read names from here, so a
name is never typed twice. Conventions (design.md): namespace ``llm_``, base units, counters
end in ``_total``, absent-not-zero for anything a source does not provide.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

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
        self, registry: CollectorRegistry, extra_labels: Sequence[str] = ()
    ) -> Counter | Gauge | Histogram:
        """A prometheus_client object for this family on ``registry``."""
        labels = list(self.labels) + list(extra_labels)
        if self.kind is Kind.COUNTER:
            return Counter(self.base, self.help, labels, registry=registry)
        if self.kind is Kind.GAUGE:
            return Gauge(self.name, self.help, labels, registry=registry)
        assert self.buckets is not None, f"{self.name}: histogram without buckets"
        return Histogram(self.name, self.help, labels, buckets=self.buckets, registry=registry)

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

    def histogram(self, registry: CollectorRegistry) -> Histogram:
        assert self.kind is Kind.HISTOGRAM
        metric = self.create(registry)
        assert isinstance(metric, Histogram)
        return metric

    def gauge_family(self, extra_labels: Iterable[str] = ()) -> GaugeMetricFamily:
        """An empty family for custom collectors (values added by the caller)."""
        assert self.kind is Kind.GAUGE
        return GaugeMetricFamily(self.name, self.help, labels=[*self.labels, *extra_labels])

    def counter_family(self, extra_labels: Iterable[str] = ()) -> CounterMetricFamily:
        assert self.kind is Kind.COUNTER
        return CounterMetricFamily(self.base, self.help, labels=[*self.labels, *extra_labels])

    def histogram_family(self, extra_labels: Iterable[str] = ()) -> HistogramMetricFamily:
        assert self.kind is Kind.HISTOGRAM
        return HistogramMetricFamily(self.name, self.help, labels=[*self.labels, *extra_labels])


SCHEMA: dict[str, Family] = {}


def _def(
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
    fam = Family(name, kind, help, tuple(labels), tuple(buckets) if buckets else None, section)
    SCHEMA[name] = fam
    return fam


# Check durations span a sub-millisecond NVML read to a multi-second traceroute.
CHECK_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# --- exporter self-metrics -------------------------------------------------------------
EXPORTER_BUILD_INFO = _def(
    "llm_exporter_build_info",
    Kind.GAUGE,
    "Always 1; labels carry the exporter version and Python version.",
    ("version", "python"),
)
EXPORTER_CHECK_RUNS = _def(
    "llm_exporter_check_runs_total",
    Kind.COUNTER,
    "Runs of each check by outcome: success, error (the check raised), timeout (ran past its "
    "timeout and was cancelled), skipped (the previous run had still not finished).",
    ("check", "outcome"),
)
EXPORTER_CHECK_DURATION = _def(
    "llm_exporter_check_duration_seconds",
    Kind.HISTOGRAM,
    "Wall-clock duration of each check run, whatever its outcome.",
    ("check",),
    CHECK_DURATION_BUCKETS,
)
EXPORTER_CHECK_LAST_SUCCESS = _def(
    "llm_exporter_check_last_success_timestamp_seconds",
    Kind.GAUGE,
    "Unix time of the last successful run of each check; absent until one succeeds.",
    ("check",),
)
EXPORTER_PEAK_WINDOW = _def(
    "llm_exporter_peak_window",
    Kind.GAUGE,
    "1 while local time in peak_windows.timezone is inside the named window, else 0. "
    "Rules gate day-vs-evening comparisons on it, so PromQL needs no timezone arithmetic.",
    ("window",),
)
EXPORTER_CONFIG_RELOADS = _def(
    "llm_exporter_config_reloads_total",
    Kind.COUNTER,
    "Config reloads (SIGHUP) by outcome: success, or error (the old config kept running).",
    ("outcome",),
)
EXPORTER_CONFIG_LAST_RELOAD_SUCCESSFUL = _def(
    "llm_exporter_config_last_reload_successful",
    Kind.GAUGE,
    "1 if the last config load or reload succeeded, 0 if it failed and the old config runs.",
)
