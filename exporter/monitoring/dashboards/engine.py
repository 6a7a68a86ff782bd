"""The engine dashboard: load, queue, KV cache and engine-side latency, the same for
vLLM, TensorRT-LLM, Triton and SGLang."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import Family, names
from exporter.metrics.names import RATE
from exporter.monitoring.dashboards.kit import (
    RI,
    Section,
    build_dashboard,
    engine_shares,
    mean_of,
    quantiles,
    sel,
    stat_panel,
    ts,
)


def engine(config: Config) -> db.Dashboard:
    es = sel("instance", "model")
    by = "target, model"
    m = "{{target}} {{model}}"
    slo = config.slo

    def per_model(family: Family, fn: str = "sum") -> str:
        return f"{fn} by ({by}) ({family.name}{es})"

    def rate_of(family: Family) -> str:
        return f"sum by ({by}) (rate({family.name}{es}[{RI}]))"

    load = Section("Load", [
        ts("Running and waiting requests",
           "Requests in the running batch and queued behind it. Waiting above zero for "
           "long means the engine is at capacity.", "short",
           [(per_model(metrics.ENGINE_REQUESTS_RUNNING), f"{m} running"),
            (per_model(metrics.ENGINE_REQUESTS_WAITING), f"{m} waiting")], span=8),
        ts("Token throughput",
           "Prompt (prefill) and generated (decode) tokens per second.", "suffix: tok/s",
           [(rate_of(metrics.ENGINE_PROMPT_TOKENS), f"{m} prompt"),
            (rate_of(metrics.ENGINE_GENERATION_TOKENS), f"{m} generated")], span=8),
        ts("Finished requests by reason",
           "Requests per second by finish reason; abort and error are failures.", "reqps",
           [(f"sum by ({by}, finished_reason) "
             f"(rate({metrics.ENGINE_REQUESTS_FINISHED.name}{es}[{RI}]))",
             f"{m} {{{{finished_reason}}}}")], span=8),
    ])
    queue = Section("Queue", [
        ts("Queue time",
           "Mean and P95 time requests waited in the engine queue before their first "
           "schedule.", "s",
           [(mean_of(metrics.ENGINE_QUEUE_TIME, es, by), f"{m} mean"),
            (f"histogram_quantile(0.95, sum by (le, {by}) "
             f"(rate({metrics.ENGINE_QUEUE_TIME.name}_bucket{es}[{RI}])))", f"{m} p95")]),
        ts("Engine time shares",
           "Share of engine end-to-end time in queue, prefill and decode (recorded over "
           f"{RATE}).", "percentunit", engine_shares(es), stack=True),
    ])
    preempt = metrics.ENGINE_PREEMPTIONS
    cache = Section("KV cache", [
        ts("KV cache usage",
           "Fraction of KV-cache capacity in use (highest data-parallel rank). Near full, "
           "the scheduler preempts.", "percentunit",
           [(per_model(metrics.ENGINE_KV_CACHE_USAGE, "max"), m)], span=8,
           threshold=config.alerting.kv_cache_usage_ratio),
        ts("Prefix-cache hit rate",
           "Share of looked-up prompt tokens served from the prefix cache.", "percentunit",
           [(f"{rate_of(metrics.ENGINE_PREFIX_CACHE_HITS)}\n/\n"
             f"{rate_of(metrics.ENGINE_PREFIX_CACHE_QUERIES)}", m)], span=8),
        ts("Preemptions",
           "Requests preempted per second; each one recomputes its prompt and output.",
           "ops", [(rate_of(preempt), m)], span=8),
    ])
    latency = Section("Engine-side latency", [
        ts("Engine TTFT quantiles",
           f"Engine-side time to first token, P50/P95/P99 over {RATE}: queue plus "
           "prefill, without the network.", "s",
           quantiles(names.ENGINE_TTFT, es, m), threshold=slo.ttft_p95_seconds),
        ts("Engine inter-token latency quantiles",
           f"Engine-side gap between output events, P50/P95/P99 over {RATE}.", "s",
           quantiles(names.ENGINE_ITL, es, m), threshold=slo.tpot_p95_seconds),
        stat_panel("Engine up", "1 while the engine's metrics endpoint answers.", "none",
                   (f"min by (target) ({metrics.ENGINE_UP.name}{sel('instance')})",
                    "{{target}}"),
                   [(None, "red"), (1, "green")], span=24, mappings={"0": "down", "1": "up"}),
    ])
    return build_dashboard(
        "llm-engine", "LLM latency: engine",
        "Inference engine internals, normalized over vLLM, TensorRT-LLM, Triton and SGLang.",
        ("instance", "model"), [load, queue, cache, latency],
    )
