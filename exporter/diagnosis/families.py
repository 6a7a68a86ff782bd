"""Which of the exporter's families the embedded source keeps, and how each is stored: the
fine windows take ``WINDOW_FAMILIES``, the coarse history ``COARSE_FAMILIES``; counters and
histograms are monotonic (stored reset-corrected), gauges as they are."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter import metrics

#: (sample name, labels, value) as a registry's collect() yields them.
RawSample = tuple[str, Mapping[str, str], float]

WINDOW_FAMILIES: tuple[metrics.Family, ...] = (
    metrics.EXPORTER_CHECK_RUNS,
    # When each engine was last scraped: what a linked probe is aligned to (alignment.py).
    metrics.EXPORTER_CHECK_LAST_SUCCESS,
    metrics.EXPORTER_PEAK_WINDOW,
    metrics.PROBE_REQUESTS,
    metrics.PROBE_TTFT,
    metrics.PROBE_TPOT,
    metrics.PROBE_ITL,
    metrics.PROBE_STALL,
    metrics.PROBE_PHASE,
    metrics.PROBE_PROMPT_TOKENS,
    metrics.PROBE_SERVER_TIMING,
    metrics.PROBE_SERVER_SPLIT,
    metrics.PROBE_TCP_SEGMENTS,
    metrics.ENGINE_UP,
    metrics.ENGINE_REQUESTS_RUNNING,
    metrics.ENGINE_REQUESTS_WAITING,
    metrics.ENGINE_KV_CACHE_USAGE,
    metrics.ENGINE_TTFT,
    metrics.ENGINE_ITL,
    metrics.ENGINE_E2E,
    metrics.ENGINE_QUEUE_TIME,
    metrics.ENGINE_PREFILL_TIME,
    metrics.ENGINE_DECODE_TIME,
    metrics.ENGINE_PROMPT_TOKENS,
    metrics.ENGINE_PREEMPTIONS,
    metrics.ENGINE_REQUESTS_FINISHED,
    metrics.ENGINE_QUEUE_DURATION,
    metrics.ENGINE_COMPUTE_DURATION,
    metrics.ENGINE_REQUESTS_SUCCEEDED,
    metrics.PATH_PACKETS_SENT,
    metrics.PATH_PACKETS_RECEIVED,
    metrics.PATH_RTT,
    metrics.PATH_JITTER,
    metrics.PATH_ROUTE_INFO,
    metrics.PATH_ROUTE_CHANGES,
    metrics.GPU_UTILIZATION,
    metrics.GPU_MEMORY_USED,
    metrics.GPU_MEMORY_TOTAL,
    metrics.GPU_CLOCK_EVENT,
    metrics.GPU_XID_ERRORS,
    metrics.GPU_DRAM_BANDWIDTH_UTILIZATION,
    metrics.CLIENTS_CONNECTIONS,
    metrics.CLIENTS_SEGMENTS_SENT,
    metrics.CLIENTS_SEGMENTS_RETRANSMITTED,
    metrics.CLIENTS_RTT,
)
#: What baselines (off-peak statistics), history-long maxima and the `/` page's last-hour
#: sparklines (``trends.py``) read: kept once a minute for ``diagnosis.history``.
#: Histograms other than the probes' TTFT/TPOT keep only what a mean needs; a gauge keeps
#: its highest value since the previous coarse snapshot, so a batch size or route class
#: held between two of them is not lost.
COARSE_FAMILIES: tuple[metrics.Family, ...] = (
    metrics.PROBE_REQUESTS, metrics.PROBE_TTFT, metrics.PROBE_TPOT, metrics.PROBE_PROMPT_TOKENS,
    metrics.ENGINE_REQUESTS_RUNNING, metrics.ENGINE_REQUESTS_WAITING,
    metrics.ENGINE_KV_CACHE_USAGE, metrics.ENGINE_PROMPT_TOKENS, metrics.ENGINE_REQUESTS_FINISHED,
    metrics.ENGINE_E2E, metrics.ENGINE_REQUESTS_SUCCEEDED, metrics.ENGINE_QUEUE_TIME,
    metrics.ENGINE_PREFILL_TIME, metrics.ENGINE_DECODE_TIME, metrics.ENGINE_QUEUE_DURATION,
    metrics.PATH_PACKETS_SENT, metrics.PATH_PACKETS_RECEIVED, metrics.PATH_RTT,
    metrics.PATH_JITTER, metrics.PATH_ROUTE_INFO,
    metrics.GPU_UTILIZATION, metrics.GPU_DRAM_BANDWIDTH_UTILIZATION, metrics.GPU_CLOCK_EVENT,
    metrics.CLIENTS_SEGMENTS_SENT, metrics.CLIENTS_SEGMENTS_RETRANSMITTED, metrics.CLIENTS_RTT,
)
#: Histograms whose coarse snapshots keep ``_sum`` and ``_count`` but no buckets.
COARSE_MEAN_ONLY = (metrics.ENGINE_E2E, metrics.PATH_RTT, metrics.ENGINE_QUEUE_TIME,
                    metrics.ENGINE_PREFILL_TIME, metrics.ENGINE_DECODE_TIME, metrics.CLIENTS_RTT)


def sample_names(family: metrics.Family) -> tuple[str, ...]:
    if family.kind is metrics.Kind.HISTOGRAM:
        return (f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count")
    return (family.name,)


def _monotonic(family: metrics.Family) -> bool:
    return family.kind is not metrics.Kind.GAUGE


#: Histograms no window reads the buckets of: the chain reads the path RTT's mean only, and
#: at 1000 path targets its buckets would be 27k of every snapshot's values (> MAX_VALUES).
#: The exact split's parts likewise: the chain reads their sums (shares of the TTFT).
MEAN_ONLY = (metrics.PATH_RTT, metrics.PROBE_SERVER_TIMING)
#: sample name -> (monotonic, counts from zero on first appearance)
KINDS: dict[str, tuple[bool, bool]] = {
    name: (_monotonic(f), f.section != "engine")
    for f in WINDOW_FAMILIES
    for name in sample_names(f)
    if not (f in MEAN_ONLY and name.endswith("_bucket"))
}
#: The family names a registry's collect() yields (counters without ``_total``).
COLLECTED: frozenset[str] = frozenset(f.base for f in WINDOW_FAMILIES)
COARSE_SAMPLES: frozenset[str] = frozenset(
    name
    for f in COARSE_FAMILIES
    for name in sample_names(f)
    if not (f in COARSE_MEAN_ONLY and name.endswith("_bucket"))
)
PEAK = metrics.EXPORTER_PEAK_WINDOW.name
COARSE_GAUGES: tuple[str, ...] = tuple(
    f.name for f in COARSE_FAMILIES if f.kind is metrics.Kind.GAUGE
)


def raw_samples(families: Iterable[object]) -> list[RawSample]:
    """The samples of the window families among ``families`` (a registry's collect())."""
    out: list[RawSample] = []
    for family in families:
        if getattr(family, "name", None) not in COLLECTED:
            continue
        for s in getattr(family, "samples", ()):
            if s.name in KINDS:
                out.append((s.name, s.labels, s.value))
    return out
