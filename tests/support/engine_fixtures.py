"""Engine fixture files and an oracle for what the engine check must expose from them.

The fixtures are the in-repo copies in tests/fixtures/engines/ (provenance in its README.md).
The oracle reads them with prometheus_client's own parser and maps them with the table below,
written out by hand from the engine research notes (the sources the fixtures' README names)
rather than taken from exporter/checks/engine/table.py, so a wrong row in the real table makes
the comparison fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tests.support import FIXTURES
from tests.support.samples import SampleKey, key

ENGINE_FIXTURES = FIXTURES / "engines"


def vllm_fixture() -> str:
    """The vLLM sample with the docs' "..." elision lines removed (they are not exposition).

    The `cache_config_info` line whose labels the docs cut short with ",..." stays: it is
    invalid, but belongs to a family the exporter does not read.
    """
    text = (ENGINE_FIXTURES / "vllm-v1-metrics.txt").read_text()
    return "\n".join(line for line in text.splitlines() if line.strip() != "...") + "\n"


def triton_fixture_blocks() -> dict[str, str]:
    """Block A (older tensorrtllm_backend README) and block B (newer), as separate scrapes."""
    text = (ENGINE_FIXTURES / "trtllm-triton-metrics.txt").read_text()
    a, b = text.split("# ---- block B", 1)
    return {"A": a, "B": "# ---- block B" + b}


@dataclass(frozen=True)
class Rule:
    """Source sample name -> normalized sample name, for series matching ``match``."""

    source: str
    target: str
    match: dict[str, str] = field(default_factory=dict)
    scale: float = 1.0


def _hist(source: str, target: str) -> list[Rule]:
    return [Rule(source + s, target + s) for s in ("_bucket", "_count", "_sum")]


ORACLE: dict[str, list[Rule]] = {
    "vllm": [
        Rule("vllm:num_requests_running", "llm_engine_requests_running"),
        Rule("vllm:num_requests_waiting", "llm_engine_requests_waiting"),
        Rule("vllm:kv_cache_usage_perc", "llm_engine_kv_cache_usage_ratio"),
        Rule("vllm:generation_tokens_total", "llm_engine_generation_tokens_total"),
        Rule("vllm:prompt_tokens_total", "llm_engine_prompt_tokens_total"),
        Rule("vllm:request_success_total", "llm_engine_requests_finished_total"),
        *_hist("vllm:time_to_first_token_seconds", "llm_engine_time_to_first_token_seconds"),
        *_hist("vllm:e2e_request_latency_seconds", "llm_engine_e2e_request_latency_seconds"),
        *_hist("vllm:iteration_tokens_total", "llm_engine_step_tokens"),
        # Families of vLLM 0.32 (vllm-0.32.0-cpu-metrics.txt).
        Rule("vllm:num_requests_waiting_by_reason", "llm_engine_requests_waiting_by_reason"),
        # Its API server's own process collector.
        Rule("process_cpu_seconds_total", "llm_engine_process_cpu_seconds_total"),
        Rule("vllm:prefix_cache_queries_total", "llm_engine_prefix_cache_queries_total"),
        Rule("vllm:prefix_cache_hits_total", "llm_engine_prefix_cache_hits_total"),
        Rule("vllm:num_preemptions_total", "llm_engine_preemptions_total"),
        Rule("vllm:prompt_tokens_cached_total", "llm_engine_prompt_tokens_cached_total"),
        Rule("vllm:prompt_tokens_by_source_total", "llm_engine_prompt_tokens_by_source_total"),
        Rule("vllm:admission_rejections_total", "llm_engine_admission_rejections_total"),
        Rule("vllm:estimated_read_bytes_per_gpu_total",
             "llm_engine_estimated_read_bytes_per_gpu_total"),
        Rule("vllm:estimated_write_bytes_per_gpu_total",
             "llm_engine_estimated_write_bytes_per_gpu_total"),
        Rule("vllm:estimated_flops_per_gpu_total", "llm_engine_estimated_flops_per_gpu_total"),
        *_hist("vllm:inter_token_latency_seconds", "llm_engine_inter_token_latency_seconds"),
        *_hist("vllm:request_queue_time_seconds", "llm_engine_queue_time_seconds"),
        *_hist("vllm:request_prefill_time_seconds", "llm_engine_prefill_time_seconds"),
        *_hist("vllm:request_decode_time_seconds", "llm_engine_decode_time_seconds"),
        *_hist("vllm:request_inference_time_seconds", "llm_engine_inference_time_seconds"),
        *_hist("vllm:request_prompt_tokens", "llm_engine_request_prompt_tokens"),
        *_hist("vllm:request_generation_tokens", "llm_engine_request_generation_tokens"),
    ],
    "triton": [
        Rule("nv_trt_llm_request_metrics", "llm_engine_requests_running",
             {"request_type": "scheduled"}),
        Rule("nv_trt_llm_request_metrics", "llm_engine_requests_waiting",
             {"request_type": "waiting"}),
        Rule("nv_trt_llm_kv_cache_block_metrics", "llm_engine_kv_cache_usage_ratio",
             {"kv_cache_block_type": "fraction"}),
        Rule("nv_inference_queue_duration_us", "llm_engine_queue_duration_seconds_total",
             scale=1e-6),
        Rule("nv_inference_request_duration_us", "llm_engine_request_duration_seconds_total",
             scale=1e-6),
        Rule("nv_inference_compute_infer_duration_us",
             "llm_engine_compute_duration_seconds_total", scale=1e-6),
        Rule("nv_inference_request_success", "llm_engine_requests_succeeded_total"),
        Rule("nv_inference_request_failure", "llm_engine_requests_failed_total"),
    ],
}
LABELS = {
    "vllm": {"model_name": "model", "engine": "dp_rank", "finished_reason": "finished_reason",
             "reason": "reason", "source": "source"},
    "triton": {"model": "model"},
}


def expected_samples(exposition: str, engine: str, target: str) -> dict[SampleKey, float]:
    """What /metrics must show for ``exposition`` scraped as ``target``."""
    out: dict[SampleKey, float] = {}
    rename = LABELS[engine]
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            for rule in ORACLE[engine]:
                name = sample.name
                if family.type == "counter" and not rule.source.endswith("_total"):
                    # prometheus_client's parser appends _total to Triton's bare counters.
                    name = name.removesuffix("_total")
                if name != rule.source:
                    continue
                if any(sample.labels.get(k) != v for k, v in rule.match.items()):
                    continue
                labels = {"target": target, "engine": engine, "model": "", "dp_rank": ""}
                for src, norm in rename.items():
                    if src in sample.labels:
                        labels[norm] = sample.labels[src]
                if "le" in sample.labels:
                    labels["le"] = sample.labels["le"]
                value = sample.value
                if rule.scale != 1.0:
                    value = value / round(1 / rule.scale)
                out[key(rule.target, labels)] = value
    return out


def assert_same(exposed: dict[SampleKey, float], expected: dict[SampleKey, float]) -> None:
    """Equal bucket by bucket; the only extra samples allowed are a +Inf bucket restored
    from ``_count`` where the source had none."""
    assert expected, "the oracle found nothing to compare"
    for k, want in expected.items():
        assert k in exposed, f"missing {k}"
        got = exposed[k]
        if math.isnan(want):
            assert math.isnan(got), k
        else:
            assert got == want or math.isclose(got, want, rel_tol=1e-12), (k, got, want)
    for k, got in exposed.items():
        if k in expected:
            continue
        name, labels, le = k
        assert name.endswith("_bucket") and le == math.inf, f"unexpected sample {k}"
        count_key = (name.removesuffix("_bucket") + "_count", labels, None)
        assert expected.get(count_key) == got, f"+Inf bucket {got} != source _count"
