"""What the decision chain reads: one window of every layer's numbers, source-independent.

Every measured field is declared beside its type, once: ``measured(kind, expression,
finish)`` names what to compute over a window in the vocabulary of ``declare.py``, over
families of :mod:`exporter.metrics` (and, where a rule records the same statistic, its name
from :mod:`exporter.metrics.names`). Both sources evaluate the declarations (the embedded
windows in ``embedded.py``, PromQL in ``promqueries.py``), the history keeps what they read
(``families.py``), and tests/test_diagnosis_agreement.py holds the two to the same numbers.
A value a source cannot give is the field's default, None, never 0: the chain then
concludes ``no_data`` for what needed it, never a guess. Baselines are the same statistic
over the off-peak hours of the history (peak_windows), None until the history holds enough.
The other fields name the window or come from the config.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from exporter import metrics
from exporter.config.models import Config
from exporter.diagnosis import finish
from exporter.diagnosis.declare import (
    CLIENTS,
    ENGINE,
    GPU,
    PATH,
    PROBE,
    ROUTE,
    Baseline,
    Diff,
    FirstOf,
    Grid,
    Increase,
    InPeak,
    Last,
    MaxOverTime,
    MeanOverTime,
    Over,
    PeakRatio,
    PerSecond,
    Quantile,
    Ratio,
    Seen,
    count,
    measured,
)
from exporter.diagnosis.host_window import HostWindow
from exporter.metrics import names

Source = Literal["exporter", "prometheus"]

#: Connection-setup phases of llm_probe_phase_seconds (exporter/probing/timing.py) on a new
#: connection; a reused one has none of them.
SETUP_PHASES = ("dns", "connect", "tls")
NEW_CONNECTION = "new"
#: Round trips a new connection's setup takes on its own: TCP's handshake and TLS 1.2's two.
SETUP_ROUND_TRIPS = 3


def _stall(config: Config) -> float:
    return config.alerting.stall_seconds


def _sum(family: metrics.Family) -> str:
    return f"{family.name}_sum"


def _count(family: metrics.Family) -> str:
    return f"{family.name}_count"


def _mean(family: metrics.Family) -> Ratio:
    return Ratio(Increase(_sum(family)), Increase(_count(family)))


_OUTCOME = metrics.PROBE_REQUESTS.labels[-1]
_PHASE, _CONNECTION = metrics.PROBE_PHASE.labels[-2:]
_PART = metrics.PROBE_SERVER_TIMING.labels[-1]
_SPLIT = metrics.PROBE_SERVER_SPLIT.labels[-1]
_SEGMENTS = metrics.PROBE_TCP_SEGMENTS.labels[-1]
#: The exact split's parts of the TTFT; their sum over the window is those TTFTs' sum.
_TTFT_PARTS = tuple(p.value for p in (metrics.ServerPart.NETWORK_FRONTEND,
                                      metrics.ServerPart.QUEUE, metrics.ServerPart.PREFILL))


def _part(*parts: str) -> Increase:
    return Increase(_sum(metrics.PROBE_SERVER_TIMING), match=((_PART, parts),))


def _segments(kind: metrics.TcpSegments) -> Increase:
    return Increase(metrics.PROBE_TCP_SEGMENTS.name, match=((_SEGMENTS, kind.value),))


_OK = Increase(metrics.PROBE_REQUESTS.name, match=((_OUTCOME, metrics.ProbeOutcome.OK.value),))
_EXACT = Increase(metrics.PROBE_SERVER_SPLIT.name,
                  match=((_SPLIT, metrics.ServerSplit.EXACT.value),))
_PROMPT = Increase(metrics.PROBE_PROMPT_TOKENS.name)


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
    #: Finished requests in the window (the sum of ``outcomes``).
    requests: int = 0
    #: The probe's SLO after per-probe overrides.
    slo_ttft: float = 1.0
    slo_tpot: float = 0.1
    #: Client timeout of the whole request, to tell timeouts set too short.
    timeout_total: float | None = None
    #: Finished requests by ProbeOutcome value.
    outcomes: Mapping[str, int] = measured(
        PROBE, Increase(metrics.PROBE_REQUESTS.name, (_OUTCOME,)), finish.outcomes,
        factory=dict, trend=True)
    ttft_p95: float | None = measured(
        PROBE, Quantile(0.95, metrics.PROBE_TTFT, recorded=names.PROBE_TTFT), trend=True)
    #: The finite bucket bounds of the probe's TTFT histogram in the window: the grid its
    #: P95 is interpolated on, () when unknown.
    ttft_buckets: tuple[float, ...] = measured(PROBE, Grid(metrics.PROBE_TTFT), finish.grid,
                                               default=())
    #: Mean TTFT (its _sum over its _count): exact, whatever the buckets.
    ttft_mean: float | None = measured(PROBE, _mean(metrics.PROBE_TTFT))
    tpot_p95: float | None = measured(
        PROBE, Quantile(0.95, metrics.PROBE_TPOT, recorded=names.PROBE_TPOT), trend=True)
    tpot_buckets: tuple[float, ...] = measured(PROBE, Grid(metrics.PROBE_TPOT), finish.grid,
                                               default=())
    #: Mean TPOT, and output tokens per ok request: the stream's budget.
    tpot_mean: float | None = measured(PROBE, _mean(metrics.PROBE_TPOT))
    output_tokens_mean: float | None = measured(PROBE, Ratio(
        Increase(metrics.PROBE_OUTPUT_TOKENS.name), _OK))
    itl_p99: float | None = measured(PROBE, Quantile(0.99, metrics.PROBE_ITL))
    #: Gaps between tokens longer than the stall threshold (llm_probe_stall_seconds count).
    stalls: int = measured(PROBE, Over(metrics.PROBE_STALL, _stall), count, default=0)
    #: P95 of DNS + connect + TLS on requests that opened a new connection. P95 of a sum is
    #: not a sum of P95s; the sum is its upper bound, which both sources compute from the
    #: per-phase histograms (and what "setup dominates TTFT" needs).
    connect_p95: float | None = measured(PROBE, Quantile(
        0.95, metrics.PROBE_PHASE, ((_CONNECTION, NEW_CONNECTION), (_PHASE, SETUP_PHASES)),
        per=(_PHASE,), combine="sum"))
    prompt_tokens_mean: float | None = measured(PROBE, Ratio(_PROMPT, _OK))
    ttft_p95_baseline: float | None = measured(PROBE, Baseline(
        Quantile(0.95, metrics.PROBE_TTFT), names.PROBE_TTFT_PEAK.baseline))
    tpot_p95_baseline: float | None = measured(PROBE, Baseline(
        Quantile(0.95, metrics.PROBE_TPOT), names.PROBE_TPOT_PEAK.baseline))
    prompt_tokens_baseline: float | None = measured(PROBE, Baseline(Ratio(_PROMPT, _OK)))
    #: Its ok requests per second off-peak: with its prompt, what it added to its engine's
    #: off-peak prompt mean (the users' own mean is the engine's less the probes').
    ok_rate_baseline: float | None = measured(PROBE, Baseline(PerSecond(_OK)))
    #: ok requests whose TTFT the engine's own timing split exactly (llm_probe_server_*),
    #: and the shares of those TTFTs outside the engine (network and frontend) and queued
    #: in it: the exact split, which the chain prefers to subtracting distributions.
    exact_splits: int = measured(PROBE, _EXACT, count, default=0)
    network_frontend_share: float | None = measured(PROBE, Ratio(
        _part(metrics.ServerPart.NETWORK_FRONTEND.value), _part(*_TTFT_PARTS)))
    queue_share: float | None = measured(PROBE, Ratio(
        _part(metrics.ServerPart.QUEUE.value), _part(*_TTFT_PARTS)))
    #: Per exactly split request, its queue and its prefill (scheduled to first token) on
    #: the engine's own clock: the first token's budget prefers them to the engine's means.
    split_queue_mean: float | None = measured(PROBE, Ratio(
        _part(metrics.ServerPart.QUEUE.value), _EXACT))
    split_prefill_mean: float | None = measured(PROBE, Ratio(
        _part(metrics.ServerPart.PREFILL.value), _EXACT))
    #: ... and its decode (first to last token), the engine's part of the stream.
    split_decode_mean: float | None = measured(PROBE, Ratio(
        _part(metrics.ServerPart.DECODE.value), _EXACT))
    #: The kernel's smoothed RTT of the probe's connections: one round trip carries the
    #: request in and its first token out, the network's part of a first token.
    tcp_rtt_mean: float | None = measured(PROBE, _mean(metrics.PROBE_TCP_RTT))
    #: The kernel's view of the probe's connections: retransmitted / sent segments, and
    #: out-of-order / received data segments (what loss of the server's stream looks like).
    tcp_retransmit_ratio: float | None = measured(PROBE, Ratio(
        _segments(metrics.TcpSegments.RETRANSMITTED), _segments(metrics.TcpSegments.SENT)),
        trend=True)
    tcp_out_of_order_ratio: float | None = measured(PROBE, Ratio(
        _segments(metrics.TcpSegments.OUT_OF_ORDER), _segments(metrics.TcpSegments.RECEIVED)),
        trend=True)


_SENT = Increase(metrics.PATH_PACKETS_SENT.name)
_LOST = Diff(_SENT, Increase(metrics.PATH_PACKETS_RECEIVED.name))
_ROUTE_CLASS = metrics.PATH_ROUTE_INFO.labels[-1]


@dataclass(frozen=True)
class PathWindow:
    """One carrier's path to one target over the window."""

    carrier: str
    target: str
    region: str = ""
    protocol: str = "icmp"
    vantage: str = ""
    site: str = ""
    sent: int = measured(PATH, _SENT, count, default=0, trend=True)
    lost: int = measured(PATH, _LOST, count, default=0, trend=True)
    rtt_mean: float | None = measured(PATH, _mean(metrics.PATH_RTT), trend=True)
    #: The RFC 3550 estimate, seconds.
    jitter: float | None = measured(PATH, MeanOverTime(
        metrics.PATH_JITTER.name, match=((metrics.PATH_JITTER.labels[-1],
                                          metrics.PATH_JITTER_RFC3550),)), trend=True)
    loss_baseline: float | None = measured(PATH, Baseline(Ratio(_LOST, _SENT),
                                                          names.PATH_LOSS_BASELINE), finish.lost)
    rtt_baseline: float | None = measured(PATH, Baseline(_mean(metrics.PATH_RTT)))
    #: True while local time is inside a configured peak window.
    in_peak: bool = measured(PATH, InPeak(), finish.in_peak, default=False)
    route_class: str | None = measured(
        ROUTE, Last(metrics.PATH_ROUTE_INFO.name, (_ROUTE_CLASS,)), finish.current_class,
        trend=True)
    #: The best class this target had over the history (by alerting.route_class_order).
    best_route_class: str | None = measured(
        ROUTE, Seen(metrics.PATH_ROUTE_INFO.name, (_ROUTE_CLASS,)), finish.best_class)
    route_changes: int = measured(ROUTE, Increase(metrics.PATH_ROUTE_CHANGES.name), count,
                                  default=0)

    @property
    def loss(self) -> float | None:
        return self.lost / self.sent if self.sent else None


