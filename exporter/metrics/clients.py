"""Real users' connections (per carrier).

The clients check reads the kernel's TCP state of the established connections on watched
local ports (netlink sock_diag) and adds them up per carrier, the carrier found from the
client address by the configured CIDR lists. A client address is never a label: series
are carriers (plus other) x ports, whatever the number of clients.
"""

from __future__ import annotations

from exporter.metrics.path import PATH_RTT_BUCKETS
from exporter.metrics.schema import Kind, define

CLIENTS_LABELS = ("carrier", "port")
#: The carrier of a client address no configured list holds (loopback, private, foreign).
CLIENTS_OTHER_CARRIER = "other"
#: Bounded values of ``app_limited`` on CLIENTS_DELIVERY_RATE.
CLIENTS_APP_LIMITED = ("false", "true")
# 16 KiB/s to 1 GiB/s by doubling: a phone on 3G to a data-centre peer.
CLIENTS_RATE_BUCKETS = tuple(float(2**n) for n in range(14, 31))

CLIENTS_CONNECTIONS = define(
    "llm_clients_connections",
    Kind.GAUGE,
    "Established TCP connections on the local port from clients of the carrier, at the last "
    "run.",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_RTT = define(
    "llm_clients_rtt_seconds",
    Kind.HISTOGRAM,
    "The kernel's smoothed RTT (tcpi_rtt) of each connection that sent data since the "
    "previous run, observed once per connection per run.",
    CLIENTS_LABELS,
    PATH_RTT_BUCKETS,
    section="clients",
)
CLIENTS_SEGMENTS_SENT = define(
    "llm_clients_segments_sent_total",
    Kind.COUNTER,
    "Data segments the server sent to the carrier's clients, retransmissions included "
    "(tcpi_data_segs_out increases). Retransmission ratio: increase(retransmitted) / "
    "increase(sent).",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_SEGMENTS_RETRANSMITTED = define(
    "llm_clients_segments_retransmitted_total",
    Kind.COUNTER,
    "Segments the server retransmitted to the carrier's clients (tcpi_total_retrans "
    "increases).",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_DELIVERY_RATE = define(
    "llm_clients_delivery_rate_bytes_per_second",
    Kind.HISTOGRAM,
    "The kernel's delivery rate estimate (tcpi_delivery_rate) of each connection that sent "
    "data since the previous run; app_limited=true where the application, not the path, "
    "limited the sample (a lower bound of what the path carries).",
    (*CLIENTS_LABELS, "app_limited"),
    CLIENTS_RATE_BUCKETS,
    section="clients",
)
CLIENTS_OPENED = define(
    "llm_clients_connections_opened_total",
    Kind.COUNTER,
    "Connections first seen established by a run (after the first run, which only takes "
    "stock); one opened and closed between two runs is never seen.",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_CLOSED = define(
    "llm_clients_connections_closed_total",
    Kind.COUNTER,
    "Connections seen established by one run and gone from the next.",
    CLIENTS_LABELS,
    section="clients",
)
CLIENTS_PREFIXES = define(
    "llm_clients_carrier_prefixes",
    Kind.GAUGE,
    "CIDR prefixes read from the carrier's file when the config was (re)loaded.",
    ("carrier",),
    section="clients",
)
CLIENTS_TRUNCATED = define(
    "llm_clients_truncated_runs_total",
    Kind.COUNTER,
    "Runs that stopped reading at clients.max_connections connections (the rest of the "
    "dump was not counted; connections not reached are not counted as closed).",
    section="clients",
)
