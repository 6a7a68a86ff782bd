"""The network paths dashboard: per-carrier round trip, loss, jitter and route class from
the GPU server back to users."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import timeseries

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import names
from exporter.metrics.names import RATE
from exporter.monitoring.dashboards.kit import (
    RI,
    Section,
    build_dashboard,
    heat,
    quantiles,
    sel,
    timeline,
    ts,
)
from exporter.monitoring.promql import human_seconds, pct


def paths(config: Config) -> db.Dashboard:
    cs = sel("instance", "carrier")
    slo = config.slo
    t = "{{carrier}}/{{target}}"
    ranks = {str(i): cls for i, cls in enumerate(config.alerting.route_class_order, start=1)}
    jitter = sel("instance", "carrier", extra=f'method="{metrics.PATH_JITTER_RFC3550}"')
    rtt = Section("Round trip", [
        heat("RTT distribution",
             "Round-trip times of answered probe packets, all selected carriers.",
             f"sum by (le) (rate({metrics.PATH_RTT.name}_bucket{cs}[{RI}]))", "s"),
        ts("RTT quantiles",
           f"P50, P95 and P99 round trip per carrier target over {RATE}.", "s",
           quantiles(names.PATH_RTT, cs, t)),
    ])
    quality = Section("Loss and jitter", [
        ts("Packet loss",
           f"Share of probe packets unanswered over {RATE}, from the sent and received "
           f"counters; the SLO is {pct(slo.loss_ratio)}.", "percentunit",
           [(f"{names.PATH_LOSS}{cs}", t)], threshold=slo.loss_ratio),
        ts("Jitter (RFC 3550)",
           f"Interarrival jitter estimate per carrier target; the SLO is "
           f"{human_seconds(slo.jitter_seconds)}.", "s",
           [(f"{metrics.PATH_JITTER.name}{jitter}", t)],
           threshold=slo.jitter_seconds),
        ts("Path errors", "Path check errors per second by reason.", "ops",
           [(f"sum by (carrier, target, reason) "
             f"(rate({metrics.PATH_ERRORS.name}{cs}[{RI}]))", f"{t} {{{{reason}}}}")]),
    ])
    route = Section("Routes", [
        timeline("Route class",
                 "Route class of the last traceroute, best classes first in "
                 "alerting.route_class_order; a move down the list alerts.", "none",
                 [(f"{names.ROUTE_RANK}{cs}", t)], ranks),
        ts("Route changes and hops",
           "Route-class changes per rate interval, and hops to the target.", "short",
           [(f"sum by (carrier, target) "
             f"(increase({metrics.PATH_ROUTE_CHANGES.name}{cs}[{RI}]))", f"{t} changes"),
            (f"max by (carrier, target) ({metrics.PATH_HOPS.name}{cs})", f"{t} hops")]),
    ])
    u = "{{carrier}}"

    def lossy(title: str, text: str, series: str, alert: str = "") -> timeseries.Panel:
        """A per-carrier loss share against the loss SLO's line."""
        return ts(title, f"{text} The line is the loss SLO ({pct(slo.loss_ratio)}){alert}.",
                  "percentunit", [(f"{series}{cs}", u)], threshold=slo.loss_ratio, span=8)

    users = Section("Real users (the clients check)", [
        ts("Connections",
           "Established TCP connections of real users on the watched ports, per carrier "
           "(other: addresses in no carrier list).", "short",
           [(f"sum by (carrier) ({metrics.CLIENTS_CONNECTIONS.name}{cs})", u),
            (f"sum by (carrier) (rate({metrics.CLIENTS_OPENED.name}{cs}[{RI}]))",
             f"{u} opened/s")], span=8),
        lossy("Retransmission",
              f"Segments the server retransmitted over segments it sent to the carrier's "
              f"users over {RATE}: loss as the users' own streams saw it.",
              names.CLIENTS_RETRANSMISSION, "; LLMClientsRetransmissionHigh fires over it"),
        ts("Smoothed RTT",
           f"P50, P95 and P99 of the kernel's smoothed RTT of the users' connections that "
           f"sent data, over {RATE}.", "s", quantiles(names.CLIENTS_RTT, cs, u), span=8),
    ])
    probes = Section("Probe streams (the kernel's TCP_INFO)", [
        lossy("Probe stream retransmission",
              f"Segments the carrier's probes retransmitted over segments they sent, over "
              f"{RATE}: loss on the probes' own streams, whatever ICMP shows (carriers that "
              f"prioritise ICMP).", names.PROBE_STREAM_RETRANSMISSION,
              "; LLMProbeStreamPacketLoss fires over it per probe"),
        lossy("Probe stream out of order",
              f"Segments that reached the carrier's probes out of order over the data "
              f"segments they received, over {RATE}: the server-to-client direction's "
              f"losses as the probe sees them.", names.PROBE_STREAM_OUT_OF_ORDER),
        ts("Probe kernel smoothed RTT",
           f"P50, P95 and P99 of the kernel's smoothed RTT (tcpi_rtt) of the carrier's "
           f"probe connections, over {RATE}: beside the ICMP round trip, the one the "
           f"stream itself has.", "s", quantiles(names.PROBE_TCP_RTT, cs, u), span=8),
    ])
    return build_dashboard(
        "llm-paths", "LLM latency: network paths",
        "Per-carrier round trip, loss, jitter and route class from the GPU server back to "
        "users, the real users' own connections and the probes' own streams.",
        ("instance", "carrier"), [rtt, quality, route, users, probes],
    )