#: Finished requests: the finish-reason counter, else the E2E histogram's count, else
#: Triton's succeeded counter (the first family the engine fills).
_FINISHED = FirstOf((Increase(metrics.ENGINE_REQUESTS_FINISHED.name),
                     Increase(_count(metrics.ENGINE_E2E)),
                     Increase(metrics.ENGINE_REQUESTS_SUCCEEDED.name)))
_ENGINE_PROMPT = Increase(metrics.ENGINE_PROMPT_TOKENS.name)
#: The engine's models (and engine kind) under one target: the worst of them is its P95.
_MODEL = tuple(x for x in metrics.ENGINE_SERIES_LABELS if x not in ("target", "dp_rank"))
#: What tells one data-parallel rank of an engine apart: ranks are per model.
RANK = tuple(x for x in metrics.ENGINE_SERIES_LABELS if x in ("model", "dp_rank"))
_REASON = metrics.ENGINE_REQUESTS_WAITING_BY_REASON.labels[-1]
_SOURCE = metrics.ENGINE_PROMPT_TOKENS_BY_SOURCE.labels[-1]
_PREFIX_HITS = Ratio(Increase(metrics.ENGINE_PREFIX_CACHE_HITS.name),
                     Increase(metrics.ENGINE_PREFIX_CACHE_QUERIES.name))
