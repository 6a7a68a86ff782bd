"""The synthetic streaming probes' families.

Definitions in exporter/probing/stream.py and docs/metrics.md ("Probe metrics"). Latency bounds
step through 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8 per decade, so neighbouring bounds differ
by at most 4/3: histogram_quantile() places a P95 inside a bucket that narrow anywhere from
50 ms to 60 s (TTFT, E2E, stalls) and from 2 ms to 2 s (ITL, TPOT).
"""

from __future__ import annotations

from enum import StrEnum

from exporter.metrics.schema import Kind, define

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


PROBE_REQUESTS = define(
    "llm_probe_requests_total",
    Kind.COUNTER,
    "Probe requests by outcome: ok, timeout_connect, timeout_first_token, timeout_total, "
    "http_4xx, http_5xx, rate_limited (429), connect_error, stream_reset (closed before "
    "[DONE]), stream_error (error event in the stream), protocol_error (malformed SSE/JSON "
    "or over the response size cap), empty (no token at all).",
    (*PROBE_LABELS, "outcome"),
    section="probe",
)
PROBE_TTFT = define(
    "llm_probe_time_to_first_token_seconds",
    Kind.HISTOGRAM,
    "Time from writing the request on an open connection to the first SSE event carrying "
    "generated text (content, reasoning or tool calls; never a role-only, keep-alive or "
    "usage-only chunk). Connection setup is in llm_probe_phase_seconds. ok probes only.",
    PROBE_LABELS,
    PROBE_LATENCY_BUCKETS,
    section="probe",
)
PROBE_TTFC = define(
    "llm_probe_time_to_first_content_seconds",
    Kind.HISTOGRAM,
    "Time to the first event carrying answer content or tool calls, after any reasoning: "
    "what a user sees first from a reasoning model. ok probes that got content only.",
    PROBE_LABELS,
    PROBE_LATENCY_BUCKETS,
    section="probe",
)
PROBE_TPOT = define(
    "llm_probe_time_per_output_token_seconds",
    Kind.HISTOGRAM,
    "(E2E - TTFT) / (output tokens - 1), for ok probes with at least 2 output tokens; "
    "tokens from usage.completion_tokens, else the chunk count.",
    PROBE_LABELS,
    PROBE_ITL_BUCKETS,
    section="probe",
)
PROBE_ITL = define(
    "llm_probe_inter_token_latency_seconds",
    Kind.HISTOGRAM,
    "Gaps between consecutive token-bearing SSE events (per chunk, not per token: a chunk "
    "with several tokens is one gap). ok probes only.",
    PROBE_LABELS,
    PROBE_ITL_BUCKETS,
    section="probe",
)
PROBE_E2E = define(
    "llm_probe_e2e_latency_seconds",
    Kind.HISTOGRAM,
    "Time from writing the request to the last token-bearing event. ok probes only.",
    PROBE_LABELS,
    PROBE_E2E_BUCKETS,
    section="probe",
)
PROBE_STALL = define(
    "llm_probe_stall_seconds",
    Kind.HISTOGRAM,
    "The largest gap between token-bearing events of each ok probe with 2 or more chunks.",
    PROBE_LABELS,
    PROBE_LATENCY_BUCKETS,
    section="probe",
)
PROBE_PHASE = define(
    "llm_probe_phase_seconds",
    Kind.HISTOGRAM,
    "Connection and request phases of every probe that reached them, from aiohttp tracing: "
    "pool_wait, dns, connect (TCP), tls, request_sent, first_byte (request sent to response "
    "headers). connection is new or reused; a reused one has no dns/connect/tls.",
    (*PROBE_LABELS, "phase", "connection"),
    PROBE_PHASE_BUCKETS,
    section="probe",
)
PROBE_OUTPUT_TOKENS = define(
    "llm_probe_output_tokens_total",
    Kind.COUNTER,
    "Output tokens of ok probes. source=usage: usage.completion_tokens; source=chunks: the "
    "server sent no usage, so token-bearing chunks were counted (an estimate).",
    (*PROBE_LABELS, "source"),
    section="probe",
)
PROBE_PROMPT_TOKENS = define(
    "llm_probe_prompt_tokens_total",
    Kind.COUNTER,
    "Prompt tokens of ok probes, as the server's usage reports them; absent without usage.",
    PROBE_LABELS,
    section="probe",
)
PROBE_CACHED_PROMPT_TOKENS = define(
    "llm_probe_cached_prompt_tokens_total",
    Kind.COUNTER,
    "Prompt tokens the server reports as served from its prefix cache (cached_tokens or "
    "prompt_cache_hit_tokens); absent when the server does not report them.",
    PROBE_LABELS,
    section="probe",
)
PROBE_SLO_GOOD = define(
    "llm_probe_slo_good_total",
    Kind.COUNTER,
    "ok probes whose TTFT and TPOT were both within the probe's SLO (TPOT counts as met "
    "below 2 tokens). Goodput = this / llm_probe_requests_total (failures count as not good).",
    PROBE_LABELS,
    section="probe",
)
PROBE_HELD_OFF = define(
    "llm_probe_held_off_total",
    Kind.COUNTER,
    "Probe runs not sent because the endpoint asked to wait: a 429 or 503 with Retry-After "
    "(capped at 1 h) holds the probe's requests until then, so a rate-limited hosted API is "
    "not hit again and again.",
    PROBE_LABELS,
    section="probe",
)
PROBE_LAST_SUCCESS = define(
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


PROBE_SERVER_TIMING = define(
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
PROBE_SERVER_SPLIT = define(
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


PROBE_TCP_RTT = define(
    "llm_probe_tcp_rtt_seconds",
    Kind.HISTOGRAM,
    "The kernel's smoothed RTT of the probe's connection (TCP_INFO tcpi_rtt) at the end of "
    "each request that got a response: the network as the stream's own packets saw it.",
    PROBE_LABELS,
    PROBE_TCP_RTT_BUCKETS,
    section="probe",
)
PROBE_TCP_RTTVAR = define(
    "llm_probe_tcp_rttvar_seconds",
    Kind.HISTOGRAM,
    "The kernel's RTT variation of the probe's connection (tcpi_rttvar, the mean deviation "
    "RFC 6298 keeps beside the smoothed RTT) at the end of each request.",
    PROBE_LABELS,
    PROBE_TCP_RTT_BUCKETS,
    section="probe",
)
PROBE_TCP_MIN_RTT = define(
    "llm_probe_tcp_min_rtt_seconds",
    Kind.HISTOGRAM,
    "The lowest RTT the kernel saw on the probe's connection (tcpi_min_rtt, Linux 4.6+) at "
    "the end of each request: the path's floor, without queueing.",
    PROBE_LABELS,
    PROBE_TCP_RTT_BUCKETS,
    section="probe",
)
PROBE_TCP_SEGMENTS = define(
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
