"""Engine exposition parse + normalize speed vs prometheus_client's own text parser.

Input: a vLLM V1 exposition generated here with prometheus_client (every family of vLLM V1's
metric catalogue, vllm/v1/metrics/loggers.py, with its default buckets, `_created` samples
included), for N models x 2 data-parallel ranks. Ours = ``exporter.checks.engine.parse.parse``
on the bytes (UTF-8 decode, parse, normalize, caps); reference =
``prometheus_client.parser.text_string_to_metric_families`` on the decoded text, fully
consumed. Each is timed as the median of repeated runs.

Run (from the repository root): .venv/bin/python -m benchmarks.engine_parse
Exit status 1 if ours is not at least 3x faster than the reference and under 60 ms/MB at
every size, or if ms/MB grows by more than 1.5x from the smallest to the largest input.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.checks.engine.parse import parse
from exporter.config.models import EngineLimits

MIN_SPEEDUP = 3.0
MAX_MS_PER_MB = 60.0
MAX_LINEARITY_DRIFT = 1.5
DP_RANKS = 2
# Model counts giving about 0.5, 1, 1.25 (the 16 models x 2 ranks case) and 3 MB.
SIZES = (6, 12, 16, 38)
#: Caps high enough that every series of the largest input is kept (the caps still run).
UNCAPPED = EngineLimits(max_models=1000, max_series=1_000_000)

TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
        7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
       10.0, 20.0, 40.0, 80.0)
REQUEST = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
PARAMS_N = (1, 2, 5, 10, 20)
PREEMPTIONS = (1, 2, 3, 4, 5, 10, 20)


def vllm_exposition(models: int, seed: int = 1) -> bytes:
    rng = random.Random(seed)
    reg = CollectorRegistry()
    lab = ["model_name", "engine"]

    def g(name: str, extra: tuple[str, ...] = ()) -> Gauge:
        return Gauge(f"vllm:{name}", name, [*lab, *extra], registry=reg)

    def c(name: str, extra: tuple[str, ...] = ()) -> Counter:
        return Counter(f"vllm:{name}", name, [*lab, *extra], registry=reg)

    def h(name: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(f"vllm:{name}", name, lab, buckets=buckets, registry=reg)

    gauges = [g("num_requests_running"), g("num_requests_waiting"), g("kv_cache_usage_perc")]
    by_reason = g("num_requests_waiting_by_reason", ("reason",))
    sleep = g("engine_sleep_state", ("sleep_state",))
    counters = [c(n) for n in (
        "prefix_cache_queries", "prefix_cache_hits", "external_prefix_cache_queries",
        "external_prefix_cache_hits", "mm_cache_queries", "mm_cache_hits", "num_preemptions",
        "prompt_tokens", "prompt_tokens_cached", "generation_tokens", "spec_decode_num_drafts",
        "spec_decode_num_draft_tokens", "spec_decode_num_accepted_tokens")]
    by_source = c("prompt_tokens_by_source", ("source",))
    success = c("request_success", ("finished_reason",))
    per_pos = c("spec_decode_num_accepted_tokens_per_pos", ("position",))
    hists = [
        (h("iteration_tokens_total", ITERATION), 2000.0),
        (h("time_to_first_token_seconds", TTFT), 0.5),
        (h("inter_token_latency_seconds", ITL), 0.04),
        (h("request_time_per_output_token_seconds", ITL), 0.04),
        (h("e2e_request_latency_seconds", REQUEST), 12.0),
        (h("request_queue_time_seconds", REQUEST), 0.8),
        (h("request_inference_time_seconds", REQUEST), 11.0),
        (h("request_prefill_time_seconds", REQUEST), 0.6),
        (h("request_decode_time_seconds", REQUEST), 10.0),
        (h("request_prompt_tokens", TOKENS), 3000.0),
        (h("request_generation_tokens", TOKENS), 400.0),
        (h("request_max_num_generation_tokens", TOKENS), 400.0),
        (h("request_params_max_tokens", TOKENS), 1024.0),
        (h("request_params_n", PARAMS_N), 1.0),
        (h("request_prefill_kv_computed_tokens", TOKENS), 1500.0),
        (h("request_num_preemptions", PREEMPTIONS), 0.5),
    ]
    Gauge("vllm:cache_config_info", "cache config", ["block_size", "num_gpu_blocks", "engine"],
          registry=reg).labels("16", "40000", "0").set(1)
    for i in range(models):
        model = f"Qwen/Qwen2.5-7B-{i:02d}"
        for rank in range(DP_RANKS):
            ls = (model, str(rank))
            for gauge in gauges:
                gauge.labels(*ls).set(rng.random())
            for reason in ("capacity", "deferred"):
                by_reason.labels(*ls, reason).set(rng.randint(0, 50))
            for state in ("awake", "weights_offloaded", "discard_all"):
                sleep.labels(*ls, state).set(state == "awake")
            for counter in counters:
                counter.labels(*ls).inc(rng.randint(0, 10**7))
            for src in ("local_compute", "local_cache_hit", "external_kv_transfer"):
                by_source.labels(*ls, src).inc(rng.randint(0, 10**7))
            for reason in ("stop", "length", "abort", "error", "repetition"):
                success.labels(*ls, reason).inc(rng.randint(0, 10**5))
            for pos in range(3):
                per_pos.labels(*ls, str(pos)).inc(rng.randint(0, 10**6))
            for hist, scale in hists:
                child = hist.labels(*ls)
                for _ in range(40):
                    child.observe(rng.expovariate(1 / scale))
    return generate_latest(reg)


def prometheus_parse(text: str) -> int:
    """The reference: prometheus_client's parser, every family and sample materialized."""
    return sum(len(family.samples) for family in text_string_to_metric_families(text))


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm caches and imports outside the measurement
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=15, help="timed runs per measurement")
    args = ap.parse_args(argv)
    print(f"{'models':>6} {'size MB':>8} {'lines':>7} {'ours ms':>8} {'prom ms':>8} "
          f"{'ratio':>6} {'ms/MB':>6}")
    ok = True
    per_mb: list[float] = []
    for models in SIZES:
        body = vllm_exposition(models)
        text = body.decode()
        mb = len(body) / 1e6
        snap = parse(body, "vllm", UNCAPPED)
        assert len(snap.models) == models and not any(snap.dropped.values()), "lost series"
        ours = median_ms(partial(parse, body, "vllm", UNCAPPED), args.repeat)
        prom = median_ms(partial(prometheus_parse, text), max(3, args.repeat // 3))
        ratio = prom / ours
        per_mb.append(ours / mb)
        print(f"{models:>6} {mb:>8.2f} {text.count(chr(10)):>7} {ours:>8.1f} {prom:>8.1f} "
              f"{ratio:>5.1f}x {ours / mb:>6.1f}")
        if ratio < MIN_SPEEDUP or ours / mb > MAX_MS_PER_MB:
            ok = False
    drift = per_mb[-1] / per_mb[0]
    print(f"linearity: ms/MB at the largest over the smallest input = {drift:.2f} "
          f"(limit {MAX_LINEARITY_DRIFT})")
    if drift > MAX_LINEARITY_DRIFT:
        ok = False
    print("PASS" if ok else
          f"FAIL: target is >= {MIN_SPEEDUP}x prometheus_client and < {MAX_MS_PER_MB} ms/MB")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