_ACCEPTANCE = Ratio(Increase(metrics.ENGINE_SPEC_ACCEPTED_TOKENS.name),
                    Increase(metrics.ENGINE_SPEC_DRAFT_TOKENS.name))


@dataclass(frozen=True)
class EngineWindow:
    """One engine target over the window (data-parallel ranks and models summed)."""

    engine: str
    target: str = ""
    site: str = ""
    #: llm_engine_up at the end of the window; None when the engine check is not running.
    up: bool | None = measured(ENGINE, Last(metrics.ENGINE_UP.name), finish.up)
    requests: float = measured(ENGINE, _FINISHED, finish.or_zero, default=0.0)
    #: Seconds summed over the window's requests (Triton has duration counters instead of
    #: histograms).
    queue_seconds: float | None = measured(ENGINE, FirstOf((
        Increase(_sum(metrics.ENGINE_QUEUE_TIME)),
        Increase(metrics.ENGINE_QUEUE_DURATION.name))), trend=True)
    prefill_seconds: float | None = measured(
        ENGINE, Increase(_sum(metrics.ENGINE_PREFILL_TIME)), trend=True)
    decode_seconds: float | None = measured(
        ENGINE, Increase(_sum(metrics.ENGINE_DECODE_TIME)), trend=True)
    #: The engine's own TTFT and inter-token latency.
    ttft_p95: float | None = measured(ENGINE, Quantile(0.95, metrics.ENGINE_TTFT, per=_MODEL,
                                                       recorded=names.ENGINE_TTFT))
    itl_p95: float | None = measured(ENGINE, Quantile(0.95, metrics.ENGINE_ITL, per=_MODEL,
                                                      recorded=names.ENGINE_ITL))
    #: The finite bucket bounds of the engine's own TTFT and ITL histograms (vLLM's, or
    #: what --custom-histogram-buckets set), () when unknown: how coarse its P95s are.
    ttft_buckets: tuple[float, ...] = measured(ENGINE, Grid(metrics.ENGINE_TTFT), finish.grid,
                                               default=())
    itl_buckets: tuple[float, ...] = measured(ENGINE, Grid(metrics.ENGINE_ITL), finish.grid,
                                              default=())
    #: The engine's own mean TTFT and inter-token gap (_sum over _count).
    ttft_mean: float | None = measured(ENGINE, _mean(metrics.ENGINE_TTFT))
    itl_mean: float | None = measured(ENGINE, _mean(metrics.ENGINE_ITL))
    #: The engine's own inter-token gaps over alerting.stall_seconds (over the highest bucket
    #: bound at or under it): a preempted request waits in the engine, not on the way.
    stalls: int | None = measured(ENGINE, Over(metrics.ENGINE_ITL, _stall),
                                  finish.count_or_none)
    running: float | None = measured(
        ENGINE, MeanOverTime(metrics.ENGINE_REQUESTS_RUNNING.name), trend=True)
    waiting: float | None = measured(
        ENGINE, MeanOverTime(metrics.ENGINE_REQUESTS_WAITING.name), trend=True)
    #: The most requests seen running at once in the history: the batch limit in practice.
    #: Each data-parallel rank has its own: the sum of their maxima is the engine's.
    running_max: float | None = measured(ENGINE, MaxOverTime(
        metrics.ENGINE_REQUESTS_RUNNING.name, combine="sum", history=True))
    #: The fullest the cache got in the window (max over time of the fullest rank): a
    #: preempting cache frees blocks as it preempts, so its mean reads below full.
    kv_cache_usage: float | None = measured(
        ENGINE, MaxOverTime(metrics.ENGINE_KV_CACHE_USAGE.name), trend=True)
    #: Per (model, dp_rank): the mean waiting queue and the mean KV-cache usage over the
    #: window, what tells one data-parallel rank apart from its peers (empty without ranks);
    #: means, as LLMEngineImbalance reads them: an imbalance is sustained.
    waiting_by_rank: Mapping[tuple[str, str], float] = measured(
        ENGINE, MeanOverTime(metrics.ENGINE_REQUESTS_WAITING.name, RANK), finish.by_rank,
        factory=dict)
    kv_by_rank: Mapping[tuple[str, str], float] = measured(
        ENGINE, MeanOverTime(metrics.ENGINE_KV_CACHE_USAGE.name, RANK), finish.by_rank,
        factory=dict)
    preemptions: float = measured(ENGINE, Increase(metrics.ENGINE_PREEMPTIONS.name),
                                  finish.or_zero, default=0.0)
    prompt_tokens_mean: float | None = measured(ENGINE, Ratio(_ENGINE_PROMPT, _FINISHED))
    prompt_tokens_baseline: float | None = measured(ENGINE, Baseline(
        Ratio(_ENGINE_PROMPT, _FINISHED)))
    #: Requests per second.
    request_rate: float | None = measured(ENGINE, PerSecond(_FINISHED))
    #: The fastest prefill seen over the history: prompt tokens per second of prefill time,
    #: over spans of one window. What a prompt costs is judged at this rate, so a prefill
    #: that slowed is the engine's (slow_prefill), not the prompt's.
    prefill_rate_max: float | None = measured(ENGINE, PeakRatio(
        metrics.ENGINE_PROMPT_TOKENS.name, _sum(metrics.ENGINE_PREFILL_TIME)))
    request_rate_baseline: float | None = measured(ENGINE, Baseline(PerSecond(_FINISHED)))
    #: Mean seconds per request of prefill (first scheduled to first token) and of queue,
    #: from the engine's own histograms, and prefill's off-peak mean.
    prefill_mean: float | None = measured(ENGINE, _mean(metrics.ENGINE_PREFILL_TIME))
    prefill_mean_baseline: float | None = measured(
        ENGINE, Baseline(_mean(metrics.ENGINE_PREFILL_TIME)))
    queue_mean: float | None = measured(ENGINE, _mean(metrics.ENGINE_QUEUE_TIME))
    #: Per finished request, its time in the engine's API server before the engine queued
    #: it (tokenizing, templating): end to end less queue, prefill and decode, all four
    #: counted when a request finishes, so over the same requests. 0 where the engine
    #: stamps arrival once it has tokenized (vLLM does on some endpoints, vllm#37498).
    frontend_mean: float | None = measured(ENGINE, Ratio(Diff(Diff(Diff(
        Increase(_sum(metrics.ENGINE_E2E)), Increase(_sum(metrics.ENGINE_QUEUE_TIME))),
        Increase(_sum(metrics.ENGINE_PREFILL_TIME))), Increase(_sum(metrics.ENGINE_DECODE_TIME))),
        Increase(_count(metrics.ENGINE_E2E))))
    #: CPU of the engine's API server process, in cores: near 1, its one Python process
    #: (tokenizing, templating) is saturated.
    process_cpu: float | None = measured(ENGINE, PerSecond(Increase(
        metrics.ENGINE_PROCESS_CPU.name)))
    #: Prompt tokens served from the prefix cache over those looked up, and off-peak.
    prefix_hit_ratio: float | None = measured(ENGINE, _PREFIX_HITS)
    prefix_hit_ratio_baseline: float | None = measured(ENGINE, Baseline(_PREFIX_HITS))
    #: Speculative decoding: accepted over proposed draft tokens, and off-peak.
    spec_acceptance: float | None = measured(ENGINE, _ACCEPTANCE)
    spec_acceptance_baseline: float | None = measured(ENGINE, Baseline(_ACCEPTANCE))
    #: P/D: requests waiting deferred (for their KV) on average, the share of prompt tokens
    #: whose KV came from a prefill instance, and the mean KV transfer time.
    deferred: float | None = measured(ENGINE, MeanOverTime(
        metrics.ENGINE_REQUESTS_WAITING_BY_REASON.name,
        match=((_REASON, metrics.ENGINE_WAITING_REASONS[1]),)))
    external_kv_share: float | None = measured(ENGINE, Ratio(
        Increase(metrics.ENGINE_PROMPT_TOKENS_BY_SOURCE.name,
                 match=((_SOURCE, metrics.ENGINE_PROMPT_SOURCES[2]),)),
        Increase(metrics.ENGINE_PROMPT_TOKENS_BY_SOURCE.name)))
    kv_transfer_mean: float | None = measured(ENGINE, _mean(metrics.ENGINE_KV_TRANSFER_TIME))

    @property
    def engine_seconds(self) -> float | None:
        parts = (self.queue_seconds, self.prefill_seconds, self.decode_seconds)
        if any(p is None for p in parts):
            return None
        return sum(p for p in parts if p is not None)

    @property
    def queue_share(self) -> float | None:  # queued share of its time: the capacity alert's
        total, queued = self.engine_seconds, self.queue_seconds
        return None if not total or queued is None else queued / total


