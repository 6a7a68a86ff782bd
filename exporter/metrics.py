"""The metric schema: every family the exporter serves, defined once.

Checks, rule and dashboard generators and docs/metrics.md all read names from here, so a
name is never typed twice. Conventions (design.md): namespace ``llm_``, base units, counters
end in ``_total``, absent-not-zero for anything a source does not provide.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
#: Bounded values of ``outcome`` on EXPORTER_CHECK_RUNS; the first is the good one.
CHECK_OUTCOMES = ("success", "error", "timeout", "skipped")
CHECK_SUCCESS, CHECK_ERROR, CHECK_TIMEOUT, CHECK_SKIPPED = CHECK_OUTCOMES
EXPORTER_CHECK_RUNS = _def(
    "llm_exporter_check_runs_total",
    Kind.COUNTER,
    "Runs of each check by outcome: success, error (the check raised), timeout (ran past its "
    "timeout and was cancelled), skipped (the previous run had still not finished, or the "
    "endpoint's Retry-After holds the probe off).",
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
    "Unix time at the start of the last successful run of each check; absent until one "
    "succeeds.",
    ("check",),
)
EXPORTER_PEAK_WINDOW = _def(
    "llm_exporter_peak_window",
    Kind.GAUGE,
    "1 while local time in peak_windows.timezone is inside the named window, else 0. "
    "Rules gate day-vs-evening comparisons on it, so PromQL needs no timezone arithmetic.",
    ("window",),
)
#: Bounded values of ``outcome`` on EXPORTER_CONFIG_RELOADS.
RELOAD_OUTCOMES = (CHECK_SUCCESS, CHECK_ERROR)
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
#: Bounded values of ``reason`` on EXPORTER_HTTP_CONNECTIONS_REFUSED.
REFUSE_REASONS = ("limit", "evicted", "header_timeout", "request_timeout", "tls_handshake")
(REFUSED_LIMIT, REFUSED_EVICTED, REFUSED_HEADER_TIMEOUT, REFUSED_REQUEST_TIMEOUT,
 REFUSED_TLS_HANDSHAKE) = REFUSE_REASONS
EXPORTER_HTTP_CONNECTIONS_REFUSED = _def(
    "llm_exporter_http_connections_refused_total",
    Kind.COUNTER,
    "Connections the listener refused or cut by reason: limit (at the connection cap with "
    "none idle, closed on accept), evicted (the longest-idle connection closed to make room "
    "for a new one), header_timeout (no complete request headers in time), request_timeout "
    "(a response not taken by the client in time), tls_handshake (failed or too slow).",
    ("reason",),
)
EXPORTER_HTTP_CONNECTIONS_OPEN = _def(
    "llm_exporter_http_connections_open",
    Kind.GAUGE,
    "Connections to the exporter's listener open now, idle ones included.",
)
EXPORTER_HTTP_CONNECTIONS_LIMIT = _def(
    "llm_exporter_http_connections_limit",
    Kind.GAUGE,
    "The connection cap: server.max_connections, or by default what the open-file limit "
    "leaves after the descriptors kept for the checks.",
)

# --- gpu (NVML) ---------------------------------------------------------------------------
# Read by exporter/checks/gpu/check.py. Per-GPU series carry `gpu` (NVML index), `uuid` and `name`.
# A value NVML does not provide for a GPU (NotSupported, FunctionNotFound on an old driver,
# no permission) is absent for that GPU, never 0; while llm_gpu_nvml_up is 0 every other
# llm_gpu_* series is absent. docs/gpu.md explains utilization vs bandwidth.
GPU_LABELS = ("gpu", "uuid", "name")

GPU_NVML_UP = _def(
    "llm_gpu_nvml_up",
    Kind.GAUGE,
    "1 while the NVML library is loaded and initialized; 0 when it cannot be (no driver, "
    "no libnvidia-ml.so.1, driver restarting). While 0 the other llm_gpu_* series are absent.",
    section="gpu",
)
GPU_INFO = _def(
    "llm_gpu_info",
    Kind.GAUGE,
    "Always 1 while NVML is up; labels carry the driver version and the CUDA version the "
    "driver supports (e.g. 12.4; empty if NVML does not report it).",
    ("driver_version", "cuda_version"),
    section="gpu",
)
GPU_UP = _def(
    "llm_gpu_up",
    Kind.GAUGE,
    "1 while the GPU answers NVML; 0 after it was lost (fell off the bus, needs a reset). "
    "While 0 its data series are absent (XID counts stay); it returns to 1 when NVML sees "
    "the GPU again.",
    GPU_LABELS,
    section="gpu",
)
GPU_UTILIZATION = _def(
    "llm_gpu_utilization_ratio",
    Kind.GAUGE,
    "Fraction of NVML's last sample period (1/6 s to 1 s by product) during which one or more "
    "kernels was running on the GPU. Not how busy the SMs are: one small kernel running all "
    "the time reads 1. See llm_gpu_sm_active_ratio (Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_CONTROLLER_BUSY = _def(
    "llm_gpu_memory_controller_busy_ratio",
    Kind.GAUGE,
    "Fraction of NVML's last sample period during which device memory was being read or "
    "written. A duty cycle, not a share of bandwidth: see "
    "llm_gpu_dram_bandwidth_utilization_ratio (Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_USED = _def(
    "llm_gpu_memory_used_bytes",
    Kind.GAUGE,
    "Device memory allocated by processes. With drivers before 510 (no memory info v2) it "
    "includes the driver-reserved memory.",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_TOTAL = _def(
    "llm_gpu_memory_total_bytes",
    Kind.GAUGE,
    "Installed device memory.",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_RESERVED = _def(
    "llm_gpu_memory_reserved_bytes",
    Kind.GAUGE,
    "Device memory reserved by the driver and firmware (NVML memory info v2, driver 510+); "
    "total = used + reserved + free.",
    GPU_LABELS,
    section="gpu",
)
GPU_POWER = _def(
    "llm_gpu_power_watts",
    Kind.GAUGE,
    "Board power draw: a 1 s average on Ampere (except A100) and newer, instantaneous on "
    "older GPUs.",
    GPU_LABELS,
    section="gpu",
)
GPU_POWER_LIMIT = _def(
    "llm_gpu_power_limit_watts",
    Kind.GAUGE,
    "Power limit the driver enforces (the lowest of the configured and board limits).",
    GPU_LABELS,
    section="gpu",
)
GPU_ENERGY = _def(
    "llm_gpu_energy_joules_total",
    Kind.COUNTER,
    "Energy consumed since the driver was loaded (Volta and newer); resets on driver reload.",
    GPU_LABELS,
    section="gpu",
)
GPU_TEMPERATURE = _def(
    "llm_gpu_temperature_celsius",
    Kind.GAUGE,
    "GPU die temperature.",
    GPU_LABELS,
    section="gpu",
)
GPU_SM_CLOCK = _def(
    "llm_gpu_sm_clock_hertz",
    Kind.GAUGE,
    "Current SM clock.",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_CLOCK = _def(
    "llm_gpu_memory_clock_hertz",
    Kind.GAUGE,
    "Current memory clock.",
    GPU_LABELS,
    section="gpu",
)
GPU_PCIE_RX = _def(
    "llm_gpu_pcie_rx_bytes_per_second",
    Kind.GAUGE,
    "PCIe traffic into the GPU, measured by NVML over a 20 ms window at sampling time.",
    GPU_LABELS,
    section="gpu",
)
GPU_PCIE_TX = _def(
    "llm_gpu_pcie_tx_bytes_per_second",
    Kind.GAUGE,
    "PCIe traffic out of the GPU, measured by NVML over a 20 ms window at sampling time.",
    GPU_LABELS,
    section="gpu",
)
#: Bounded values of ``reason`` on GPU_CLOCK_EVENT (dcgm-exporter's names, so dashboards
#: translate); the NVML sampler maps its clock-event bits onto these.
GPU_CLOCK_EVENT_REASONS = (
    "gpu_idle",
    "clocks_setting",
    "power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks",
)
GPU_CLOCK_EVENT = _def(
    "llm_gpu_clock_event_active",
    Kind.GAUGE,
    "1 while the named reason holds clocks below their maximum, else 0: "
    + ", ".join(GPU_CLOCK_EVENT_REASONS) + ".",
    (*GPU_LABELS, "reason"),
    section="gpu",
)
GPU_XID_ERRORS = _def(
    "llm_gpu_xid_errors_total",
    Kind.COUNTER,
    "XID critical errors reported by the driver while the exporter was subscribed, by XID "
    "number (999: unknown). A series appears with its first event.",
    (*GPU_LABELS, "xid"),
    section="gpu",
)
GPU_ECC_ERRORS = _def(
    "llm_gpu_ecc_errors_total",
    Kind.COUNTER,
    "Device-memory ECC errors since the driver was loaded, by type: corrected (single-bit) "
    "or uncorrected (double-bit). Absent on GPUs without ECC or with it disabled.",
    (*GPU_LABELS, "type"),
    section="gpu",
)
GPU_DRAM_BANDWIDTH_UTILIZATION = _def(
    "llm_gpu_dram_bandwidth_utilization_ratio",
    Kind.GAUGE,
    "Achieved DRAM bandwidth over the GPU's theoretical peak, averaged between two samples "
    "one check interval apart (NVML GPM; Hopper and newer, absent on older GPUs).",
    GPU_LABELS,
    section="gpu",
)
GPU_SM_ACTIVE = _def(
    "llm_gpu_sm_active_ratio",
    Kind.GAUGE,
    "Fraction of SMs that were busy between two samples one check interval apart (NVML GPM "
    "SM_UTIL; Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_SM_OCCUPANCY = _def(
    "llm_gpu_sm_occupancy_ratio",
    Kind.GAUGE,
    "Resident warps over the theoretical maximum, between two samples one check interval "
    "apart (NVML GPM; Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_TENSOR_ACTIVE = _def(
    "llm_gpu_tensor_active_ratio",
    Kind.GAUGE,
    "Fraction of time the SMs were running any tensor-core instruction, between two samples "
    "one check interval apart (NVML GPM; Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_BANDWIDTH = _def(
    "llm_gpu_memory_bandwidth_bytes_per_second",
    Kind.GAUGE,
    "Achieved DRAM bandwidth: llm_gpu_dram_bandwidth_utilization_ratio times the peak. "
    "`peak_source` says where the peak came from: spec (a table of datasheet values) or "
    "clock_x_bus_width (computed from NVML, can read a few percent above the datasheet).",
    (*GPU_LABELS, "peak_source"),
    section="gpu",
)
GPU_MEMORY_BANDWIDTH_PEAK = _def(
    "llm_gpu_memory_bandwidth_peak_bytes_per_second",
    Kind.GAUGE,
    "Theoretical peak DRAM bandwidth of the GPU (the divisor for memory-bandwidth "
    "utilization, MBU); `peak_source` as for llm_gpu_memory_bandwidth_bytes_per_second.",
    (*GPU_LABELS, "peak_source"),
    section="gpu",
)
GPU_PROCESS_MEMORY = _def(
    "llm_gpu_process_memory_bytes",
    Kind.GAUGE,
    "Device memory used by each compute process, the 16 largest per GPU; `process` is the "
    "executable name (empty when NVML cannot see it, e.g. another PID namespace).",
    (*GPU_LABELS, "pid", "process"),
    section="gpu",
)

# --- synthetic streaming probes --------------------------------------------------------
# Definitions in exporter/probing/stream.py and docs/metrics.md ("Probe metrics"). Latency bounds
# step through 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8 per decade, so neighbouring bounds differ
# by at most 4/3: histogram_quantile() places a P95 inside a bucket that narrow anywhere from
# 50 ms to 60 s (TTFT, E2E, stalls) and from 2 ms to 2 s (ITL, TPOT).
_MANTISSAS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


def _steps(lo: float, hi: float) -> tuple[float, ...]:
    values = (round(m * 10.0**e, 6) for e in range(-4, 3) for m in _MANTISSAS)
    return tuple(v for v in values if lo <= v <= hi)


PROBE_LATENCY_BUCKETS = (0.01, 0.025, *_steps(0.05, 60), 90.0, 120.0)
PROBE_E2E_BUCKETS = (*PROBE_LATENCY_BUCKETS, 180.0, 300.0)
# 0.5 ms catches gaps of ~0: chunks that arrived together (proxy buffering, coalescing).
PROBE_ITL_BUCKETS = (0.0005, 0.001, *_steps(0.002, 2), 5.0)
PROBE_PHASE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                       5, 10)
# `carrier` and `engine_target` are the probe's optional `carrier` and `engine` config keys
# (empty, so absent in Prometheus, when unset): the labels alert inhibition joins on.
# `engine_target` equals the `target` of that engine's llm_engine_* series.
PROBE_LABELS = ("probe", "target", "profile", "carrier", "engine_target")

class ProbeOutcome(StrEnum):
    """Bounded values of ``outcome`` on PROBE_REQUESTS: how one streaming request ended. The
    stream reader (exporter/probing/stream.py) decides the last five."""

    OK = "ok"
    TIMEOUT_CONNECT = "timeout_connect"
    TIMEOUT_FIRST_TOKEN = "timeout_first_token"
    TIMEOUT_TOTAL = "timeout_total"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    RATE_LIMITED = "rate_limited"
    CONNECT_ERROR = "connect_error"
    STREAM_RESET = "stream_reset"
    STREAM_ERROR = "stream_error"
    PROTOCOL_ERROR = "protocol_error"
    EMPTY = "empty"
    #: 3xx: probes do not follow redirects (a loop would otherwise look like a dead host).
    REDIRECT = "redirect"


PROBE_REQUESTS = _def(
    "llm_probe_requests_total",
    Kind.COUNTER,
    "Probe requests by outcome: ok, timeout_connect, timeout_first_token, timeout_total, "
    "http_4xx, http_5xx, rate_limited (429), connect_error, stream_reset (closed before "
    "[DONE]), stream_error (error event in the stream), protocol_error (malformed SSE/JSON "
    "or over the response size cap), empty (no token at all).",
    (*PROBE_LABELS, "outcome"),
    section="probe",
)
PROBE_TTFT = _def(
    "llm_probe_time_to_first_token_seconds",
    Kind.HISTOGRAM,
    "Time from writing the request on an open connection to the first SSE event carrying "
    "generated text (content, reasoning or tool calls; never a role-only, keep-alive or "
    "usage-only chunk). Connection setup is in llm_probe_phase_seconds. ok probes only.",
    PROBE_LABELS,
    PROBE_LATENCY_BUCKETS,
    section="probe",
)
PROBE_TTFC = _def(
    "llm_probe_time_to_first_content_seconds",
    Kind.HISTOGRAM,
    "Time to the first event carrying answer content or tool calls, after any reasoning: "
    "what a user sees first from a reasoning model. ok probes that got content only.",
    PROBE_LABELS,
    PROBE_LATENCY_BUCKETS,
    section="probe",
)
PROBE_TPOT = _def(
    "llm_probe_time_per_output_token_seconds",
    Kind.HISTOGRAM,
    "(E2E - TTFT) / (output tokens - 1), for ok probes with at least 2 output tokens; "
    "tokens from usage.completion_tokens, else the chunk count.",
    PROBE_LABELS,
    PROBE_ITL_BUCKETS,
    section="probe",
)
PROBE_ITL = _def(
    "llm_probe_inter_token_latency_seconds",
    Kind.HISTOGRAM,
    "Gaps between consecutive token-bearing SSE events (per chunk, not per token: a chunk "
    "with several tokens is one gap). ok probes only.",
    PROBE_LABELS,
    PROBE_ITL_BUCKETS,
    section="probe",
)
PROBE_E2E = _def(
    "llm_probe_e2e_latency_seconds",
    Kind.HISTOGRAM,
    "Time from writing the request to the last token-bearing event. ok probes only.",
    PROBE_LABELS,
    PROBE_E2E_BUCKETS,
    section="probe",
)
PROBE_STALL = _def(
    "llm_probe_stall_seconds",
    Kind.HISTOGRAM,
    "The largest gap between token-bearing events of each ok probe with 2 or more chunks.",
    PROBE_LABELS,
    PROBE_LATENCY_BUCKETS,
    section="probe",
)
PROBE_PHASE = _def(
    "llm_probe_phase_seconds",
    Kind.HISTOGRAM,
    "Connection and request phases of every probe that reached them, from aiohttp tracing: "
    "pool_wait, dns, connect (TCP), tls, request_sent, first_byte (request sent to response "
    "headers). connection is new or reused; a reused one has no dns/connect/tls.",
    (*PROBE_LABELS, "phase", "connection"),
    PROBE_PHASE_BUCKETS,
    section="probe",
)
PROBE_OUTPUT_TOKENS = _def(
    "llm_probe_output_tokens_total",
    Kind.COUNTER,
    "Output tokens of ok probes. source=usage: usage.completion_tokens; source=chunks: the "
    "server sent no usage, so token-bearing chunks were counted (an estimate).",
    (*PROBE_LABELS, "source"),
    section="probe",
)
PROBE_PROMPT_TOKENS = _def(
    "llm_probe_prompt_tokens_total",
    Kind.COUNTER,
    "Prompt tokens of ok probes, as the server's usage reports them; absent without usage.",
    PROBE_LABELS,
    section="probe",
)
PROBE_CACHED_PROMPT_TOKENS = _def(
    "llm_probe_cached_prompt_tokens_total",
    Kind.COUNTER,
    "Prompt tokens the server reports as served from its prefix cache (cached_tokens or "
    "prompt_cache_hit_tokens); absent when the server does not report them.",
    PROBE_LABELS,
    section="probe",
)
PROBE_SLO_GOOD = _def(
    "llm_probe_slo_good_total",
    Kind.COUNTER,
    "ok probes whose TTFT and TPOT were both within the probe's SLO (TPOT counts as met "
    "below 2 tokens). Goodput = this / llm_probe_requests_total (failures count as not good).",
    PROBE_LABELS,
    section="probe",
)
PROBE_HELD_OFF = _def(
    "llm_probe_held_off_total",
    Kind.COUNTER,
    "Probe runs not sent because the endpoint asked to wait: a 429 or 503 with Retry-After "
    "(capped at 1 h) holds the probe's requests until then, so a rate-limited hosted API is "
    "not hit again and again.",
    PROBE_LABELS,
    section="probe",
)
PROBE_LAST_SUCCESS = _def(
    "llm_probe_last_success_timestamp_seconds",
    Kind.GAUGE,
    "Unix time of the last ok probe; absent until one succeeds.",
    PROBE_LABELS,
    section="probe",
)



# The engine's own clock on each probe (exporter/probing/server_timing.py): spans from a
# loopback network share (well under a millisecond) to a long decode.
PROBE_SERVER_TIMING_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, *_steps(0.002, 60), 120.0, 300.0)


class ServerPart(StrEnum):
    """Bounded values of ``part`` on PROBE_SERVER_TIMING: the client's TTFT is
    network_frontend + queue + prefill exactly; decode follows the first token."""

    NETWORK_FRONTEND = "network_frontend"
    QUEUE = "queue"
    PREFILL = "prefill"
    DECODE = "decode"


class ServerSplit(StrEnum):
    """Bounded values of ``split`` on PROBE_SERVER_SPLIT: whether an ok probe's TTFT could be
    split by the engine's own timing of it."""

    EXACT = "exact"
    #: The response carried no usable timing (the engine does not offer it, or it is off).
    ABSENT = "absent"
    #: The engine's queue + prefill exceeded the client's TTFT by more than the tolerance.
    INCONSISTENT = "inconsistent"


