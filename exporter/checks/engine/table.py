"""THE engine mapping table: which source family of which engine feeds which normalized family.

One row per (engine, source family). The parser (``parse.py``) reads every row of an engine,
old and new names alike; the simulator renders one exposition format from
``sources_for(format)`` by inverting the rows (value / scale, labels renamed back, ``match``
labels added). docs/metrics.md carries ``markdown()`` of this table, kept equal by a test.

Sources: the engines' own code and docs (vLLM vllm/v1/metrics/loggers.py, SGLang collector.py,
TensorRT-LLM tensorrt_llm/metrics/collector.py, tensorrtllm_backend README) and the verbatim
samples in tests/fixtures/engines/ (provenance in its README.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter import metrics
from exporter.docblock import DocBlock
from exporter.metrics import Family, Kind

#: Engine families the check detects and normalizes.
ENGINES = ("vllm", "trtllm", "triton", "sglang")
#: Exposition formats ``sources_for`` renders: each engine's current names, plus vLLM's
#: names from before the 0.9 / 0.11 renames.
FORMATS = ("vllm", "vllm-legacy", "trtllm", "triton", "sglang")

#: Name prefixes that identify an engine family in an exposition, in detection order.
PREFIXES: Mapping[str, tuple[str, ...]] = {
    "vllm": ("vllm:",),
    "sglang": ("sglang:", "sglang_"),
    "trtllm": ("trtllm_",),
    "triton": ("nv_trt_llm_", "nv_inference_"),
}

#: Alternative spellings accepted when parsing (never rendered): some SGLang builds and
#: gateways re-export `sglang:x` as `sglang_x` (reference §3.5, unresolved upstream).
ALIASES: Mapping[str, tuple[tuple[str, str], ...]] = {
    "sglang": (("sglang:", "sglang_"),),
}


@dataclass(frozen=True)
class Source:
    """One source family of one engine and how it becomes a normalized family."""

    engine: str
    #: The family as exposed; counters with their sample suffix (vLLM ``..._total``; Triton
    #: counters have none), histograms without ``_bucket``/``_sum``/``_count``.
    name: str
    kind: Kind
    target: Family
    #: Multiply a source value (histograms: ``le`` bounds and ``_sum``) by this to get the
    #: normalized value in base units; bucket counts and ``_count`` are never scaled.
    scale: float = 1.0
    #: Source label -> normalized label. Source labels not named here are dropped; series
    #: that then coincide are summed (counters, histograms) or maxed (gauges).
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Fixed source label values that select the series (Triton's per-type gauges).
    match: Mapping[str, str] = field(default_factory=dict)
    #: A name the engine replaced; read when present, but the current name wins per series
    #: when an engine exposes both (vLLM 0.9.2-0.11 did, with equal values).
    legacy: bool = False
    note: str = ""
    #: What the engine must run with to serve it at all (``FEATURES``); "" for always.
    feature: str = ""


#: Engine features some families exist only with.
SPECULATIVE, PD = "speculative decoding", "P/D (a KV connector)"
FEATURES = (SPECULATIVE, PD)

_VLLM = {"model_name": "model", "engine": "dp_rank"}
_VLLM_REASON = {**_VLLM, "finished_reason": "finished_reason"}
_VLLM_WAIT = {**_VLLM, "reason": "reason"}
_VLLM_SOURCE = {**_VLLM, "source": "source"}
#: vLLM counts admission rejections in the API server, before any engine: no `engine` label.
_VLLM_API = {"model_name": "model", "reason": "reason"}
_TRTLLM = {"model_name": "model"}
_TRTLLM_REASON = {**_TRTLLM, "finished_reason": "finished_reason"}
_SGLANG = {"model_name": "model", "dp_rank": "dp_rank"}
_TRITON = {"model": "model"}
_US = 1e-6

C, G, H = Kind.COUNTER, Kind.GAUGE, Kind.HISTOGRAM
m = metrics

SOURCES: tuple[Source, ...] = (
    # --- vLLM (V1), labels model_name, engine (the DP index) ------------------------------
    Source("vllm", "vllm:num_requests_running", G, m.ENGINE_REQUESTS_RUNNING, labels=_VLLM),
    Source("vllm", "vllm:num_requests_waiting", G, m.ENGINE_REQUESTS_WAITING, labels=_VLLM),
    Source("vllm", "vllm:kv_cache_usage_perc", G, m.ENGINE_KV_CACHE_USAGE, labels=_VLLM,
           note="a 0-1 fraction despite the name; since 0.9.2"),
    Source("vllm", "vllm:gpu_cache_usage_perc", G, m.ENGINE_KV_CACHE_USAGE, labels=_VLLM,
           legacy=True, note="until 0.11"),
    Source("vllm", "vllm:time_to_first_token_seconds", H, m.ENGINE_TTFT, labels=_VLLM),
    Source("vllm", "vllm:inter_token_latency_seconds", H, m.ENGINE_ITL, labels=_VLLM,
           note="since 0.11"),
    Source("vllm", "vllm:time_per_output_token_seconds", H, m.ENGINE_ITL, labels=_VLLM,
           legacy=True, note="until 0.12; per output event, like its successor"),
    Source("vllm", "vllm:e2e_request_latency_seconds", H, m.ENGINE_E2E, labels=_VLLM),
    Source("vllm", "vllm:request_queue_time_seconds", H, m.ENGINE_QUEUE_TIME, labels=_VLLM),
    Source("vllm", "vllm:request_prefill_time_seconds", H, m.ENGINE_PREFILL_TIME,
           labels=_VLLM),
    Source("vllm", "vllm:request_decode_time_seconds", H, m.ENGINE_DECODE_TIME, labels=_VLLM),
    Source("vllm", "vllm:prompt_tokens_total", C, m.ENGINE_PROMPT_TOKENS, labels=_VLLM,
           note="includes prefix-cache hits"),
    Source("vllm", "vllm:generation_tokens_total", C, m.ENGINE_GENERATION_TOKENS,
           labels=_VLLM),
    Source("vllm", "vllm:prefix_cache_queries_total", C, m.ENGINE_PREFIX_CACHE_QUERIES,
           labels=_VLLM, note="tokens; since 0.9.2"),
    Source("vllm", "vllm:gpu_prefix_cache_queries_total", C, m.ENGINE_PREFIX_CACHE_QUERIES,
           labels=_VLLM, legacy=True, note="until 0.11; blocks, not tokens, in 0.8"),
    Source("vllm", "vllm:prefix_cache_hits_total", C, m.ENGINE_PREFIX_CACHE_HITS,
           labels=_VLLM, note="tokens; since 0.9.2"),
    Source("vllm", "vllm:gpu_prefix_cache_hits_total", C, m.ENGINE_PREFIX_CACHE_HITS,
           labels=_VLLM, legacy=True, note="until 0.11; blocks, not tokens, in 0.8"),
    Source("vllm", "vllm:num_preemptions_total", C, m.ENGINE_PREEMPTIONS, labels=_VLLM),
    Source("vllm", "vllm:request_success_total", C, m.ENGINE_REQUESTS_FINISHED,
           labels=_VLLM_REASON, note="`repetition` since 0.30"),
    Source("vllm", "vllm:request_inference_time_seconds", H, m.ENGINE_INFERENCE_TIME,
           labels=_VLLM),
    Source("vllm", "vllm:request_prompt_tokens", H, m.ENGINE_REQUEST_PROMPT_TOKENS,
           labels=_VLLM),
    Source("vllm", "vllm:request_generation_tokens", H, m.ENGINE_REQUEST_GENERATION_TOKENS,
           labels=_VLLM),
    Source("vllm", "vllm:iteration_tokens_total", H, m.ENGINE_STEP_TOKENS, labels=_VLLM,
           note="a histogram despite the `_total`"),
    Source("vllm", "vllm:num_requests_waiting_by_reason", G,
           m.ENGINE_REQUESTS_WAITING_BY_REASON, labels=_VLLM_WAIT),
    Source("vllm", "vllm:prompt_tokens_cached_total", C, m.ENGINE_PROMPT_TOKENS_CACHED,
           labels=_VLLM),
    Source("vllm", "vllm:prompt_tokens_by_source_total", C, m.ENGINE_PROMPT_TOKENS_BY_SOURCE,
           labels=_VLLM_SOURCE),
    Source("vllm", "vllm:admission_rejections_total", C, m.ENGINE_ADMISSION_REJECTIONS,
           labels=_VLLM_API, note="per API server, no `engine` label"),
    Source("vllm", "vllm:estimated_read_bytes_per_gpu_total", C, m.ENGINE_ESTIMATED_READ_BYTES,
           labels=_VLLM),
    Source("vllm", "vllm:estimated_write_bytes_per_gpu_total", C,
           m.ENGINE_ESTIMATED_WRITE_BYTES, labels=_VLLM),
    Source("vllm", "vllm:estimated_flops_per_gpu_total", C, m.ENGINE_ESTIMATED_FLOPS,
           labels=_VLLM),
    # The API server's own process collector (prometheus_client's, on the same /metrics):
    # one process per API server, hence no model or engine label.
    Source("vllm", "process_cpu_seconds_total", C, m.ENGINE_PROCESS_CPU,
           note="the API server process; no `vllm:` prefix"),
    Source("vllm", "vllm:spec_decode_num_drafts_total", C, m.ENGINE_SPEC_DRAFTS, labels=_VLLM,
           feature=SPECULATIVE),
    Source("vllm", "vllm:spec_decode_num_draft_tokens_total", C, m.ENGINE_SPEC_DRAFT_TOKENS,
           labels=_VLLM, feature=SPECULATIVE),
    Source("vllm", "vllm:spec_decode_num_accepted_tokens_total", C,
           m.ENGINE_SPEC_ACCEPTED_TOKENS, labels=_VLLM, feature=SPECULATIVE),
    Source("vllm", "vllm:nixl_xfer_time_seconds", H, m.ENGINE_KV_TRANSFER_TIME, labels=_VLLM,
           feature=PD, note="the NIXL connector's"),
    # --- trtllm-serve /prometheus/metrics (collector.py, adapted from vLLM 0.10) ---------
    Source("trtllm", "trtllm_num_requests_running", G, m.ENGINE_REQUESTS_RUNNING,
           labels=_TRTLLM, note="needs enable_iter_perf_stats"),
    Source("trtllm", "trtllm_num_requests_waiting", G, m.ENGINE_REQUESTS_WAITING,
           labels=_TRTLLM, note="needs enable_iter_perf_stats"),
    Source("trtllm", "trtllm_kv_cache_utilization", G, m.ENGINE_KV_CACHE_USAGE,
           labels=_TRTLLM, note="needs enable_iter_perf_stats"),
    Source("trtllm", "trtllm_time_to_first_token_seconds", H, m.ENGINE_TTFT, labels=_TRTLLM,
           note="needs return_perf_metrics"),
    Source("trtllm", "trtllm_time_per_output_token_seconds", H, m.ENGINE_ITL, labels=_TRTLLM),
    Source("trtllm", "trtllm_e2e_request_latency_seconds", H, m.ENGINE_E2E, labels=_TRTLLM),
    Source("trtllm", "trtllm_request_queue_time_seconds", H, m.ENGINE_QUEUE_TIME,
           labels=_TRTLLM),
    Source("trtllm", "trtllm_request_prefill_time_seconds", H, m.ENGINE_PREFILL_TIME,
           labels=_TRTLLM),
    Source("trtllm", "trtllm_request_decode_time_seconds", H, m.ENGINE_DECODE_TIME,
           labels=_TRTLLM),
    Source("trtllm", "trtllm_prompt_tokens_total", C, m.ENGINE_PROMPT_TOKENS, labels=_TRTLLM),
    Source("trtllm", "trtllm_generation_tokens_total", C, m.ENGINE_GENERATION_TOKENS,
           labels=_TRTLLM),
    Source("trtllm", "trtllm_prompt_cached_tokens_total", C, m.ENGINE_PREFIX_CACHE_HITS,
           labels=_TRTLLM),
    Source("trtllm", "trtllm_request_success_total", C, m.ENGINE_REQUESTS_FINISHED,
           labels=_TRTLLM_REASON),
    Source("trtllm", "trtllm_request_inference_time_seconds", H, m.ENGINE_INFERENCE_TIME,
           labels=_TRTLLM, note="needs return_perf_metrics"),
    # --- Triton + tensorrtllm_backend (:8002), labels model, version (model version) ------
    Source("triton", "nv_trt_llm_request_metrics", G, m.ENGINE_REQUESTS_RUNNING,
           labels=_TRITON, match={"request_type": "scheduled"}),
    Source("triton", "nv_trt_llm_request_metrics", G, m.ENGINE_REQUESTS_WAITING,
           labels=_TRITON, match={"request_type": "waiting"}, note="newer backends only"),
    Source("triton", "nv_trt_llm_kv_cache_block_metrics", G, m.ENGINE_KV_CACHE_USAGE,
           labels=_TRITON, match={"kv_cache_block_type": "fraction"},
           note="newer backends only"),
    Source("triton", "nv_inference_queue_duration_us", C, m.ENGINE_QUEUE_DURATION,
           scale=_US, labels=_TRITON, note="Triton 23.12+"),
    Source("triton", "nv_inference_request_duration_us", C, m.ENGINE_REQUEST_DURATION,
           scale=_US, labels=_TRITON, note="Triton 23.12+"),
    Source("triton", "nv_inference_compute_infer_duration_us", C, m.ENGINE_COMPUTE_DURATION,
           scale=_US, labels=_TRITON, note="Triton 23.12+"),
    Source("triton", "nv_inference_request_success", C, m.ENGINE_REQUESTS_SUCCEEDED,
           labels=_TRITON, note="Triton 23.12+"),
    Source("triton", "nv_inference_request_failure", C, m.ENGINE_REQUESTS_FAILED,
           labels=_TRITON, note="Triton 23.12+; summed over `reason` where present"),
    # --- SGLang, labels model_name (+ dp_rank; tp/pp/ep ranks dropped) --------------------
    Source("sglang", "sglang:num_running_reqs", G, m.ENGINE_REQUESTS_RUNNING, labels=_SGLANG),
    Source("sglang", "sglang:num_queue_reqs", G, m.ENGINE_REQUESTS_WAITING, labels=_SGLANG),
    Source("sglang", "sglang:token_usage", G, m.ENGINE_KV_CACHE_USAGE, labels=_SGLANG,
           note="fraction of the KV token pool"),
    Source("sglang", "sglang:time_to_first_token_seconds", H, m.ENGINE_TTFT, labels=_SGLANG),
    Source("sglang", "sglang:inter_token_latency_seconds", H, m.ENGINE_ITL, labels=_SGLANG),
    Source("sglang", "sglang:time_per_output_token_seconds", H, m.ENGINE_ITL, labels=_SGLANG,
           legacy=True, note="older releases"),
    Source("sglang", "sglang:e2e_request_latency_seconds", H, m.ENGINE_E2E, labels=_SGLANG),
    Source("sglang", "sglang:queue_time_seconds", H, m.ENGINE_QUEUE_TIME, labels=_SGLANG),
    Source("sglang", "sglang:prompt_tokens_total", C, m.ENGINE_PROMPT_TOKENS, labels=_SGLANG),
    Source("sglang", "sglang:generation_tokens_total", C, m.ENGINE_GENERATION_TOKENS,
           labels=_SGLANG),
    Source("sglang", "sglang:cached_tokens_total", C, m.ENGINE_PREFIX_CACHE_HITS,
           labels=_SGLANG, note="summed over `cache_source`"),
    Source("sglang", "sglang:num_retracted_requests_total", C, m.ENGINE_PREEMPTIONS,
           labels=_SGLANG),
    Source("sglang", "sglang:num_requests_total", C, m.ENGINE_REQUESTS_FINISHED,
           labels=_SGLANG, note="no finish reason"),
    Source("sglang", "sglang:prompt_tokens_histogram", H, m.ENGINE_REQUEST_PROMPT_TOKENS,
           labels=_SGLANG, note="needs --collect-tokens-histogram"),
    Source("sglang", "sglang:generation_tokens_histogram", H,
           m.ENGINE_REQUEST_GENERATION_TOKENS, labels=_SGLANG,
           note="needs --collect-tokens-histogram"),
)

del C, G, H, m


def rows_for_engine(engine: str) -> list[Source]:
    """Every row of ``engine``, legacy included: what the parser accepts."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine family {engine!r}; expected one of {ENGINES}")
    return [s for s in SOURCES if s.engine == engine]


