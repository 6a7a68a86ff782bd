"""Aggregation levels and every recorded series name, each written out once.

Names follow ``level:metric:operations``. A level is the label set a rule aggregates to;
every level keeps ``job`` and ``instance`` (dashboards filter on instance) and the fleet's
``site`` and ``vantage``. The metric part is the family the rule reads (from
:mod:`exporter.metrics`), or for a ratio ``<numerator>_per_<denominator>``. Written out
rather than assembled so a name can be grepped from a dashboard query to its rule;
tests/test_recorded_names.py holds each one to the convention and to the metric schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from exporter import metrics
from exporter.metrics import Family

#: Window of every ``*_rate5m`` series. With 15 s probes a 5m window holds ~20 requests.
RATE = "5m"


@dataclass(frozen=True)
class Level:
    """An aggregation level: the ``level`` part of a recorded name and the labels kept."""

    name: str
    labels: tuple[str, ...]

    @property
    def by(self) -> str:
        return ", ".join(self.labels)


SCRAPE = ("job", "instance")
#: External labels of a fleet's edge Prometheus servers (docs/scaling.md). An edge's own
#: series do not carry them (Prometheus adds them on the way out), so there ``by (site,
#: vantage)`` keeps nothing; evaluated on remote-written series, centrally, they keep two
#: exporters that share a job and instance name at two vantage points apart.
FLEET = ("site", "vantage")
#: One exporter, wherever it reports from: what every level keeps and every join matches.
SOURCE = (*SCRAPE, *FLEET)
PROBE = Level("probe", (*SOURCE, *metrics.PROBE_LABELS))
# Data-parallel ranks of one model are one service to a user: summed.
MODEL = Level("model", (*SOURCE, *(x for x in metrics.ENGINE_SERIES_LABELS if x != "dp_rank")))
PATH = Level("path", (*SOURCE, *metrics.PATH_LABELS))
ROUTE = Level("route", (*SOURCE, *metrics.ROUTE_LABELS))
# A carrier's real users (the clients check), the watched ports summed.
CARRIER = Level("carrier", (*SOURCE, *metrics.CLIENTS_LABELS[:1]))


@dataclass(frozen=True)
class Quantiles:
    """P50, P95 and P99 of one histogram over RATE, aggregated to ``level``; P99 left out
    (None) where nothing reads it."""

    level: Level
    family: Family
    p50: str
    p95: str
    p99: str | None

    def by_quantile(self) -> tuple[tuple[float, str], ...]:
        every = ((0.5, self.p50), (0.95, self.p95), (0.99, self.p99))
        return tuple((q, name) for q, name in every if name is not None)


@dataclass(frozen=True)
class PeakSeries:
    """Day-vs-evening series of one histogram: the P95 while a peak window is on (one
    series per ``window``); while none is on, the gated bucket rates (level ``<level>_le``),
    their P95, and the baseline, the true P95 of the off-peak time in
    ``alerting.baseline_window``."""

    level: Level
    family: Family
    peak: str
    offpeak_buckets: str
    offpeak: str
    baseline: str


# --- probes ------------------------------------------------------------------------------

PROBE_TTFT = Quantiles(
    PROBE, metrics.PROBE_TTFT,
    "probe:llm_probe_time_to_first_token_seconds:p50_rate5m",
    "probe:llm_probe_time_to_first_token_seconds:p95_rate5m",
    "probe:llm_probe_time_to_first_token_seconds:p99_rate5m",
)
PROBE_TPOT = Quantiles(
    PROBE, metrics.PROBE_TPOT,
    "probe:llm_probe_time_per_output_token_seconds:p50_rate5m",
    "probe:llm_probe_time_per_output_token_seconds:p95_rate5m",
    "probe:llm_probe_time_per_output_token_seconds:p99_rate5m",
)
PROBE_E2E = Quantiles(
    PROBE, metrics.PROBE_E2E,
    "probe:llm_probe_e2e_latency_seconds:p50_rate5m",
    "probe:llm_probe_e2e_latency_seconds:p95_rate5m",
    "probe:llm_probe_e2e_latency_seconds:p99_rate5m",
)
PROBE_STALL_P95 = "probe:llm_probe_stall_seconds:p95_rate5m"
#: Requests with outcome ok over all requests.
PROBE_SUCCESS_RATIO = "probe:llm_probe_requests_ok_per_requests:ratio_rate5m"


def probe_goodput(window: str) -> str:
    """Requests that were ok and met their SLO over all requests, over ``window``: one per
    window of ``alerting.burn_windows``, so the only name that takes a parameter."""
    return f"probe:llm_probe_slo_good_per_requests:ratio_rate{window}"


# --- engines -----------------------------------------------------------------------------

ENGINE_TTFT = Quantiles(
    MODEL, metrics.ENGINE_TTFT,
    "model:llm_engine_time_to_first_token_seconds:p50_rate5m",
    "model:llm_engine_time_to_first_token_seconds:p95_rate5m",
    "model:llm_engine_time_to_first_token_seconds:p99_rate5m",
)
ENGINE_ITL = Quantiles(
    MODEL, metrics.ENGINE_ITL,
    "model:llm_engine_inter_token_latency_seconds:p50_rate5m",
    "model:llm_engine_inter_token_latency_seconds:p95_rate5m",
    "model:llm_engine_inter_token_latency_seconds:p99_rate5m",
)
# Shares of engine end-to-end time per phase; inference is prefill plus decode.
ENGINE_QUEUE_SHARE = "model:llm_engine_queue_time_seconds:share_rate5m"
ENGINE_PREFILL_SHARE = "model:llm_engine_prefill_time_seconds:share_rate5m"
ENGINE_DECODE_SHARE = "model:llm_engine_decode_time_seconds:share_rate5m"
ENGINE_INFERENCE_SHARE = "model:llm_engine_inference_time_seconds:share_rate5m"


# --- network paths -----------------------------------------------------------------------

PATH_RTT = Quantiles(
    PATH, metrics.PATH_RTT,
    "path:llm_path_rtt_seconds:p50_rate5m",
    "path:llm_path_rtt_seconds:p95_rate5m",
    "path:llm_path_rtt_seconds:p99_rate5m",
)
#: Packets lost (sent minus received) over packets sent.
PATH_LOSS = "path:llm_path_packets_lost_per_sent:ratio_rate5m"
#: Route class as its rank in ``alerting.route_class_order`` (1 = best).
ROUTE_RANK = "route:llm_path_route_info:rank"


# --- real users per carrier (the clients check) ------------------------------------------

CLIENTS_RTT = Quantiles(
    CARRIER, metrics.CLIENTS_RTT,
    "carrier:llm_clients_rtt_seconds:p50_rate5m",
    "carrier:llm_clients_rtt_seconds:p95_rate5m",
    "carrier:llm_clients_rtt_seconds:p99_rate5m",
)
#: Segments retransmitted over segments sent to the carrier's real users.
CLIENTS_RETRANSMISSION = "carrier:llm_clients_segments_retransmitted_per_sent:ratio_rate5m"


# --- the probes' own TCP streams per carrier (TCP_INFO) ----------------------------------

#: Segments the carrier's probes retransmitted over those they sent.
PROBE_STREAM_RETRANSMISSION = (
    "carrier:llm_probe_tcp_segments_retransmitted_per_sent:ratio_rate5m")
#: Segments that reached the carrier's probes out of order over the data segments received.
PROBE_STREAM_OUT_OF_ORDER = (
    "carrier:llm_probe_tcp_segments_out_of_order_per_received:ratio_rate5m")
PROBE_TCP_RTT = Quantiles(
    CARRIER, metrics.PROBE_TCP_RTT,
    "carrier:llm_probe_tcp_rtt_seconds:p50_rate5m",
    "carrier:llm_probe_tcp_rtt_seconds:p95_rate5m",
    "carrier:llm_probe_tcp_rtt_seconds:p99_rate5m",
)
#: Per carrier and part: the engine's own timing of the carrier's probe requests (their
#: first token's queue, prefill and network_frontend, and decode), the first token by part.
PROBE_SERVER_TIMING = Quantiles(
    Level(CARRIER.name, (*CARRIER.labels, metrics.PROBE_SERVER_TIMING.labels[-1])),
    metrics.PROBE_SERVER_TIMING,
    "carrier:llm_probe_server_timing_seconds:p50_rate5m",
    "carrier:llm_probe_server_timing_seconds:p95_rate5m",
    None,
)


# --- peak windows against off-peak -------------------------------------------------------

PROBE_TTFT_PEAK = PeakSeries(
    PROBE, metrics.PROBE_TTFT,
    "probe:llm_probe_time_to_first_token_seconds:p95_rate5m_peak",
    "probe_le:llm_probe_time_to_first_token_seconds_bucket:rate5m_offpeak",
    "probe:llm_probe_time_to_first_token_seconds:p95_rate5m_offpeak",
    "probe:llm_probe_time_to_first_token_seconds:p95_offpeak_baseline",
)
PROBE_TPOT_PEAK = PeakSeries(
    PROBE, metrics.PROBE_TPOT,
    "probe:llm_probe_time_per_output_token_seconds:p95_rate5m_peak",
    "probe_le:llm_probe_time_per_output_token_seconds_bucket:rate5m_offpeak",
    "probe:llm_probe_time_per_output_token_seconds:p95_rate5m_offpeak",
    "probe:llm_probe_time_per_output_token_seconds:p95_offpeak_baseline",
)
PATH_RTT_PEAK = PeakSeries(
    PATH, metrics.PATH_RTT,
    "path:llm_path_rtt_seconds:p95_rate5m_peak",
    "path_le:llm_path_rtt_seconds_bucket:rate5m_offpeak",
    "path:llm_path_rtt_seconds:p95_rate5m_offpeak",
    "path:llm_path_rtt_seconds:p95_offpeak_baseline",
)
CLIENTS_RTT_PEAK = PeakSeries(
    CARRIER, metrics.CLIENTS_RTT,
    "carrier:llm_clients_rtt_seconds:p95_rate5m_peak",
    "carrier_le:llm_clients_rtt_seconds_bucket:rate5m_offpeak",
    "carrier:llm_clients_rtt_seconds:p95_rate5m_offpeak",
    "carrier:llm_clients_rtt_seconds:p95_offpeak_baseline",
)
PEAK_HISTOGRAMS = (PROBE_TTFT_PEAK, PROBE_TPOT_PEAK, PATH_RTT_PEAK, CLIENTS_RTT_PEAK)

PATH_LOSS_PEAK = "path:llm_path_packets_lost_per_sent:ratio_rate5m_peak"
PATH_LOSS_OFFPEAK = "path:llm_path_packets_lost_per_sent:ratio_rate5m_offpeak"
PATH_LOSS_BASELINE = "path:llm_path_packets_lost_per_sent:ratio_offpeak_baseline"
# Off-peak packet rates, summed over the baseline window for PATH_LOSS_BASELINE.
PATH_SENT_OFFPEAK = "path:llm_path_packets_sent:rate5m_offpeak"
PATH_RECEIVED_OFFPEAK = "path:llm_path_packets_received:rate5m_offpeak"
CLIENTS_RETRANSMISSION_PEAK = f"{CLIENTS_RETRANSMISSION}_peak"
CLIENTS_RETRANSMISSION_OFFPEAK = f"{CLIENTS_RETRANSMISSION}_offpeak"
PROBE_STREAM_RETRANSMISSION_PEAK = f"{PROBE_STREAM_RETRANSMISSION}_peak"
PROBE_STREAM_RETRANSMISSION_OFFPEAK = f"{PROBE_STREAM_RETRANSMISSION}_offpeak"


# --- how PromQL writes a duration and a set of names ------------------------------------
def prom_duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def alternation(names: Iterable[str]) -> str:
    """A regex matching exactly ``names``, escaped for a PromQL double-quoted string."""
    return "|".join(re.escape(n).replace("\\", "\\\\") for n in names)
