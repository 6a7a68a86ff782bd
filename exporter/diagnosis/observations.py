"""What the decision chain reads: one window of every layer's numbers, source-independent.

Both sources fill these from one declaration per measured field (``observables.py``): the
embedded one over the exporter's own rolling windows, the Prometheus one as PromQL. A new
measured field here is a row there. A value a source cannot give is None
(never 0): the chain then concludes ``no_data`` for what needed it, never a guess. Baselines
are the same statistic over the off-peak hours of the history (peak_windows), None until the
history holds enough of them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Source = Literal["exporter", "prometheus"]


@dataclass(frozen=True)
class ProbeWindow:
    """One synthetic probe (per vantage point) over the window."""

    probe: str
    target: str
    profile: str  # short | long_context | cached
    carrier: str = ""  # the probe's carrier tag, "" when untagged
    engine: str = ""  # the engine config name the probe is linked to, "" when unlinked
    vantage: str = ""  # the vantage point / site labels of a fleet, "" for the local exporter
    site: str = ""
    #: Finished requests in the window, and their count by ProbeOutcome value.
    requests: int = 0
    outcomes: Mapping[str, int] = field(default_factory=dict)
    ttft_p95: float | None = None
    #: The finite bucket bounds of the probe's TTFT histogram in the window: the grid its
    #: P95 is interpolated on, () when unknown.
    ttft_buckets: tuple[float, ...] = ()
    #: Mean TTFT (its _sum over its _count): exact, whatever the buckets.
    ttft_mean: float | None = None
    tpot_p95: float | None = None
    itl_p99: float | None = None
    #: Gaps between tokens longer than the stall threshold (llm_probe_stall_seconds count).
    stalls: int = 0
    #: P95 of DNS + connect + TLS on requests that opened a new connection.
    connect_p95: float | None = None
    prompt_tokens_mean: float | None = None
    ttft_p95_baseline: float | None = None
    tpot_p95_baseline: float | None = None
    prompt_tokens_baseline: float | None = None
    #: The probe's SLO after per-probe overrides.
    slo_ttft: float = 1.0
    slo_tpot: float = 0.1
    #: Client timeout of the whole request, to tell timeouts set too short.
    timeout_total: float | None = None
    #: ok requests whose TTFT the engine's own timing split exactly (llm_probe_server_*),
    #: and the shares of those TTFTs outside the engine (network and frontend) and queued
    #: in it: the exact split, which the chain prefers to subtracting distributions.
    exact_splits: int = 0
    network_frontend_share: float | None = None
    queue_share: float | None = None
    #: The kernel's view of the probe's connections: retransmitted / sent segments, and
    #: out-of-order / received data segments (what loss of the server's stream looks like).
    tcp_retransmit_ratio: float | None = None
    tcp_out_of_order_ratio: float | None = None


@dataclass(frozen=True)
class PathWindow:
    """One carrier's path to one target over the window."""

    carrier: str
    target: str
    region: str = ""
    protocol: str = "icmp"
    vantage: str = ""
    site: str = ""
    sent: int = 0
    lost: int = 0
    rtt_mean: float | None = None
    jitter: float | None = None  # the RFC 3550 estimate, seconds
    loss_baseline: float | None = None  # off-peak loss ratio
    rtt_baseline: float | None = None  # off-peak mean RTT
    #: True while local time is inside a configured peak window.
    in_peak: bool = False
    route_class: str | None = None
    #: The best class this target had over the history (by alerting.route_class_order).
    best_route_class: str | None = None
    route_changes: int = 0

    @property
    def loss(self) -> float | None:
        return self.lost / self.sent if self.sent else None


