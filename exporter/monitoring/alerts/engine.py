"""Engine alerts: down or absent engines, and whether slow engines are capacity-bound
(queueing), compute-bound (prefill and decode) or out of KV cache."""

from __future__ import annotations

from exporter import metrics
from exporter.config.models import Config
from exporter.monitoring import names
from exporter.monitoring.names import MODEL, RATE
from exporter.monitoring.promql import (
    MODEL_TEXT,
    VALUE_PERCENT,
    human_seconds,
    lbl,
    num,
    paren,
    pct,
    rate_sum,
)
from exporter.monitoring.rule import Alert


def engine_alerts(config: Config) -> list[Alert]:
    up = metrics.ENGINE_UP.name
    # engine_target is the label probes carry for the engine they hit (see metrics.py), so
    # Alertmanager can mute those probes' failures while the engine is down.
    alerts = [
        Alert(
            "LLMEngineDown",
            f'label_replace({up} == 0, "engine_target", "$1", "target", "(.*)")',
            "critical",
            "An inference engine's metrics endpoint is down.",
            f"Engine {lbl('target')} on {lbl('instance')} has not answered its metrics scrape "
            f"for 2m; {metrics.ENGINE_SCRAPE_ERRORS.name} says why.",
            "2m",
        )
    ]
    for engine in config.engines:
        alerts.append(
            Alert(
                "LLMEngineDown",
                f'absent({up}{{target="{engine.name}"}})',
                "critical",
                "An inference engine's metrics endpoint is down.",
                f"Engine {engine.name} has no {up} series: the exporter is down, not "
                "scraped, or runs a config without this engine.",
                "10m",
                {"engine_target": engine.name},
            )
        )
    a = config.alerting
    slo = config.slo
    ttft_p95 = names.ENGINE_TTFT.p95
    itl_p95 = names.ENGINE_ITL.p95
    kv = metrics.ENGINE_KV_CACHE_USAGE.name
    alerts += [
        Alert(
            "LLMEngineCapacityBound",
            f"{names.ENGINE_QUEUE_SHARE} > {num(a.queue_share_ratio)}",
            "warning",
            "Requests wait in the engine queue: the engine is capacity-bound.",
            f"{MODEL_TEXT} spends {VALUE_PERCENT} of request time queued before "
            f"prefill over {RATE} (threshold {pct(a.queue_share_ratio)}).",
            "10m",
        ),
        Alert(
            "LLMEngineComputeBound",
            f"{names.ENGINE_INFERENCE_SHARE} > {num(1 - a.queue_share_ratio)}\n"
            f"and on ({MODEL.by})\n"
            + paren(f"{ttft_p95} > {num(slo.ttft_p95_seconds)}", "or",
                    f"{itl_p95} > {num(slo.tpot_p95_seconds)}"),
            "warning",
            "Engine latency is over the SLO with little queueing: the engine is "
            "compute-bound.",
            f"{MODEL_TEXT} spends {VALUE_PERCENT} of request time in prefill and decode "
            f"(threshold {pct(1 - a.queue_share_ratio)}) while its P95 TTFT is over "
            f"{human_seconds(slo.ttft_p95_seconds)} or its P95 inter-token latency over "
            f"{human_seconds(slo.tpot_p95_seconds)}.",
            "10m",
        ),
        Alert(
            "LLMEngineKVCacheSaturated",
            f"max by ({MODEL.by}) ({kv}) > {num(a.kv_cache_usage_ratio)}\n"
            f"and on ({MODEL.by})\n"
            f"{rate_sum(MODEL, metrics.ENGINE_PREEMPTIONS.name)} > 0",
            "warning",
            "The engine's KV cache is full and requests are being preempted.",
            f"{MODEL_TEXT} KV cache is {VALUE_PERCENT} full (threshold "
            f"{pct(a.kv_cache_usage_ratio)}) and the scheduler is preempting requests.",
            "5m",
        ),
    ]
    return alerts
