"""The engines' families: one normalized schema over vLLM, trtllm-serve, Triton and SGLang.

One normalized schema over vLLM, trtllm-serve, Triton and SGLang; the source of each
family per engine is the data table in exporter/checks/engine/table.py. Data series carry
`engine` (the engine family, e.g. vllm), `model` (capped per target by max_models) and
`dp_rank` (data-parallel index; empty where the engine has none). Histograms have no
bucket list here: they pass the engine's own `le` bounds through unchanged.
"""

from __future__ import annotations

from exporter.metrics.schema import Kind, define

ENGINE_TARGET_LABELS = ("target",)
ENGINE_SERIES_LABELS = ("target", "engine", "model", "dp_rank")

ENGINE_UP = define(
    "llm_engine_up",
    Kind.GAUGE,
    "1 if the last scrape of the engine's metrics endpoint succeeded and was understood, "
    "else 0. While 0, the target's engine data series are absent.",
    ENGINE_TARGET_LABELS,
    section="engine",
)
ENGINE_SCRAPE_DURATION = define(
    "llm_engine_scrape_duration_seconds",
    Kind.GAUGE,
    "Wall-clock duration of the last scrape of the engine (request, read and parse), "
    "whatever its outcome.",
    ENGINE_TARGET_LABELS,
    section="engine",
)
#: Bounded values of ``reason`` on ENGINE_SCRAPE_ERRORS; pre-created at 0 per target.
ENGINE_SCRAPE_ERROR_REASONS = (
    "timeout",
    "connection",
    "http_4xx",
    "http_5xx",
    "http_status",
    "too_large",
    "not_prometheus",
    "malformed",
    "unrecognized",
    "redirect",
)
ENGINE_SCRAPE_ERRORS = define(
    "llm_engine_scrape_errors_total",
    Kind.COUNTER,
    "Failed engine scrapes by reason: timeout, connection (refused, reset, DNS, TLS), "
    "http_4xx, http_5xx, http_status (other non-2xx), too_large (body over the size cap), "
    "not_prometheus (HTML or JSON instead of the text format), malformed (a line of a mapped "
    "family does not parse, a series twice, le NaN, bucket counts that decrease), "
    "unrecognized (no known engine family in the exposition, or none of the configured "
    "type's), "
    "redirect (more redirects than a client follows: a loop).",
    ("target", "reason"),
    section="engine",
)
#: Bounded values of ``reason`` on ENGINE_DROPPED_SERIES: the label whose per-target cap
#: was full (model: max_models, dp_rank: max_dp_ranks, finished_reason/reason/source:
#: max_label_values), ``le`` (a histogram series with more than max_buckets bounds) or
#: ``series`` (the target's max_series was reached). Pre-created at 0 per target.
ENGINE_DROP_REASONS = ("model", "dp_rank", "finished_reason", "reason", "source", "le", "series")
ENGINE_DROPPED_SERIES = define(
    "llm_engine_dropped_series_total",
    Kind.COUNTER,
    "Engine series (sample lines of mapped families) left out by a cap, by reason: the "
    "label whose cap was full (" + ", ".join(ENGINE_DROP_REASONS[:5]) + "), le (more than "
    "max_buckets bounds in one histogram) or series (max_series reached); increased by the "
    "number dropped on every scrape.",
    ("target", "reason"),
    section="engine",
)
ENGINE_INFO = define(
    "llm_engine_info",
    Kind.GAUGE,
    "Always 1 while the target is up; `family` is the engine family (vllm, trtllm, triton, "
    "sglang) and `version` the engine version where the engine reports one, else empty.",
    ("target", "family", "version"),
    section="engine",
)
ENGINE_REQUESTS_RUNNING = define(
    "llm_engine_requests_running",
    Kind.GAUGE,
    "Requests in the engine's running batch at the last scrape.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUESTS_WAITING = define(
    "llm_engine_requests_waiting",
    Kind.GAUGE,
    "Requests queued in the engine, waiting to be scheduled, at the last scrape.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_KV_CACHE_USAGE = define(
    "llm_engine_kv_cache_usage_ratio",
    Kind.GAUGE,
    "Fraction (0..1) of the engine's KV-cache capacity in use at the last scrape.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_TTFT = define(
    "llm_engine_time_to_first_token_seconds",
    Kind.HISTOGRAM,
    "Engine-side time to first token per request, with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_ITL = define(
    "llm_engine_inter_token_latency_seconds",
    Kind.HISTOGRAM,
    "Engine-side time between consecutive output events (tokens) of a request, with the "
    "engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_E2E = define(
    "llm_engine_e2e_request_latency_seconds",
    Kind.HISTOGRAM,
    "Engine-side end-to-end latency of finished requests, with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_QUEUE_TIME = define(
    "llm_engine_queue_time_seconds",
    Kind.HISTOGRAM,
    "Time finished requests spent waiting in the engine queue before first being scheduled, "
    "with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PREFILL_TIME = define(
    "llm_engine_prefill_time_seconds",
    Kind.HISTOGRAM,
    "Time finished requests spent in prefill (scheduled to first token), with the engine's "
    "own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_DECODE_TIME = define(
    "llm_engine_decode_time_seconds",
    Kind.HISTOGRAM,
    "Time finished requests spent in decode (first to last token), with the engine's own "
    "buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PROMPT_TOKENS = define(
    "llm_engine_prompt_tokens_total",
    Kind.COUNTER,
    "Prompt (prefill) tokens processed, as the engine counts them.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_GENERATION_TOKENS = define(
    "llm_engine_generation_tokens_total",
    Kind.COUNTER,
    "Generated (decode) tokens.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PREFIX_CACHE_QUERIES = define(
    "llm_engine_prefix_cache_queries_total",
    Kind.COUNTER,
    "Prompt tokens looked up in the prefix cache.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PREFIX_CACHE_HITS = define(
    "llm_engine_prefix_cache_hits_total",
    Kind.COUNTER,
    "Prompt tokens served from the prefix cache.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_PREEMPTIONS = define(
    "llm_engine_preemptions_total",
    Kind.COUNTER,
    "Requests preempted (SGLang: retracted) by the engine scheduler.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
#: The finish reasons vLLM reports on ENGINE_REQUESTS_FINISHED (FINISH_REASON_STRINGS in
#: vllm/v1/engine; other engines' reasons pass through).
ENGINE_FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
ENGINE_REQUESTS_FINISHED = define(
    "llm_engine_requests_finished_total",
    Kind.COUNTER,
    "Finished requests by the engine's finish reason (vLLM: "
    + ", ".join(ENGINE_FINISH_REASONS) + ", ...; empty where the engine gives no reason).",
    (*ENGINE_SERIES_LABELS, "finished_reason"),
    section="engine",
)
ENGINE_INFERENCE_TIME = define(
    "llm_engine_inference_time_seconds",
    Kind.HISTOGRAM,
    "Time finished requests spent running (first scheduled to last token: prefill and "
    "decode, preemptions included), with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUEST_PROMPT_TOKENS = define(
    "llm_engine_request_prompt_tokens",
    Kind.HISTOGRAM,
    "Prompt length of finished requests in tokens, with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUEST_GENERATION_TOKENS = define(
    "llm_engine_request_generation_tokens",
    Kind.HISTOGRAM,
    "Generated tokens per finished request, with the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_STEP_TOKENS = define(
    "llm_engine_step_tokens",
    Kind.HISTOGRAM,
    "Tokens (prefill and decode together) per engine step: the batch size in tokens, with "
    "the engine's own buckets.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
#: Why requests wait (vLLM: capacity = no room in the batch or KV cache; deferred = held by
#: the scheduler, e.g. for a KV transfer); other engines' reasons pass through.
ENGINE_WAITING_REASONS = ("capacity", "deferred")
ENGINE_REQUESTS_WAITING_BY_REASON = define(
    "llm_engine_requests_waiting_by_reason",
    Kind.GAUGE,
    "Requests waiting at the last scrape by why they wait (vLLM: "
    + ", ".join(ENGINE_WAITING_REASONS) + "); the reasons sum to llm_engine_requests_waiting.",
    (*ENGINE_SERIES_LABELS, "reason"),
    section="engine",
)
ENGINE_PROMPT_TOKENS_CACHED = define(
    "llm_engine_prompt_tokens_cached_total",
    Kind.COUNTER,
    "Prompt tokens of requests whose KV came from a cache (local prefix cache and external "
    "KV transfer), counted once per request.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
#: Where prompt tokens' KV came from (vLLM prompt_tokens_by_source).
ENGINE_PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
ENGINE_PROMPT_TOKENS_BY_SOURCE = define(
    "llm_engine_prompt_tokens_by_source_total",
    Kind.COUNTER,
    "Prompt tokens by where their KV came from (vLLM: " + ", ".join(ENGINE_PROMPT_SOURCES)
    + "); the sources sum to llm_engine_prompt_tokens_total.",
    (*ENGINE_SERIES_LABELS, "source"),
    section="engine",
)
#: Why the API server turned a request away before it reached the engine (vLLM 0.32).
ENGINE_ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
ENGINE_ADMISSION_REJECTIONS = define(
    "llm_engine_admission_rejections_total",
    Kind.COUNTER,
    "Requests rejected at admission by reason (vLLM: " + ", ".join(ENGINE_ADMISSION_REASONS)
    + ", the queue limits); vLLM counts them per API server, so dp_rank is empty.",
    (*ENGINE_SERIES_LABELS, "reason"),
    section="engine",
)
ENGINE_ESTIMATED_READ_BYTES = define(
    "llm_engine_estimated_read_bytes_per_gpu_total",
    Kind.COUNTER,
    "The engine's own estimate of bytes read from accelerator memory per GPU (weights, KV, "
    "activations), from its model of each step; compare its rate with NVML's measured "
    "DRAM bandwidth (llm_gpu_memory_bandwidth_bytes_per_second).",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_ESTIMATED_WRITE_BYTES = define(
    "llm_engine_estimated_write_bytes_per_gpu_total",
    Kind.COUNTER,
    "The engine's own estimate of bytes written to accelerator memory per GPU.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_ESTIMATED_FLOPS = define(
    "llm_engine_estimated_flops_per_gpu_total",
    Kind.COUNTER,
    "The engine's own estimate of floating-point operations per GPU (its rate over the "
    "GPU's peak FLOP/s is the model FLOPs utilization).",
    ENGINE_SERIES_LABELS,
    section="engine",
)
# Triton reports cumulative microsecond counters instead of latency histograms. They are
# named *_duration_seconds_total, not *_time_seconds_total: an OpenMetrics counter family
# `llm_engine_queue_time_seconds` would clash with the histogram family of that name.
ENGINE_QUEUE_DURATION = define(
    "llm_engine_queue_duration_seconds_total",
    Kind.COUNTER,
    "Cumulative time requests spent queued (Triton). Mean queue time per request is its "
    "rate over the rate of llm_engine_requests_succeeded_total; the queue-time share is its "
    "rate over the rate of llm_engine_request_duration_seconds_total.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUEST_DURATION = define(
    "llm_engine_request_duration_seconds_total",
    Kind.COUNTER,
    "Cumulative end-to-end request handling time inside the server (Triton).",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_COMPUTE_DURATION = define(
    "llm_engine_compute_duration_seconds_total",
    Kind.COUNTER,
    "Cumulative model execution (inference compute) time (Triton).",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUESTS_SUCCEEDED = define(
    "llm_engine_requests_succeeded_total",
    Kind.COUNTER,
    "Successful requests (Triton); the request count the *_duration_seconds_total counters "
    "are divided by for a per-request mean.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_REQUESTS_FAILED = define(
    "llm_engine_requests_failed_total",
    Kind.COUNTER,
    "Failed requests (Triton), all failure reasons together.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
# What the first token's budget reads beyond queue and prefill: the API server's own CPU
# (tokenizing, templating, detokenizing), speculative decoding's drafts and acceptance, and
# the KV handed over between a prefill and a decode instance (P/D disaggregation).
ENGINE_PROCESS_CPU = define(
    "llm_engine_process_cpu_seconds_total",
    Kind.COUNTER,
    "CPU time of the engine's API server process (vLLM's own process_cpu_seconds_total on "
    "its /metrics): a rate near 1 is its one frontend process saturated, tokenizing and "
    "templating ahead of the engine; model and dp_rank are empty (one process for all).",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_SPEC_DRAFTS = define(
    "llm_engine_spec_decode_drafts_total",
    Kind.COUNTER,
    "Speculative decoding: draft proposals made (one per sequence and step it drafts for); "
    "absent without speculative decoding.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_SPEC_DRAFT_TOKENS = define(
    "llm_engine_spec_decode_draft_tokens_total",
    Kind.COUNTER,
    "Speculative decoding: draft tokens proposed.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_SPEC_ACCEPTED_TOKENS = define(
    "llm_engine_spec_decode_accepted_tokens_total",
    Kind.COUNTER,
    "Speculative decoding: draft tokens the target model accepted; over the draft tokens, "
    "the acceptance rate (each accepted token is a decode step saved).",
    ENGINE_SERIES_LABELS,
    section="engine",
)
ENGINE_KV_TRANSFER_TIME = define(
    "llm_engine_kv_transfer_seconds",
    Kind.HISTOGRAM,
    "Time of each KV-cache transfer into this instance from a prefill instance (vLLM's "
    "NIXL connector), with the engine's own buckets; absent without P/D disaggregation.",
    ENGINE_SERIES_LABELS,
    section="engine",
)