PROBE_SERVER_TIMING = _def(
    "llm_probe_server_timing_seconds",
    Kind.HISTOGRAM,
    "Each ok probe's TTFT split by the engine's own timing of that request (vLLM "
    "--enable-per-request-metrics, NIM per-request stats): queue (waiting to be scheduled), "
    "prefill (scheduled to first token), network_frontend (the rest of the client's TTFT: "
    "network both ways plus the HTTP server, tokenizer and detokenizer), and decode (first "
    "to last token, engine side). Only probes with split=exact.",
    (*PROBE_LABELS, "part"),
    PROBE_SERVER_TIMING_BUCKETS,
    section="probe",
)
PROBE_SERVER_SPLIT = _def(
    "llm_probe_server_split_total",
    Kind.COUNTER,
    "ok probes by whether their TTFT split exactly by the engine's timing: exact, absent (no "
    "timing in the response), inconsistent (engine queue + prefill above the client TTFT by "
    "more than max(5 ms, 5%)).",
    (*PROBE_LABELS, "split"),
    section="probe",
)

# Kernel RTTs of probe connections: from loopback (tens of microseconds) to a satellite hop.
PROBE_TCP_RTT_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, *_steps(0.001, 2), 5.0)


class TcpSegments(StrEnum):
    """Bounded values of ``segments`` on PROBE_TCP_SEGMENTS (exporter/probing/tcpinfo.py)."""

    SENT = "sent"
    RETRANSMITTED = "retransmitted"
    RECEIVED = "received"
    OUT_OF_ORDER = "out_of_order"


