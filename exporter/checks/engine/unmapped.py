"""Engine families the exporter deliberately does not normalize, with the reason for each.

Together with the rows of ``table.py`` these account for every family of a recorded real
exposition (vLLM 0.32.0: tests/fixtures/engines/vllm-0.32.0-cpu-metrics.txt). The real-vLLM
tests fail on a live family that is in neither list, so a family a new vLLM adds is noticed
and either mapped or listed here. The simulator renders these too (zeros, the engine's
pre-created label values), so its family set equals the real one. docs/metrics.md carries
``markdown()`` of this list, kept equal by a test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.docblock import DocBlock
from exporter.metrics import Kind


@dataclass(frozen=True)
class Unmapped:
    """One source family left out, as the engine exposes it."""

    engine: str
    #: As in the TYPE line (counters with ``_total``; histograms without sample suffixes).
    name: str
    kind: Kind
    #: Label names besides ``le``, in exposition order.
    labels: tuple[str, ...]
    why: str
    #: Label values the engine pre-creates (one series each), where it does.
    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: What the engine must run with to serve it at all (table.FEATURES); "" for always.
    feature: str = ""


_ME = ("engine", "model_name")
#: vllm:cache_config_info's labels in 0.32.0: CacheConfig.metrics_info() plus `engine`.
VLLM_CACHE_CONFIG_LABELS = (
    "_block_size_resolved", "block_size", "cache_dtype", "cache_hit_alignment_tokens",
    "effective_attention_block_size", "enable_mamba_shared_prefix_checkpoint",
    "enable_prefix_caching", "engine", "gpu_memory_utilization", "hash_block_size",
    "is_attention_free", "kv_cache_dtype_skip_layers", "kv_cache_layout",
    "kv_cache_max_concurrency", "kv_cache_memory_bytes", "kv_cache_size_tokens",
    "kv_offloading_backend", "kv_offloading_size", "kv_sharing_fast_prefill",
    "mamba_block_size", "mamba_cache_dtype", "mamba_cache_mode", "mamba_page_size_padded",
    "mamba_ssm_cache_dtype", "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override",
    "prefix_cache_retention_interval", "prefix_caching_hash_algo", "prefix_match_unit",
    "replayssm_buffer_len", "skip_page_size_padded", "sliding_window", "swa_bounded_replay",
    "use_kda_recoverssm", "use_replayssm", "user_specified_block_size",
)

C, G, H = Kind.COUNTER, Kind.GAUGE, Kind.HISTOGRAM

UNMAPPED: tuple[Unmapped, ...] = (
    Unmapped("vllm", "vllm:engine_sleep_state", G, (*_ME, "sleep_state"),
             "sleep mode is an operator action, not serving latency",
             {"sleep_state": ("awake", "weights_offloaded", "discard_all")}),
    Unmapped("vllm", "vllm:cache_config_info", G, VLLM_CACHE_CONFIG_LABELS,
             "configuration, not a measurement; its label set changes between releases"),
    Unmapped("vllm", "vllm:external_prefix_cache_queries_total", C, _ME,
             "KV-connector (cross-instance) cache; 0 without a connector"),
    Unmapped("vllm", "vllm:external_prefix_cache_hits_total", C, _ME,
             "KV-connector (cross-instance) cache; 0 without a connector"),
    Unmapped("vllm", "vllm:mm_cache_queries_total", C, _ME,
             "multimodal input cache, counted in items, not tokens"),
    Unmapped("vllm", "vllm:mm_cache_hits_total", C, _ME,
             "multimodal input cache, counted in items, not tokens"),
    Unmapped("vllm", "vllm:prompt_tokens_cached_by_source_total", C, (*_ME, "source"),
             "a cache-tier split of vllm:prompt_tokens_cached_total (mapped); only "
             "`device` is non-zero without KV offloading",
             {"source": ("device", "host", "p2p", "disk", "external_unspecified")}),
    Unmapped("vllm", "vllm:request_time_per_output_token_seconds", H, _ME,
             "per-request mean TPOT; the per-event vllm:inter_token_latency_seconds is "
             "mapped, and the probes measure TPOT from the client"),
    Unmapped("vllm", "vllm:request_max_num_generation_tokens", H, _ME,
             "a request parameter, not what happened"),
    Unmapped("vllm", "vllm:request_params_n", H, _ME, "a request parameter, not what happened"),
    Unmapped("vllm", "vllm:request_params_max_tokens", H, _ME,
             "a request parameter, not what happened"),
    Unmapped("vllm", "vllm:request_num_preemptions", H, _ME,
             "per-request preemption counts; vllm:num_preemptions_total is mapped"),
    Unmapped("vllm", "vllm:request_prefill_kv_computed_tokens", H, _ME,
             "prompt tokens minus cached ones per request; vllm:prompt_tokens_by_source_total "
             "(mapped) has the same split as counters"),
)

del C, G, H

#: Exposition formats whose unmapped families are listed (recorded from a real server).
LISTED_FORMATS = ("vllm",)


def unmapped_for(fmt: str) -> list[Unmapped]:
    """The unmapped families the simulator renders for one exposition format."""
    return [u for u in UNMAPPED if u.engine == fmt] if fmt in LISTED_FORMATS else []


def markdown() -> str:
    """The list for docs/metrics.md (regenerate: ``python -m exporter.checks.engine.unmapped``)."""
    lines = ["| Engine | Source family | Type | Why it is not mapped |", "|---|---|---|---|"]
    for u in UNMAPPED:
        lines.append(f"| {u.engine} | `{u.name}` | {u.kind.value} | {u.why} |")
    return "\n".join(lines) + "\n"


DOC = DocBlock("engine-unmapped", "exporter.checks.engine.unmapped", markdown)
DOC_BEGIN, DOC_END = DOC.begin, DOC.end
replace_doc_block = DOC.replace


if __name__ == "__main__":
    DOC.main()
