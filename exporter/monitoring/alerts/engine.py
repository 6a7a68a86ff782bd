"""Engine alerts: down or absent engines, whether slow engines are capacity-bound
(queueing), compute-bound (prefill and decode) or out of KV cache, and one data-parallel
rank far above its peers."""

from __future__ import annotations

from exporter import metrics
from exporter.config.models import Config
from exporter.diagnosis.declare import WindowKey
from exporter.diagnosis.promqueries import Ranges, coverage, offpeak
from exporter.metrics import names
from exporter.metrics.names import MODEL, RATE
from exporter.monitoring.promql import (
    MODEL_TEXT,
    VALUE_NUMBER,
    VALUE_PERCENT,
    VALUE_SECONDS,
    human_seconds,
    lbl,
    num,
    paren,
    pct,
    rate_sum,
    ratio,
)
from exporter.monitoring.rule import Alert

#: The label that tells an engine's data-parallel ranks apart (the one MODEL sums away).
RANK = next(x for x in metrics.ENGINE_SERIES_LABELS if x not in MODEL.labels)
RANK_TEXT = f"{MODEL_TEXT} data-parallel rank {lbl(RANK)}"


def per_rank(gauge: str) -> str:
    """The gauge's mean over RATE, one series per rank of each model."""
    return f"sum by ({MODEL.by}, {RANK}) (avg_over_time({gauge}[{RATE}]))"


def others_mean(gauge: str) -> str:
    """Per rank, the mean of the same model's other ranks: (sum - own) / (count - 1). A
    model with one rank divides 0 by 0, NaN, which no comparison passes."""
    mine = per_rank(gauge)
    return paren(
        paren(f"sum by ({MODEL.by}) ({mine})", f"- on ({MODEL.by}) group_right", mine),
        # group_left () ends its (empty) label list, so the parenthesis after it is the
        # divisor, not more labels.
        f"/ on ({MODEL.by}) group_left ()",
        f"(count by ({MODEL.by}) ({mine}) - 1)")


def imbalance_alerts(config: Config) -> list[Alert]:
    """One rank's queue, or KV cache, far above the mean of its model's other ranks: the
    chain's engine/imbalance (exporter/diagnosis/steps/engine.py), with its thresholds."""
    a = config.alerting
    ratio, floor, gap = a.imbalance_ratio, a.imbalance_min_waiting, a.imbalance_kv_gap
    waiting = metrics.ENGINE_REQUESTS_WAITING.name
    kv = metrics.ENGINE_KV_CACHE_USAGE.name
    summary = "One data-parallel rank of an engine is far busier than its peers."
    return [
        Alert(
            "LLMEngineImbalance",
            f"{per_rank(waiting)} >= {num(floor)}\nand\n{per_rank(waiting)}\n>= {num(ratio)} * "
            + others_mean(waiting),
            "warning",
            summary,
            f"{RANK_TEXT} has {VALUE_NUMBER} requests waiting on average over {RATE} "
            f"(threshold: {num(ratio)}x the mean of the model's other ranks, and at least "
            f"{num(floor)}): requests are not spread evenly over the ranks.",
            "10m",
            # Two rules of one name need a label apart (promtool: one series, two rules).
            {"signal": "waiting"},
        ),
        Alert(
            "LLMEngineImbalance",
            f"{per_rank(kv)}\n>= {num(gap)} + " + others_mean(kv),
            "warning",
            summary,
            f"{RANK_TEXT} has its KV cache {VALUE_PERCENT} used on average over {RATE} "
            f"(threshold: {num(gap * 100)} percentage points over the mean of the model's "
            "other ranks).",
            "10m",
            {"signal": "kv_cache"},
        ),
    ]


