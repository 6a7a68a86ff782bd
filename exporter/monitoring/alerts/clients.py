"""Real users' alerts (the clients check): a carrier whose users' streams retransmit over
the loss SLO, seen by the server's kernel whether or not any probe or path rides it."""

from __future__ import annotations

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import names
from exporter.metrics.names import CARRIER, RATE
from exporter.monitoring.promql import VALUE_PERCENT, lbl, num, pct
from exporter.monitoring.rule import Alert


def clients_alerts(config: Config) -> list[Alert]:
    loss = config.slo.loss_ratio
    least = config.alerting.clients_min_segments
    sent = metrics.CLIENTS_SEGMENTS_SENT.name
    return [
        Alert(
            "LLMClientsRetransmissionHigh",
            # Over the same line as path loss (a retransmission is a loss TCP saw), and only
            # over enough segments: 2 of 10 is one unlucky connection.
            f"{names.CLIENTS_RETRANSMISSION} > {num(loss)}\n"
            f"and on ({CARRIER.by})\n"
            f"sum by ({CARRIER.by}) (increase({sent}[{RATE}])) >= {least}",
            "warning",
            "Real users of a carrier retransmit over the loss SLO.",
            f"The server retransmitted {VALUE_PERCENT} of the segments it sent to real users "
            f"of carrier {lbl('carrier')} over {RATE} (threshold {pct(loss)}, over at least "
            f"{least} segments).",
            "10m",
        ),
    ]