PROBE_TCP_RTT = _def(
    "llm_probe_tcp_rtt_seconds",
    Kind.HISTOGRAM,
    "The kernel's smoothed RTT of the probe's connection (TCP_INFO tcpi_rtt) at the end of "
    "each request that got a response: the network as the stream's own packets saw it.",
    PROBE_LABELS,
    PROBE_TCP_RTT_BUCKETS,
    section="probe",
)
PROBE_TCP_RTTVAR = _def(
    "llm_probe_tcp_rttvar_seconds",
    Kind.HISTOGRAM,
    "The kernel's RTT variation of the probe's connection (tcpi_rttvar, the mean deviation "
    "RFC 6298 keeps beside the smoothed RTT) at the end of each request.",
    PROBE_LABELS,
    PROBE_TCP_RTT_BUCKETS,
    section="probe",
)
PROBE_TCP_MIN_RTT = _def(
    "llm_probe_tcp_min_rtt_seconds",
    Kind.HISTOGRAM,
    "The lowest RTT the kernel saw on the probe's connection (tcpi_min_rtt, Linux 4.6+) at "
    "the end of each request: the path's floor, without queueing.",
    PROBE_LABELS,
    PROBE_TCP_RTT_BUCKETS,
    section="probe",
)
PROBE_TCP_SEGMENTS = _def(
    "llm_probe_tcp_segments_total",
    Kind.COUNTER,
    "TCP segments of probe connections during requests (TCP_INFO deltas; a reused "
    "connection from the end of its previous request): sent (tcpi_segs_out) and "
    "retransmitted (tcpi_total_retrans) by the probe, received (data segments, "
    "tcpi_data_segs_in) and out_of_order (tcpi_rcv_ooopack: what a lost segment of the "
    "server's stream looks like from the client). retransmitted/sent and "
    "out_of_order/received are the ratios.",
    (*PROBE_LABELS, "segments"),
    section="probe",
)