def engine_alerts(config: Config) -> list[Alert]:
    up = metrics.ENGINE_UP.name
    # engine_target is the label probes carry for the engine they hit (see exporter/metrics/), so
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
    queue_share = config.alerting.queue_share_ratio
    ttft_slo, tpot_slo = config.slo.ttft_p95_seconds, config.slo.tpot_p95_seconds
    kv_full = config.alerting.kv_cache_usage_ratio
    ttft_p95 = names.ENGINE_TTFT.p95
    itl_p95 = names.ENGINE_ITL.p95
    kv = metrics.ENGINE_KV_CACHE_USAGE.name
    alerts += [
        Alert(
            "LLMEngineCapacityBound",
            f"{names.ENGINE_QUEUE_SHARE} > {num(queue_share)}",
            "warning",
            "Requests wait in the engine queue: the engine is capacity-bound.",
            f"{MODEL_TEXT} spends {VALUE_PERCENT} of request time queued before "
            f"prefill over {RATE} (threshold {pct(queue_share)}).",
            "10m",
        ),
        Alert(
            "LLMEngineComputeBound",
            f"{names.ENGINE_INFERENCE_SHARE} > {num(1 - queue_share)}\n"
            f"and on ({MODEL.by})\n"
            + paren(f"{ttft_p95} > {num(ttft_slo)}", "or",
                    f"{itl_p95} > {num(tpot_slo)}"),
            "warning",
            "Engine latency is over the SLO with little queueing: the engine is "
            "compute-bound.",
            f"{MODEL_TEXT} spends {VALUE_PERCENT} of request time in prefill and decode "
            f"(threshold {pct(1 - queue_share)}) while its P95 TTFT is over "
            f"{human_seconds(ttft_slo)} or its P95 inter-token latency over "
            f"{human_seconds(tpot_slo)}.",
            "10m",
        ),
        Alert(
            "LLMEngineKVCacheSaturated",
            # Its fullest over the window, as the chain reads it: a preempting cache frees
            # blocks as it preempts, so the instant value can read below full.
            f"max by ({MODEL.by}) (max_over_time({kv}[{RATE}])) > {num(kv_full)}\n"
            f"and on ({MODEL.by})\n"
            f"{rate_sum(MODEL, metrics.ENGINE_PREEMPTIONS.name)} > 0",
            "warning",
            "The engine's KV cache is full and requests are being preempted.",
            f"{MODEL_TEXT} KV cache is {VALUE_PERCENT} full (threshold "
            f"{pct(kv_full)}) and the scheduler is preempting requests.",
            "5m",
        ),
        *imbalance_alerts(config),
        *budget_alerts(config),
        *drift_alerts(config),
    ]
    return alerts


def budget_alerts(config: Config) -> list[Alert]:
    """Parts of the first token beyond queue and prefill over their share of the TTFT SLO,
    per request: the engine's API server before it queues (end to end less queue, prefill
    and decode, all counted when a request finishes), and the KV handover from a prefill
    instance. The chain's engine/frontend and engine/kv_transfer, on the same lines."""
    a, ttft_slo = config.alerting, config.slo.ttft_p95_seconds
    e2e = metrics.ENGINE_E2E.name
    parts = (metrics.ENGINE_QUEUE_TIME, metrics.ENGINE_PREFILL_TIME, metrics.ENGINE_DECODE_TIME)
    outside = paren(rate_sum(MODEL, f"{e2e}_sum"),
                    *(f"- {rate_sum(MODEL, f'{f.name}_sum')}" for f in parts))
    transfer = metrics.ENGINE_KV_TRANSFER_TIME.name
    return [
        Alert(
            "LLMEngineFrontendBound",
            f"{ratio(outside, rate_sum(MODEL, f'{e2e}_count'))}\n"
            f"> {num(a.frontend_share_ratio * ttft_slo)}",
            "warning",
            "The engine's API server holds requests before the engine queues them.",
            f"{MODEL_TEXT} requests spend {VALUE_SECONDS} each in the API server (tokenizing, "
            f"templating) before the engine queues them, over {RATE} (threshold "
            f"{human_seconds(a.frontend_share_ratio * ttft_slo)}: "
            f"{pct(a.frontend_share_ratio)} of the TTFT SLO).",
            "10m",
        ),
        Alert(
            "LLMEngineKVTransferSlow",
            f"{ratio(rate_sum(MODEL, f'{transfer}_sum'), rate_sum(MODEL, f'{transfer}_count'))}"
            f"\n> {num(a.kv_transfer_share_ratio * ttft_slo)}",
            "warning",
            "The KV handover from the prefill instances is slow.",
            f"{MODEL_TEXT} waits {VALUE_SECONDS} per request for its KV from a prefill "
            f"instance over {RATE} (threshold "
            f"{human_seconds(a.kv_transfer_share_ratio * ttft_slo)}: "
            f"{pct(a.kv_transfer_share_ratio)} of the TTFT SLO).",
            "10m",
        ),
    ]


