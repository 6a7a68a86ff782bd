"""The exporter's own families: check runs, reloads, its HTTP listener.

Check durations span a sub-millisecond NVML read to a multi-second traceroute.
"""

from __future__ import annotations

from exporter.metrics.schema import Kind, define

CHECK_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# --- exporter self-metrics -------------------------------------------------------------
EXPORTER_BUILD_INFO = define(
    "llm_exporter_build_info",
    Kind.GAUGE,
    "Always 1; labels carry the exporter version and Python version.",
    ("version", "python"),
)
#: Bounded values of ``outcome`` on EXPORTER_CHECK_RUNS; the first is the good one.
CHECK_OUTCOMES = ("success", "error", "timeout", "skipped")
CHECK_SUCCESS, CHECK_ERROR, CHECK_TIMEOUT, CHECK_SKIPPED = CHECK_OUTCOMES
EXPORTER_CHECK_RUNS = define(
    "llm_exporter_check_runs_total",
    Kind.COUNTER,
    "Runs of each check by outcome: success, error (the check raised), timeout (ran past its "
    "timeout and was cancelled), skipped (the previous run had still not finished, or the "
    "endpoint's Retry-After holds the probe off).",
    ("check", "outcome"),
)
EXPORTER_CHECK_DURATION = define(
    "llm_exporter_check_duration_seconds",
    Kind.HISTOGRAM,
    "Wall-clock duration of each check run, whatever its outcome.",
    ("check",),
    CHECK_DURATION_BUCKETS,
)
EXPORTER_CHECK_LAST_SUCCESS = define(
    "llm_exporter_check_last_success_timestamp_seconds",
    Kind.GAUGE,
    "Unix time at the start of the last successful run of each check; absent until one "
    "succeeds.",
    ("check",),
)
EXPORTER_PEAK_WINDOW = define(
    "llm_exporter_peak_window",
    Kind.GAUGE,
    "1 while local time in peak_windows.timezone is inside the named window, else 0. "
    "Rules gate day-vs-evening comparisons on it, so PromQL needs no timezone arithmetic.",
    ("window",),
)
#: Bounded values of ``outcome`` on EXPORTER_CONFIG_RELOADS.
RELOAD_OUTCOMES = (CHECK_SUCCESS, CHECK_ERROR)
EXPORTER_CONFIG_RELOADS = define(
    "llm_exporter_config_reloads_total",
    Kind.COUNTER,
    "Config reloads (SIGHUP) by outcome: success, or error (the old config kept running).",
    ("outcome",),
)
EXPORTER_CONFIG_LAST_RELOAD_SUCCESSFUL = define(
    "llm_exporter_config_last_reload_successful",
    Kind.GAUGE,
    "1 if the last config load or reload succeeded, 0 if it failed and the old config runs.",
)
#: Bounded values of ``reason`` on EXPORTER_HTTP_CONNECTIONS_REFUSED.
REFUSE_REASONS = ("limit", "evicted", "header_timeout", "request_timeout", "tls_handshake")
(REFUSED_LIMIT, REFUSED_EVICTED, REFUSED_HEADER_TIMEOUT, REFUSED_REQUEST_TIMEOUT,
 REFUSED_TLS_HANDSHAKE) = REFUSE_REASONS
EXPORTER_HTTP_CONNECTIONS_REFUSED = define(
    "llm_exporter_http_connections_refused_total",
    Kind.COUNTER,
    "Connections the listener refused or cut by reason: limit (at the connection cap with "
    "none idle, closed on accept), evicted (the longest-idle connection closed to make room "
    "for a new one), header_timeout (no complete request headers in time), request_timeout "
    "(a response not taken by the client in time), tls_handshake (failed or too slow).",
    ("reason",),
)
EXPORTER_HTTP_CONNECTIONS_OPEN = define(
    "llm_exporter_http_connections_open",
    Kind.GAUGE,
    "Connections to the exporter's listener open now, idle ones included.",
)
EXPORTER_HTTP_CONNECTIONS_LIMIT = define(
    "llm_exporter_http_connections_limit",
    Kind.GAUGE,
    "The connection cap: server.max_connections, or by default what the open-file limit "
    "leaves after the descriptors kept for the checks.",
)