@dataclass(frozen=True)
class GpuWindow:
    """One GPU over the window."""

    gpu: str
    name: str = ""
    site: str = ""
    #: The engine config name this GPU serves, "" when unknown: the chain then links the GPU
    #: to every engine of the same site (all of them on a single-site exporter).
    engine: str = ""
    #: Mean ratio.
    utilization: float | None = measured(
        GPU, MeanOverTime(metrics.GPU_UTILIZATION.name), trend=True)
    #: The peak of both: memory is judged full by its fullest moment.
    memory_used_ratio: float | None = measured(GPU, Ratio(
        MaxOverTime(metrics.GPU_MEMORY_USED.name), MaxOverTime(metrics.GPU_MEMORY_TOTAL.name)))
    #: Clock-event reasons active in the window (metrics.GPU_CLOCK_EVENT_REASONS values).
    clock_events: tuple[str, ...] = measured(
        GPU, MeanOverTime(metrics.GPU_CLOCK_EVENT.name, (metrics.GPU_CLOCK_EVENT.labels[-1],)),
        finish.clock_events, default=(), trend=True)
    xid_errors: int = measured(GPU, Increase(metrics.GPU_XID_ERRORS.name, born=True), count,
                               default=0)
    dram_bandwidth_utilization: float | None = measured(
        GPU, MeanOverTime(metrics.GPU_DRAM_BANDWIDTH_UTILIZATION.name), trend=True)
    #: The PCIe link's generation and width at the window's end, and the most it trains to.
    pcie_gen: float | None = measured(GPU, Last(metrics.GPU_PCIE_LINK_GENERATION.name))
    pcie_gen_max: float | None = measured(GPU, Last(metrics.GPU_PCIE_LINK_GENERATION_MAX.name))
    pcie_width: float | None = measured(GPU, Last(metrics.GPU_PCIE_LINK_WIDTH.name))
    pcie_width_max: float | None = measured(GPU, Last(metrics.GPU_PCIE_LINK_WIDTH_MAX.name))
    #: NVLinks down at the window's end (0 without NVLink).
    nvlink_down: int = measured(GPU, Last(metrics.GPU_NVLINK_UP.name, (
        metrics.GPU_NVLINK_UP.labels[-1],)), finish.links_down, default=0)
    #: Link errors in the window: NVLink replays, recoveries and CRC errors; PCIe replays.
    nvlink_errors: int = measured(GPU, Increase(metrics.GPU_NVLINK_ERRORS.name), count,
                                  default=0)
    pcie_replays: int = measured(GPU, Increase(metrics.GPU_PCIE_REPLAYS.name), count, default=0)