# --- engine ---------------------------------------------------------------------------
# One normalized schema over vLLM, trtllm-serve, Triton and SGLang; the source of each
# family per engine is the data table in exporter/checks/engine/table.py. Data series carry
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
#: Bounded values of ``reason`` on ENGINE_SCRAPE_ERRORS; pre-created at 0 per target.
ENGINE_SCRAPE_ERROR_REASONS = (
    "timeout",
    "connection",
    "http_4xx",
    "http_5xx",
    "http_status",
    "too_large",
    "not_prometheus",
    "malformed",
    "unrecognized",
    "redirect",
)
ENGINE_SCRAPE_ERRORS = _def(
    "llm_engine_scrape_errors_total",
    Kind.COUNTER,
    "Failed engine scrapes by reason: timeout, connection (refused, reset, DNS, TLS), "
    "http_4xx, http_5xx, http_status (other non-2xx), too_large (body over the size cap), "
    "not_prometheus (HTML or JSON instead of the text format), malformed (a line of a mapped "
    "family does not parse, a series twice, le NaN, bucket counts that decrease), "
    "unrecognized (no known engine family in the exposition, or none of the configured "
    "type's), "
    "redirect (more redirects than a client follows: a loop).",
    ("target", "reason"),
    section="engine",
)
#: Bounded values of ``reason`` on ENGINE_DROPPED_SERIES: the label whose per-target cap
#: was full (model: max_models, dp_rank: max_dp_ranks, finished_reason/reason/source:
#: max_label_values), ``le`` (a histogram series with more than max_buckets bounds) or
#: ``series`` (the target's max_series was reached). Pre-created at 0 per target.
ENGINE_DROP_REASONS = ("model", "dp_rank", "finished_reason", "reason", "source", "le", "series")
ENGINE_DROPPED_SERIES = _def(
    "llm_engine_dropped_series_total",
    Kind.COUNTER,
    "Engine series (sample lines of mapped families) left out by a cap, by reason: the "
    "label whose cap was full (" + ", ".join(ENGINE_DROP_REASONS[:5]) + "), le (more than "
    "max_buckets bounds in one histogram) or series (max_series reached); increased by the "
    "number dropped on every scrape.",
    ("target", "reason"),
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
#: The finish reasons vLLM reports on ENGINE_REQUESTS_FINISHED (FINISH_REASON_STRINGS in
#: vllm/v1/engine; other engines' reasons pass through).
ENGINE_FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
ENGINE_REQUESTS_FINISHED = _def(
    "llm_engine_requests_finished_total",
    Kind.COUNTER,
    "Finished requests by the engine's finish reason (vLLM: "
    + ", ".join(ENGINE_FINISH_REASONS) + ", ...; empty where the engine gives no reason).",
    (*ENGINE_SERIES_LABELS, "finished_reason"),
    section="engine",
)
ENGINE_INFERENCE_TIME = _def(
    "llm_engine_inference_time_seconds",
    Kind.HISTOGRAM,
    "Time finished requests spent running (first scheduled to last token: prefill and "
    "decode, preemptions included), with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUEST_PROMPT_TOKENS = _def(
    "llm_engine_request_prompt_tokens",
    Kind.HISTOGRAM,
    "Prompt length of finished requests in tokens, with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUEST_GENERATION_TOKENS = _def(
    "llm_engine_request_generation_tokens",
    Kind.HISTOGRAM,
    "Generated tokens per finished request, with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_STEP_TOKENS = _def(
    "llm_engine_step_tokens",
    Kind.HISTOGRAM,
    "Tokens (prefill and decode together) per engine step: the batch size in tokens, with "
    "the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
#: Why requests wait (vLLM: capacity = no room in the batch or KV cache; deferred = held by
#: the scheduler, e.g. for a KV transfer); other engines' reasons pass through.
ENGINE_WAITING_REASONS = ("capacity", "deferred")
ENGINE_REQUESTS_WAITING_BY_REASON = _def(
    "llm_engine_requests_waiting_by_reason",
    Kind.GAUGE,
    "Requests waiting at the last scrape by why they wait (vLLM: "
    + ", ".join(ENGINE_WAITING_REASONS) + "); the reasons sum to llm_engine_requests_waiting.",
    (*ENGINE_SERIES_LABELS, "reason"),
    section="engine",
)
ENGINE_PROMPT_TOKENS_CACHED = _def(
    "llm_engine_prompt_tokens_cached_total",
    Kind.COUNTER,
    "Prompt tokens of requests whose KV came from a cache (local prefix cache and external "
    "KV transfer), counted once per request.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
#: Where prompt tokens' KV came from (vLLM prompt_tokens_by_source).
ENGINE_PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
ENGINE_PROMPT_TOKENS_BY_SOURCE = _def(
    "llm_engine_prompt_tokens_by_source_total",
    Kind.COUNTER,
    "Prompt tokens by where their KV came from (vLLM: " + ", ".join(ENGINE_PROMPT_SOURCES)
    + "); the sources sum to llm_engine_prompt_tokens_total.",
    (*ENGINE_SERIES_LABELS, "source"),
    section="engine",
)
#: Why the API server turned a request away before it reached the engine (vLLM 0.32).
ENGINE_ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
ENGINE_ADMISSION_REJECTIONS = _def(
    "llm_engine_admission_rejections_total",
    Kind.COUNTER,
    "Requests rejected at admission by reason (vLLM: " + ", ".join(ENGINE_ADMISSION_REASONS)
    + ", the queue limits); vLLM counts them per API server, so dp_rank is empty.",
    (*ENGINE_SERIES_LABELS, "reason"),
    section="engine",
)
ENGINE_ESTIMATED_READ_BYTES = _def(
    "llm_engine_estimated_read_bytes_per_gpu_total",
    Kind.COUNTER,
    "The engine's own estimate of bytes read from accelerator memory per GPU (weights, KV, "
    "activations), from its model of each step; compare its rate with NVML's measured "
    "DRAM bandwidth (llm_gpu_memory_bandwidth_bytes_per_second).",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_ESTIMATED_WRITE_BYTES = _def(
    "llm_engine_estimated_write_bytes_per_gpu_total",
    Kind.COUNTER,
    "The engine's own estimate of bytes written to accelerator memory per GPU.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_ESTIMATED_FLOPS = _def(
    "llm_engine_estimated_flops_per_gpu_total",
    Kind.COUNTER,
    "The engine's own estimate of floating-point operations per GPU (its rate over the "
    "GPU's peak FLOP/s is the model FLOPs utilization).",
    ENGINE_SERIES_LABELS,
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

# --- network paths (per carrier) --------------------------------------------------------
# Labels come from config only (carrier, target, region, protocol); a hop address is never
# a label. A packet counts as sent once its fate is known (reply, or deadline passed), so
# sent - received never includes packets still in flight.
PATH_LABELS = ("carrier", "target", "region", "protocol")
ROUTE_LABELS = ("carrier", "target")
# China return paths sit between 30 ms and 400 ms; fine steps there, coarse to the timeout.
PATH_RTT_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.225,
    0.25, 0.275, 0.3, 0.35, 0.4, 0.5, 0.75, 1, 1.5, 2, 3, 4,
)  # fmt: skip

PATH_PACKETS_SENT = _def(
    "llm_path_packets_sent_total",
    Kind.COUNTER,
    "Probe packets (ICMP echoes or TCP connects) whose outcome is known: answered, or past "
    "their deadline. Loss over any window: 1 - increase(received) / increase(sent).",
    PATH_LABELS,
    section="path",
)
PATH_PACKETS_RECEIVED = _def(
    "llm_path_packets_received_total",
    Kind.COUNTER,
    "Probe packets answered before their deadline (echo reply, or TCP connection established).",
    PATH_LABELS,
    section="path",
)
PATH_LOSS = _def(
    "llm_path_loss_ratio",
    Kind.GAUGE,
    "Share (0..1) of the last burst's packets that got no answer before their deadline.",
    PATH_LABELS,
    section="path",
)
PATH_RTT = _def(
    "llm_path_rtt_seconds",
    Kind.HISTOGRAM,
    "Round-trip time of each answered packet: echo to reply, or TCP SYN to established.",
    PATH_LABELS,
    PATH_RTT_BUCKETS,
    section="path",
)
#: Bounded values of ``method`` on PATH_JITTER; the first is the one rules alert on.
PATH_JITTER_METHODS = ("rfc3550", "mean_abs_diff")
PATH_JITTER_RFC3550, PATH_JITTER_MEAN_ABS_DIFF = PATH_JITTER_METHODS
PATH_JITTER = _def(
    "llm_path_jitter_seconds",
    Kind.GAUGE,
    "RTT variation between consecutively sent answered packets. method=rfc3550: the RFC 3550 "
    "interarrival estimator J += (|D| - J) / 16 on RTT differences, kept across bursts; "
    "method=mean_abs_diff: mean |D| over the last burst. Absent until two answers.",
    (*PATH_LABELS, "method"),
    section="path",
)
PATH_LAST_SUCCESS = _def(
    "llm_path_last_success_timestamp_seconds",
    Kind.GAUGE,
    "Unix time at the end of the last burst that got at least one answer.",
    PATH_LABELS,
    section="path",
)
PATH_ERRORS = _def(
    "llm_path_errors_total",
    Kind.COUNTER,
    "Path check errors by reason. Per burst that could not be sent: permission (no ICMP "
    "socket allowed), resolve (host did not resolve). Per packet, also counted as lost: "
    "unreachable (no route to the address), send (another send error). Per packet, counted "
    "as answered: refused (a TCP reset: the host answered, the port is closed).",
    (*PATH_LABELS, "reason"),
    section="path",
)
PATH_ROUTE_INFO = _def(
    "llm_path_route_info",
    Kind.GAUGE,
    "Always 1; route_class is the class of the last traceroute's hops by the CIDR route "
    "table (cn2_gia, cn2_gt, chinanet_163, cu_9929, ...), other when no table network "
    "matched, unknown when no hop answered.",
    (*ROUTE_LABELS, "route_class"),
    section="path",
)
PATH_HOP_COUNT = _def(
    "llm_path_hop_count",
    Kind.GAUGE,
    "Hops to the target in the last traceroute; absent when the target did not answer it.",
    ROUTE_LABELS,
    section="path",
)
PATH_ROUTE_CHANGES = _def(
    "llm_path_route_changes_total",
    Kind.COUNTER,
    "Changes of route_class between two traceroutes that both saw hops (unknown is not a "
    "change); each is logged with the old and new class.",
    ROUTE_LABELS,
    section="path",
)
PATH_ROUTE_ROUND_DURATION = _def(
    "llm_path_route_round_duration_seconds",
    Kind.GAUGE,
    "How long the last complete round of traceroutes took: from its first trace to the "
    "moment every route target had been traced once. Absent until one round completed.",
    section="path",
)
PATH_ROUTE_ROUNDS_LATE = _def(
    "llm_path_route_rounds_late_total",
    Kind.COUNTER,
    "Rounds of traceroutes still unfinished route_interval after they started (each is "
    "logged at warning with what it would take: more paths.route_parallelism or a longer "
    "route_interval).",
    section="path",
)

# --- real users' connections (per carrier) ---------------------------------------------
# The clients check reads the kernel's TCP state of the established connections on watched
# local ports (netlink sock_diag) and adds them up per carrier, the carrier found from the
# client address by the configured CIDR lists. A client address is never a label: series
# are carriers (plus other) x ports, whatever the number of clients.
CLIENTS_LABELS = ("carrier", "port")
#: The carrier of a client address no configured list holds (loopback, private, foreign).
CLIENTS_OTHER_CARRIER = "other"
#: Bounded values of ``app_limited`` on CLIENTS_DELIVERY_RATE.
CLIENTS_APP_LIMITED = ("false", "true")
# 16 KiB/s to 1 GiB/s by doubling: a phone on 3G to a data-centre peer.
CLIENTS_RATE_BUCKETS = tuple(float(2**n) for n in range(14, 31))

CLIENTS_CONNECTIONS = _def(
    "llm_clients_connections",
    Kind.GAUGE,
    "Established TCP connections on the local port from clients of the carrier, at the last "
    "run.",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_RTT = _def(
    "llm_clients_rtt_seconds",
    Kind.HISTOGRAM,
    "The kernel's smoothed RTT (tcpi_rtt) of each connection that sent data since the "
    "previous run, observed once per connection per run.",
    CLIENTS_LABELS,
    PATH_RTT_BUCKETS,
    section="clients",
)
CLIENTS_SEGMENTS_SENT = _def(
    "llm_clients_segments_sent_total",
    Kind.COUNTER,
    "Data segments the server sent to the carrier's clients, retransmissions included "
    "(tcpi_data_segs_out increases). Retransmission ratio: increase(retransmitted) / "
    "increase(sent).",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_SEGMENTS_RETRANSMITTED = _def(
    "llm_clients_segments_retransmitted_total",
    Kind.COUNTER,
    "Segments the server retransmitted to the carrier's clients (tcpi_total_retrans "
    "increases).",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_DELIVERY_RATE = _def(
    "llm_clients_delivery_rate_bytes_per_second",
    Kind.HISTOGRAM,
    "The kernel's delivery rate estimate (tcpi_delivery_rate) of each connection that sent "
    "data since the previous run; app_limited=true where the application, not the path, "
    "limited the sample (a lower bound of what the path carries).",
    (*CLIENTS_LABELS, "app_limited"),
    CLIENTS_RATE_BUCKETS,
    section="clients",
)
CLIENTS_OPENED = _def(
    "llm_clients_connections_opened_total",
    Kind.COUNTER,
    "Connections first seen established by a run (after the first run, which only takes "
    "stock); one opened and closed between two runs is never seen.",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_CLOSED = _def(
    "llm_clients_connections_closed_total",
    Kind.COUNTER,
    "Connections seen established by one run and gone from the next.",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_PREFIXES = _def(
    "llm_clients_carrier_prefixes",
    Kind.GAUGE,
    "CIDR prefixes read from the carrier's file when the config was (re)loaded.",
    ("carrier",),
    section="clients",
)
CLIENTS_TRUNCATED = _def(
    "llm_clients_truncated_runs_total",
    Kind.COUNTER,
    "Runs that stopped reading at clients.max_connections connections (the rest of the "
    "dump was not counted; connections not reached are not counted as closed).",
    section="clients",
)

# --- diagnosis ---------------------------------------------------------------------------
# Written by the exporter's embedded evaluation of the decision chain (exporter/diagnosis/).

#: Bounded values of ``status`` on DIAGNOSIS_STATUS.
DIAGNOSIS_STATUSES = ("healthy", "degraded", "failing", "unknown")
#: layer -> the causes it may conclude. "exporter" / "no_data": the checks needed to decide
#: are failing or absent.
DIAGNOSIS_CAUSES: Mapping[str, tuple[str, ...]] = {
    "network": (
        "packet_loss",
        "jitter",
        "rtt_floor",
        "route_change",
        "peak_congestion",
        "connection_setup",
        "stream_stalls",
    ),
    "engine": ("down", "queueing", "slow_prefill", "slow_decode", "kv_cache_pressure",
               "imbalance"),
    "gpu": ("throttling", "memory_full", "xid_errors", "underutilized", "memory_bandwidth"),
    "application": ("long_prompts", "rate_limited", "client_concurrency", "client_timeouts"),
    "exporter": ("no_data",),
}
DIAGNOSIS_VERDICT_LABELS = ("layer", "cause", "carrier", "probe", "engine")

DIAGNOSIS_VERDICT = _def(
    "llm_diagnosis_verdict",
    Kind.GAUGE,
    "1 while the decision chain names this cause, 2 while it is the primary verdict; absent "
    "otherwise. Scope labels are empty where the verdict has no such scope.",
    DIAGNOSIS_VERDICT_LABELS,
    section="diagnosis",
)
DIAGNOSIS_STATUS = _def(
    "llm_diagnosis_status",
    Kind.GAUGE,
    "1 for the current status of the last evaluation (" + ", ".join(DIAGNOSIS_STATUSES)
    + "), 0 for the others.",
    ("status",),
    section="diagnosis",
)
DIAGNOSIS_EVALUATIONS = _def(
    "llm_diagnosis_evaluations_total",
    Kind.COUNTER,
    "Evaluations of the decision chain over the embedded windows.",
    section="diagnosis",
)
DIAGNOSIS_EVALUATION_ERRORS = _def(
    "llm_diagnosis_evaluation_errors_total",
    Kind.COUNTER,
    "Embedded evaluations that raised and were skipped (the error is logged once until one "
    "succeeds again); the last good diagnosis stays served.",
    section="diagnosis",
)
