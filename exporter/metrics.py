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


# --- engine ---------------------------------------------------------------------------
# One normalized schema over vLLM, trtllm-serve, Triton and SGLang; the source of each
# family per engine is the data table in exporter/engines/table.py. Data series carry
# `engine` (the engine family, e.g. vllm), `model` (capped per target by max_models) and
# `dp_rank` (data-parallel index; empty where the engine has none). Histograms have no
# bucket list here: they pass the engine's own `le` bounds through unchanged.
ENGINE_TARGET_LABELS = ("target",)
ENGINE_SERIES_LABELS = ("target", "engine", "model", "dp_rank")

ENGINE_UP = _def(
    "llm_engine_up",
    Kind.GAUGE,
    "1 if the last scrape of the engine's metrics endpoint succeeded and was understood, "
    "else 0. While 0, the target's engine data series are absent.",
    ENGINE_TARGET_LABELS,
    section="engine",
)
ENGINE_SCRAPE_DURATION = _def(
    "llm_engine_scrape_duration_seconds",
    Kind.GAUGE,
    "Wall-clock duration of the last scrape of the engine (request, read and parse), "
    "whatever its outcome.",
    ENGINE_TARGET_LABELS,
    section="engine",
)
ENGINE_SCRAPE_ERRORS = _def(
    "llm_engine_scrape_errors_total",
    Kind.COUNTER,
    "Failed engine scrapes by reason: timeout, connection (refused, reset, DNS, TLS), "
    "http_4xx, http_5xx, http_status (other non-2xx), too_large (body over the size cap), "
    "not_prometheus (HTML or JSON instead of the text format), malformed (a line of a mapped "
    "family does not parse), unrecognized (no known engine family in the exposition).",
    ("target", "reason"),
    section="engine",
)
ENGINE_DROPPED_SERIES = _def(
    "llm_engine_dropped_series_total",
    Kind.COUNTER,
    "Normalized series left out because the target reported more than max_models model "
    "values; increased by the number dropped on every scrape.",
    ENGINE_TARGET_LABELS,
    section="engine",
)
ENGINE_INFO = _def(
    "llm_engine_info",
    Kind.GAUGE,
    "Always 1 while the target is up; `family` is the engine family (vllm, trtllm, triton, "
    "sglang) and `version` the engine version where the engine reports one, else empty.",
    ("target", "family", "version"),
    section="engine",
)
ENGINE_REQUESTS_RUNNING = _def(
    "llm_engine_requests_running",
    Kind.GAUGE,
    "Requests in the engine's running batch at the last scrape.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUESTS_WAITING = _def(
    "llm_engine_requests_waiting",
    Kind.GAUGE,
    "Requests queued in the engine, waiting to be scheduled, at the last scrape.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_KV_CACHE_USAGE = _def(
    "llm_engine_kv_cache_usage_ratio",
    Kind.GAUGE,
    "Fraction (0..1) of the engine's KV-cache capacity in use at the last scrape.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_TTFT = _def(
    "llm_engine_time_to_first_token_seconds",
    Kind.HISTOGRAM,
    "Engine-side time to first token per request, with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_ITL = _def(
    "llm_engine_inter_token_latency_seconds",
    Kind.HISTOGRAM,
    "Engine-side time between consecutive output events (tokens) of a request, with the "
    "engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_E2E = _def(
    "llm_engine_e2e_request_latency_seconds",
    Kind.HISTOGRAM,
    "Engine-side end-to-end latency of finished requests, with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_QUEUE_TIME = _def(
    "llm_engine_queue_time_seconds",
    Kind.HISTOGRAM,
    "Time finished requests spent waiting in the engine queue before first being scheduled, "
    "with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PREFILL_TIME = _def(
    "llm_engine_prefill_time_seconds",
    Kind.HISTOGRAM,
    "Time finished requests spent in prefill (scheduled to first token), with the engine's "
    "own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_DECODE_TIME = _def(
    "llm_engine_decode_time_seconds",
    Kind.HISTOGRAM,
    "Time finished requests spent in decode (first to last token), with the engine's own "
    "buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PROMPT_TOKENS = _def(
    "llm_engine_prompt_tokens_total",
    Kind.COUNTER,
    "Prompt (prefill) tokens processed, as the engine counts them.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_GENERATION_TOKENS = _def(
    "llm_engine_generation_tokens_total",
    Kind.COUNTER,
    "Generated (decode) tokens.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PREFIX_CACHE_QUERIES = _def(
    "llm_engine_prefix_cache_queries_total",
    Kind.COUNTER,
    "Prompt tokens looked up in the prefix cache.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PREFIX_CACHE_HITS = _def(
    "llm_engine_prefix_cache_hits_total",
    Kind.COUNTER,
    "Prompt tokens served from the prefix cache.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PREEMPTIONS = _def(
    "llm_engine_preemptions_total",
    Kind.COUNTER,
    "Requests preempted (SGLang: retracted) by the engine scheduler.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUESTS_FINISHED = _def(
    "llm_engine_requests_finished_total",
    Kind.COUNTER,
    "Finished requests by the engine's finish reason (vLLM: stop, length, abort, error, ...; "
    "empty where the engine gives no reason).",
    (*ENGINE_SERIES_LABELS, "finished_reason"),
    section="engine",
)
# Triton reports cumulative microsecond counters instead of latency histograms. They are
# named *_duration_seconds_total, not *_time_seconds_total: an OpenMetrics counter family
# `llm_engine_queue_time_seconds` would clash with the histogram family of that name.
ENGINE_QUEUE_DURATION = _def(
    "llm_engine_queue_duration_seconds_total",
    Kind.COUNTER,
    "Cumulative time requests spent queued (Triton). Mean queue time per request is its "
    "rate over the rate of llm_engine_requests_succeeded_total; the queue-time share is its "
    "rate over the rate of llm_engine_request_duration_seconds_total.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUEST_DURATION = _def(
    "llm_engine_request_duration_seconds_total",
    Kind.COUNTER,
    "Cumulative end-to-end request handling time inside the server (Triton).",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_COMPUTE_DURATION = _def(
    "llm_engine_compute_duration_seconds_total",
    Kind.COUNTER,
    "Cumulative model execution (inference compute) time (Triton).",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUESTS_SUCCEEDED = _def(
    "llm_engine_requests_succeeded_total",
    Kind.COUNTER,
    "Successful requests (Triton); the request count the *_duration_seconds_total counters "
    "are divided by for a per-request mean.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUESTS_FAILED = _def(
    "llm_engine_requests_failed_total",
    Kind.COUNTER,
    "Failed requests (Triton), all failure reasons together.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