@dataclass(frozen=True)
class EngineWindow:
    """One engine target over the window (data-parallel ranks and models summed)."""

    engine: str
    target: str = ""
    site: str = ""
    #: llm_engine_up at the end of the window; None when the engine check is not running.
    up: bool | None = None
    requests: float = 0.0  # finished requests in the window
    queue_seconds: float | None = None  # summed over the window's requests
    prefill_seconds: float | None = None
    decode_seconds: float | None = None
    ttft_p95: float | None = None  # the engine's own TTFT
    itl_p95: float | None = None  # the engine's own inter-token latency
    #: The finite bucket bounds of the engine's own TTFT and ITL histograms (vLLM's, or
    #: what --custom-histogram-buckets set), () when unknown: how coarse its P95s are.
    ttft_buckets: tuple[float, ...] = ()
    itl_buckets: tuple[float, ...] = ()
    ttft_mean: float | None = None  # the engine's own mean TTFT (_sum over _count)
    #: The engine's own inter-token gaps over alerting.stall_seconds (over the highest bucket
    #: bound at or under it): a preempted request waits in the engine, not on the way.
    stalls: int | None = None
    running: float | None = None
    waiting: float | None = None
    #: The most requests seen running at once in the history: the batch limit in practice.
    running_max: float | None = None
    #: The fullest the cache got in the window (max over time of the fullest rank): a
    #: preempting cache frees blocks as it preempts, so its mean reads below full.
    kv_cache_usage: float | None = None
    #: Per (model, dp_rank): the mean waiting queue and the mean KV-cache usage over the
    #: window, what tells one data-parallel rank apart from its peers (empty without ranks).
    waiting_by_rank: Mapping[tuple[str, str], float] = field(default_factory=dict)
    kv_by_rank: Mapping[tuple[str, str], float] = field(default_factory=dict)
    preemptions: float = 0.0
    prompt_tokens_mean: float | None = None
    prompt_tokens_baseline: float | None = None
    request_rate: float | None = None  # requests per second
    #: The fastest prefill seen over the history: prompt tokens per second of prefill time,
    #: over spans of one window. What a prompt costs is judged at this rate, so a prefill
    #: that slowed is the engine's (slow_prefill), not the prompt's.
    prefill_rate_max: float | None = None
    request_rate_baseline: float | None = None

    @property
    def engine_seconds(self) -> float | None:
        parts = (self.queue_seconds, self.prefill_seconds, self.decode_seconds)
        if any(p is None for p in parts):
            return None
        return sum(p for p in parts if p is not None)


@dataclass(frozen=True)
class GpuWindow:
    """One GPU over the window."""

    gpu: str
    name: str = ""
    site: str = ""
    utilization: float | None = None  # mean ratio
    memory_used_ratio: float | None = None
    #: Clock-event reasons active in the window (metrics.GPU_CLOCK_EVENT_REASONS values).
    clock_events: tuple[str, ...] = ()
    xid_errors: int = 0
    dram_bandwidth_utilization: float | None = None
    #: The engine config name this GPU serves, "" when unknown: the chain then links the GPU
    #: to every engine of the same site (all of them on a single-site exporter).
    engine: str = ""


@dataclass(frozen=True)
class ClientWindow:
    """One carrier's real users over the window: the ``clients`` check's connections on
    the watched ports (summed over them), as the server's kernel saw them."""

    carrier: str
    vantage: str = ""
    site: str = ""
    #: Mean established connections over the window.
    connections: float | None = None
    #: Data segments sent to the carrier's clients, and of them retransmitted.
    sent: int = 0
    retransmitted: int = 0
    #: The kernel's smoothed RTT of the connections that sent data: P95 and mean.
    rtt_p95: float | None = None
    rtt_mean: float | None = None
    retransmission_baseline: float | None = None  # off-peak retransmitted / sent
    rtt_baseline: float | None = None  # off-peak mean smoothed RTT
    in_peak: bool = False

    @property
    def retransmission(self) -> float | None:
        return self.retransmitted / self.sent if self.sent else None


@dataclass(frozen=True)
class Observations:
    at: dt.datetime
    window: float  # seconds
    source: Source
    probes: tuple[ProbeWindow, ...] = ()
    paths: tuple[PathWindow, ...] = ()
    engines: tuple[EngineWindow, ...] = ()
    gpus: tuple[GpuWindow, ...] = ()
    clients: tuple[ClientWindow, ...] = ()
    #: Checks configured but failing or never run in the window ("engine/main", "gpu/nvml").
    failing_checks: tuple[str, ...] = ()
