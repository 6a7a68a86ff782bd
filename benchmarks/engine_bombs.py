"""Label bombs against the engine parser: time per MB and peak memory per MB of body, as a
ratio to an ordinary vLLM exposition (the named reference: 16 models x 2 DP ranks from
benchmarks/engine_parse.py, run in the same script, so machine noise hits both), and the
series kept, which the caps bound whatever the input.

The bombs are the bodies tests/test_engine_faults.py serves (tests/support/hostile_engine.py):
200k distinct `engine` (DP rank) values, 200k `finished_reason` values, one histogram with
150k `le` bounds. Every line of a bomb belongs to a mapped family, so every line takes the
parser's slow path (labels read, series key built, caps checked), where most lines of an
ordinary exposition are skipped after one dict miss.

Run (from the repository root): .venv/bin/python -m benchmarks.engine_bombs
Exit status 1 if a bomb costs over 4x the reference per MB in time or over 2x in memory,
takes over 1.5 s, or keeps more series than the caps allow.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable
from functools import partial

from benchmarks.engine_parse import vllm_exposition
from exporter.checks.engine.parse import HistogramValue, Snapshot, parse
from exporter.config.models import EngineLimits
from tests.support.hostile_engine import BODIES

BOMBS = ("engine-values", "finished-reasons", "le-bounds")
MAX_TIME_RATIO = 4.0
MAX_MEMORY_RATIO = 2.0
MAX_SECONDS = 1.5
LIMITS = EngineLimits()


def median_s(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peak_mb(body: bytes) -> float:
    """Peak memory one parse allocates (the body itself excluded), in MB."""
    tracemalloc.start()
    try:
        parse(body, "vllm", LIMITS)
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def exposed(snap: Snapshot) -> int:
    """Prometheus series the snapshot adds to /metrics."""
    return sum(
        len(v.buckets) + (v.count is not None) + (v.sum is not None)
        if isinstance(v, HistogramValue) else 1
        for family in snap.series.values() for v in family.values()
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per measurement")
    args = ap.parse_args(argv)
    ref = vllm_exposition(16)
    ref_mb = len(ref) / 1e6
    ref_s = median_s(lambda: parse(ref, "vllm", LIMITS), args.repeat * 3)
    ref_mem = peak_mb(ref) / ref_mb
    print(f"reference: vLLM 16 models x 2 ranks, {ref_mb:.2f} MB: {ref_s * 1000 / ref_mb:.1f} "
          f"ms/MB, peak {ref_mem:.2f} MB/MB, {exposed(parse(ref, 'vllm', LIMITS))} series")
    print(f"{'bomb':<18}{'MB':>6}{'ms':>7}{'ms/MB':>7}{'x ref':>7}{'MB/MB':>7}{'x ref':>7}"
          f"{'series':>8}  dropped")
    ok = True
    for name in BOMBS:
        body = BODIES[name]()
        mb = len(body) / 1e6
        seconds = median_s(partial(parse, body, "vllm", LIMITS), args.repeat)
        mem = peak_mb(body) / mb
        snap = parse(body, "vllm", LIMITS)
        series = exposed(snap)
        t_ratio = (seconds / mb) / (ref_s / ref_mb)
        m_ratio = mem / ref_mem
        dropped = ", ".join(f"{r}={n}" for r, n in snap.dropped.items() if n)
        print(f"{name:<18}{mb:>6.1f}{seconds * 1000:>7.0f}{seconds * 1000 / mb:>7.1f}"
              f"{t_ratio:>6.1f}x{mem:>7.2f}{m_ratio:>6.1f}x{series:>8}  {dropped}")
        if (t_ratio > MAX_TIME_RATIO or m_ratio > MAX_MEMORY_RATIO or seconds > MAX_SECONDS
                or series > max(LIMITS.max_dp_ranks, LIMITS.max_label_values)):
            ok = False
    print("PASS" if ok else
          f"FAIL: targets are <= {MAX_TIME_RATIO}x the reference per MB in time, "
          f"<= {MAX_MEMORY_RATIO}x in memory, <= {MAX_SECONDS} s, series within the caps")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