def drift_alerts(config: Config) -> list[Alert]:
    """The engine against its own off-peak history before the diagnosis window, read as the
    chain reads it (exporter/diagnosis/promqueries.py), on the chain's lines: a prefix cache
    that stopped hitting while prefill per request grew (engine/prefix_cache_miss), and
    speculative drafts accepted less (engine/spec_decode). Neither fires before
    ``diagnosis.min_baseline`` of off-peak history stands behind it."""
    dg = config.diagnosis
    w = Ranges.of(dg.window, config)
    drift = num(dg.drift_ratio)

    # Over the diagnosis window, not RATE: the statistic is the chain's, and a baseline
    # phase inside a 5m rate would hide a change younger than that.
    def now(part: str, whole: str) -> str:
        return paren(ratio(rate_sum(MODEL, part, w.range), rate_sum(MODEL, whole, w.range)))

    def before(part: str, whole: str) -> str:
        return paren(ratio(offpeak(MODEL.labels, part, w), offpeak(MODEL.labels, whole, w)))

    def history(presence: str) -> str:
        kind = WindowKey(MODEL.name, MODEL.labels, presence)
        return f"{coverage(kind, w)} >= {num(dg.min_baseline)}"

    hits, queries = metrics.ENGINE_PREFIX_CACHE_HITS.name, metrics.ENGINE_PREFIX_CACHE_QUERIES.name
    prefill = metrics.ENGINE_PREFILL_TIME.name
    accepted, drafted = (metrics.ENGINE_SPEC_ACCEPTED_TOKENS.name,
                         metrics.ENGINE_SPEC_DRAFT_TOKENS.name)
    return [
        Alert(
            "LLMEnginePrefixCacheMiss",
            f"{now(hits, queries)}\n< {before(hits, queries)} / {drift}\n"
            f"and\n{before(hits, queries)} >= {num(dg.prefix_hit_min)}\n"
            f"and\n{now(f'{prefill}_sum', f'{prefill}_count')}\n"
            f"> {drift} * {before(f'{prefill}_sum', f'{prefill}_count')}\n"
            f"and\n{history(hits)}",
            "warning",
            "The engine's prefix cache stopped hitting and prefill per request grew.",
            f"{MODEL_TEXT} prefix cache hits {VALUE_PERCENT} of prompt tokens over the last "
            f"{w.range} (threshold: 1/{drift} of its off-peak hit ratio before them, itself "
            f"at least {pct(dg.prefix_hit_min)}) while prefill per request grew over {drift}x: "
            "something unique now heads the shared prompts.",
            "10m",
        ),
        Alert(
            "LLMEngineSpecDecodeAcceptance",
            f"{now(accepted, drafted)}\n< {before(accepted, drafted)} / {drift}\n"
            f"and\n{before(accepted, drafted)} >= {num(dg.spec_acceptance_min)}\n"
            f"and\n{history(drafted)}",
            "warning",
            "Speculative decoding's draft tokens are accepted far less than usual.",
            f"{MODEL_TEXT} accepts {VALUE_PERCENT} of its draft tokens over the last "
            f"{w.range} (threshold: 1/{drift} of its acceptance off-peak before them, itself at "
            f"least {pct(dg.spec_acceptance_min)}): each step yields fewer tokens.",
            "10m",
        ),
    ]