def sources_for(family: str) -> list[Source]:
    """The rows that render one exposition format: exactly one per normalized family.

    ``"<engine>"`` gives the current names; ``"<engine>-legacy"`` gives the legacy name
    where one exists and the current name otherwise.
    """
    engine, _, suffix = family.partition("-")
    if suffix not in ("", "legacy") or engine not in ENGINES:
        raise ValueError(f"unknown exposition format {family!r}; expected one of {FORMATS}")
    rows = rows_for_engine(engine)
    if suffix == "":
        return [s for s in rows if not s.legacy]
    legacy_targets = {s.target.name for s in rows if s.legacy}
    return [s for s in rows if s.legacy or s.target.name not in legacy_targets]


def _conversion(src: Source) -> str:
    if src.scale == 1.0:
        return "as is"
    if src.scale == _US:
        return "÷ 1e6 (µs → s)"
    return f"times {src.scale:g}"


def _labels(src: Source) -> str:
    parts = [f"{k}→{v}" for k, v in src.labels.items()]
    parts += [f'{k}="{v}" only' for k, v in src.match.items()]
    return ", ".join(parts)


def markdown() -> str:
    """The table for docs/metrics.md (regenerate: ``python -m exporter.checks.engine.table``)."""
    lines = [
        "| Normalized family | Engine | Source family | Labels | Conversion | Notes |",
        "|---|---|---|---|---|---|",
    ]
    for src in SOURCES:
        notes = [src.note] if src.note else []
        if src.feature:
            notes.insert(0, f"only with {src.feature}")
        if src.legacy:
            notes.insert(0, "legacy name")
        for old, new in ALIASES.get(src.engine, ()):
            if src.name.startswith(old):
                notes.append(f"also read as `{new}{src.name[len(old):]}`")
        lines.append(
            f"| `{src.target.name}` | {src.engine} | `{src.name}` | {_labels(src)} "
            f"| {_conversion(src)} | {'; '.join(notes)} |"
        )
    return "\n".join(lines) + "\n"


DOC = DocBlock("engine-table", "exporter.checks.engine.table", markdown)
DOC_BEGIN, DOC_END = DOC.begin, DOC.end
replace_doc_block = DOC.replace


if __name__ == "__main__":
    DOC.main()
