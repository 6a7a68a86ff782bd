"""Cost of one GPU sampling tick for 8 GPUs, against the bare NVML calls it makes.

NVML is the scripted fake library of tests/support/fake_nvml.py, installed as ``pynvml.nvmlLib`` so
the real nvidia-ml-py wrappers run. Its own cost per call is small, so the difference between
the two timings is our code's share: error classification, fallbacks, GPM bookkeeping,
process aggregation and building the snapshot.

* ours: ``NvmlSampler.tick()``, with the clock advanced 1 s per tick so every tick runs the
  full GPM two-sample flow on each Hopper GPU.
* reference ("bare calls"): the same pynvml wrapper calls, in a plain loop with no error
  handling and no snapshot. The script checks that both make exactly the same calls per tick
  (per C symbol) before timing them.

Timed per tick, wall (perf_counter) and CPU of the calling thread (thread_time); medians of
``--ticks`` ticks after a warm-up. Two GPU sets: 8x H200 (every call, GPM on all) and 8
mixed generations (tests/support/fake_nvml.py's ``eight_mixed``). Also timed, for scale: the
snapshot's batch rendered by the runtime's store and joined as a scrape joins it.

Run (from the repository root): .venv/bin/python -m benchmarks.gpu_overhead
Exit status 1 if a tick's median wall time for 8 GPUs is 5 ms or more.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pynvml as N

from exporter.checks.gpu.check import gpu_samples
from exporter.checks.gpu.nvml import GPM_METRICS
from exporter.checks.gpu.sampler import NvmlSampler
from exporter.runtime.exposition import Store
from tests.support.fake_nvml import PROCESS_NAMES, FakeGpu, FakeNvml, eight_mixed, h200

TARGET_MS = 5.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Bare:
    """The calls a steady-state tick makes, straight through pynvml, nothing else."""

    def __init__(self, fake: FakeNvml) -> None:
        N.nvmlInit()
        self.fake = fake
        self.events = N.nvmlEventSetCreate()
        self.gpus: list[tuple[Any, FakeGpu, Any]] = []
        for i, gpu in enumerate(fake.gpus):
            h = N.nvmlDeviceGetHandleByIndex(i)
            gpm = None
            if gpu.gpm is not None:
                req = N.c_nvmlGpmMetricsGet_t()
                req.version = N.NVML_GPM_METRICS_GET_VERSION
                req.numMetrics = len(GPM_METRICS)
                for k, (metric_id, _) in enumerate(GPM_METRICS):
                    req.metrics[k].metricId = metric_id
                samples = [N.nvmlGpmSampleAlloc(), N.nvmlGpmSampleAlloc()]
                N.nvmlGpmSampleGet(h, samples[0])
                gpm = [samples, req]
            self.gpus.append((h, gpu, gpm))

    def tick(self) -> None:
        N.nvmlDeviceGetCount()
        with contextlib.suppress(N.NVMLError):  # Timeout: no event queued
            N.nvmlEventSetWait_v2(self.events, 0)
        for h, gpu, gpm in self.gpus:
            N.nvmlDeviceGetUtilizationRates(h)
            N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
            N.nvmlDeviceGetPowerUsage(h)
            N.nvmlDeviceGetEnforcedPowerLimit(h)
            N.nvmlDeviceGetTotalEnergyConsumption(h)
            N.nvmlDeviceGetTemperatureV(h, N.NVML_TEMPERATURE_GPU)
            N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)
            N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM)
            N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_RX_BYTES)
            N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_TX_BYTES)
            N.nvmlDeviceGetCurrentClocksEventReasons(h)
            if gpu.ecc_corrected is not None:
                N.nvmlDeviceGetTotalEccErrors(
                    h, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC
                )
                N.nvmlDeviceGetTotalEccErrors(
                    h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC
                )
            if gpm is not None:
                samples, req = gpm
                N.nvmlGpmSampleGet(h, samples[1])
                req.sample1, req.sample2 = samples
                N.nvmlGpmMetricsGet(req)
                samples.reverse()
            N.nvmlDeviceGetComputeRunningProcesses_v3(h)

    def close(self) -> None:
        for _, _, gpm in self.gpus:
            if gpm is not None:
                for sample in gpm[0]:
                    N.nvmlGpmSampleFree(sample)
        N.nvmlEventSetFree(self.events)
        N.nvmlShutdown()


def install(gpus: list[FakeGpu], clock: Clock) -> FakeNvml:
    fake = FakeNvml(gpus, clock=clock)
    fake.process_names.update(PROCESS_NAMES)
    N.nvmlLib = fake
    N._nvmlGetFunctionPointer_cache.clear()
    return fake


def calls_of(fake: FakeNvml, fn: Callable[[], object]) -> Counter[str]:
    before = Counter(fake.calls)
    fn()
    return fake.calls - before


def timed(fn: Callable[[], object], ticks: int, clock: Clock) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for _ in range(ticks):
        clock.t += 1.0
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        fn()
        c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
        wall.append((w1 - w0) / 1e6)
        cpu.append((c1 - c0) / 1e6)
    return wall, cpu


def run_set(label: str, gpus: list[FakeGpu], ticks: int) -> tuple[str, float]:
    clock = Clock()
    fake = install(gpus, clock)
    sampler = NvmlSampler(clock=clock)
    for _ in range(20):  # warm-up: first tick opens the session, second starts GPM windows
        clock.t += 1.0
        sampler.tick()
    bare = Bare(fake)
    clock.t += 1.0
    ours_calls = calls_of(fake, sampler.tick)
    clock.t += 1.0
    bare_calls = calls_of(fake, bare.tick)
    if ours_calls != bare_calls:
        sys.exit(
            f"{label}: call mix differs: ours-bare {ours_calls - bare_calls}, "
            f"bare-ours {bare_calls - ours_calls}"
        )
    n_calls = sum(ours_calls.values())
    # Interleave the two in blocks so machine noise hits both alike.
    ow, oc, bw, bc = [], [], [], []
    block = max(ticks // 10, 1)
    for _ in range(10):
        w, c = timed(sampler.tick, block, clock)
        ow += w
        oc += c
        w, c = timed(bare.tick, block, clock)
        bw += w
        bc += c
    store = Store()
    render: list[float] = []
    for _ in range(max(ticks // 5, 10)):
        t0 = time.perf_counter_ns()
        # What a tick's end and a scrape cost: the batch, its lines, the joined text.
        store.publish("gpu/nvml", gpu_samples(sampler.snapshot))
        body = store.text(False)
        render.append((time.perf_counter_ns() - t0) / 1e6)
    bare.close()
    sampler.close()
    assert fake.refcount == 0 and not fake.gpm_samples and not fake.event_sets
    med = statistics.median
    ours_w, ours_c, bare_w, bare_c = med(ow), med(oc), med(bw), med(bc)
    row = (
        f"| {label} | {n_calls} | {ours_w:.3f} ms | {ours_c:.3f} ms | {bare_w:.3f} ms | "
        f"{bare_c:.3f} ms | {ours_w / bare_w:.2f}x | {ours_w - bare_w:.3f} ms | "
        f"{statistics.quantiles(ow, n=20)[18]:.3f} ms | {med(render):.3f} ms "
        f"({len(body) // 1024} KiB) |"
    )
    return row, ours_w


def per_call_costs() -> tuple[float, float]:
    """One representative call, alone: into the fake directly, and through pynvml's wrapper.
    Says how much of the bare reference is the fake itself."""
    fake = install([h200()], Clock())
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    util = N.c_nvmlUtilization_t()
    c_fn = fake.nvmlDeviceGetUtilizationRates
    out = []
    calls: tuple[Callable[[], object], ...] = (
        lambda: c_fn(h, ctypes.byref(util)),
        lambda: N.nvmlDeviceGetUtilizationRates(h),
    )
    for fn in calls:
        runs = []
        for _ in range(200):
            t0 = time.perf_counter_ns()
            for _ in range(100):
                fn()
            runs.append((time.perf_counter_ns() - t0) / 100 / 1e3)
        out.append(statistics.median(runs))
    N.nvmlShutdown()
    return out[0], out[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=1000, help="timed ticks per GPU set")
    args = ap.parse_args()
    saved = N.nvmlLib
    print(
        f"# Python {platform.python_version()}, nvidia-ml-py {metadata.version('nvidia-ml-py')},"
        f" {args.ticks} ticks per set"
    )
    print(
        "| GPU set | NVML calls/tick | ours wall | ours CPU | bare wall | bare CPU | "
        "ours/bare | our share | ours p95 | render /metrics |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    try:
        for label, gpus in (
            ("8x H200", [h200(f"GPU-h200-{i:04d}") for i in range(8)]),
            ("8 mixed", eight_mixed()),
        ):
            row, wall = run_set(label, gpus, args.ticks)
            print(row)
            worst = max(worst, wall)
        fake_us, wrapped_us = per_call_costs()
        print(
            f"per call (nvmlDeviceGetUtilizationRates): fake alone {fake_us:.2f} us, "
            f"through pynvml {wrapped_us:.2f} us"
        )
    finally:
        N.nvmlLib = saved
        N._nvmlGetFunctionPointer_cache.clear()
    ok = worst < TARGET_MS
    print(
        f"target: median tick < {TARGET_MS:g} ms for 8 GPUs: {'PASS' if ok else 'FAIL'}"
        f" (worst {worst:.3f} ms)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