_CLIENT_SENT = Increase(metrics.CLIENTS_SEGMENTS_SENT.name)
_CLIENT_RETRANS = Increase(metrics.CLIENTS_SEGMENTS_RETRANSMITTED.name)


@dataclass(frozen=True)
class ClientWindow:
    """One carrier's real users over the window: the ``clients`` check's connections on
    the watched ports (summed over them), as the server's kernel saw them. Retransmissions
    are loss as TCP saw it on the users' own streams, whatever ICMP to a chosen target says."""

    carrier: str
    vantage: str = ""
    site: str = ""
    #: Mean established connections over the window.
    connections: float | None = measured(
        CLIENTS, MeanOverTime(metrics.CLIENTS_CONNECTIONS.name), trend=True)
    #: Data segments sent to the carrier's clients, and of them retransmitted.
    sent: int = measured(CLIENTS, _CLIENT_SENT, count, default=0, trend=True)
    retransmitted: int = measured(CLIENTS, _CLIENT_RETRANS, count, default=0, trend=True)
    #: The kernel's smoothed RTT of the connections that sent data: P95 and mean.
    rtt_p95: float | None = measured(CLIENTS, Quantile(0.95, metrics.CLIENTS_RTT))
    rtt_mean: float | None = measured(CLIENTS, _mean(metrics.CLIENTS_RTT), trend=True)
    #: Off-peak retransmitted / sent, and off-peak mean smoothed RTT.
    retransmission_baseline: float | None = measured(CLIENTS, Baseline(
        Ratio(_CLIENT_RETRANS, _CLIENT_SENT)))
    rtt_baseline: float | None = measured(CLIENTS, Baseline(_mean(metrics.CLIENTS_RTT)))
    in_peak: bool = measured(CLIENTS, InPeak(), finish.in_peak, default=False)

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
    hosts: tuple[HostWindow, ...] = ()
    #: Checks configured but failing or never run in the window ("engine/main", "gpu/nvml").
    failing_checks: tuple[str, ...] = field(default=())
