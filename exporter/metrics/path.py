"""The network paths' families (per carrier).

Labels come from config only (carrier, target, region, protocol); a hop address is never
a label. A packet counts as sent once its fate is known (reply, or deadline passed), so
sent - received never includes packets still in flight.
"""

from __future__ import annotations

from exporter.metrics.schema import Kind, define

PATH_LABELS = ("carrier", "target", "region", "protocol")
ROUTE_LABELS = ("carrier", "target")
# China return paths sit between 30 ms and 400 ms; fine steps there, coarse to the timeout.
PATH_RTT_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.125, 0.15, 0.175, 0.2, 0.225,
    0.25, 0.275, 0.3, 0.35, 0.4, 0.5, 0.75, 1, 1.5, 2, 3, 4,
)  # fmt: skip

PATH_PACKETS_SENT = define(
    "llm_path_packets_sent_total",
    Kind.COUNTER,
    "Probe packets (ICMP echoes or TCP connects) whose outcome is known: answered, or past "
    "their deadline. Loss over any window: 1 - increase(received) / increase(sent).",
    PATH_LABELS,
    section="path",
)
PATH_PACKETS_RECEIVED = define(
    "llm_path_packets_received_total",
    Kind.COUNTER,
    "Probe packets answered before their deadline (echo reply, or TCP connection established).",
    PATH_LABELS,
    section="path",
)
PATH_LOSS = define(
    "llm_path_loss_ratio",
    Kind.GAUGE,
    "Share (0..1) of the last burst's packets that got no answer before their deadline.",
    PATH_LABELS,
    section="path",
)
PATH_RTT = define(
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
PATH_JITTER = define(
    "llm_path_jitter_seconds",
    Kind.GAUGE,
    "RTT variation between consecutively sent answered packets. method=rfc3550: the RFC 3550 "
    "interarrival estimator J += (|D| - J) / 16 on RTT differences, kept across bursts; "
    "method=mean_abs_diff: mean |D| over the last burst. Absent until two answers.",
    (*PATH_LABELS, "method"),
    section="path",
)
PATH_LAST_SUCCESS = define(
    "llm_path_last_success_timestamp_seconds",
    Kind.GAUGE,
    "Unix time at the end of the last burst that got at least one answer.",
    PATH_LABELS,
    section="path",
)
PATH_ERRORS = define(
    "llm_path_errors_total",
    Kind.COUNTER,
    "Path check errors by reason. Per burst that could not be sent: permission (no ICMP "
    "socket allowed), resolve (host did not resolve). Per packet, also counted as lost: "
    "unreachable (no route to the address), send (another send error). Per packet, counted "
    "as answered: refused (a TCP reset: the host answered, the port is closed).",
    (*PATH_LABELS, "reason"),
    section="path",
)
PATH_ROUTE_INFO = define(
    "llm_path_route_info",
    Kind.GAUGE,
    "Always 1; route_class is the class of the last traceroute's hops by the CIDR route "
    "table (cn2_gia, cn2_gt, chinanet_163, cu_9929, ...), other when no table network "
    "matched, unknown when no hop answered.",
    (*ROUTE_LABELS, "route_class"),
    section="path",
)
PATH_HOPS = define(
    "llm_path_hops",
    Kind.GAUGE,
    "Hops to the target in the last traceroute; absent when the target did not answer it.",
    ROUTE_LABELS,
    section="path",
)
PATH_ROUTE_CHANGES = define(
    "llm_path_route_changes_total",
    Kind.COUNTER,
    "Changes of route_class between two traceroutes that both saw hops (unknown is not a "
    "change); each is logged with the old and new class.",
    ROUTE_LABELS,
    section="path",
)
PATH_ROUTE_ROUND_DURATION = define(
    "llm_path_route_round_duration_seconds",
    Kind.GAUGE,
    "How long the last complete round of traceroutes took: from its first trace to the "
    "moment every route target had been traced once. Absent until one round completed.",
    section="path",
)
PATH_ROUTE_ROUNDS_LATE = define(
    "llm_path_route_rounds_late_total",
    Kind.COUNTER,
    "Rounds of traceroutes still unfinished route_interval after they started (each is "
    "logged at warning with what it would take: more paths.route_parallelism or a longer "
    "route_interval).",
    section="path",
)
