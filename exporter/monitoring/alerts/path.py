"""Network path alerts: loss and jitter over the SLO, and a route moving to a worse class."""

from __future__ import annotations

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import names
from exporter.metrics.names import PATH, RATE, ROUTE, prom_duration
from exporter.monitoring.promql import (
    PATH_TEXT,
    VALUE_NUMBER,
    VALUE_PERCENT,
    VALUE_SECONDS,
    human_seconds,
    lbl,
    num,
    paren,
    pct,
)
from exporter.monitoring.rule import Alert


def path_alerts(config: Config) -> list[Alert]:
    loss = config.slo.loss_ratio
    jitter_max = config.slo.jitter_seconds
    jitter = metrics.PATH_JITTER.name
    info = metrics.PATH_ROUTE_INFO.name
    lookback = prom_duration(config.alerting.route_lookback)
    rank = names.ROUTE_RANK
    return [
        Alert(
            "LLMPathPacketLoss",
            f"{names.PATH_LOSS} > {num(loss)}",
            "warning",
            "Packet loss on a carrier path is over the SLO.",
            f"{PATH_TEXT} lost {VALUE_PERCENT} of probe packets over {RATE} (threshold "
            f"{pct(loss)}).",
            "10m",
        ),
        Alert(
            "LLMPathJitterHigh",
            # RFC 3550's estimator, the one kept across bursts (see exporter/metrics/).
            f"avg by ({PATH.by}) (avg_over_time("
            f'{jitter}{{method="{metrics.PATH_JITTER_RFC3550}"}}[{RATE}]))'
            f" > {num(jitter_max)}",
            "warning",
            "Jitter on a carrier path is over the SLO.",
            f"{PATH_TEXT} RFC 3550 jitter averaged {VALUE_SECONDS} over {RATE} (threshold "
            f"{human_seconds(jitter_max)}).",
            "10m",
        ),
        Alert(
            "LLMPathRouteDegraded",
            paren(rank, ">", f"min_over_time({rank}[{lookback}])")
            + f"\n* on ({ROUTE.by}) group_left (route_class)\n{info}",
            "warning",
            "A carrier path moved to a worse route class.",
            f"Carrier {lbl('carrier')} path to {lbl('target')} now takes route class "
            f"{lbl('route_class')} (rank {VALUE_NUMBER} in alerting.route_class_order), "
            f"worse than a class it took within {lookback}.",
        ),
    ]
