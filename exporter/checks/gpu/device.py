"""One GPU's reads for a tick, and what is kept per GPU between ticks of a session.

Each read returns only what NVML gave (an empty result or None where it gave nothing), and
remembers in the GPU's ``unsupported`` and the session's ``missing`` what is not to be asked
again. GpuLost and SessionLost pass through to the sampler.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pynvml as N

from exporter import metrics
from exporter.checks.gpu.bandwidth import formula_peak_bandwidth, spec_peak_bandwidth
from exporter.checks.gpu.nvml import (
    CLOCK_EVENT_CALLS,
    CLOCK_EVENT_REASONS,
    ECC_CALLS,
    GPM_METRICS,
    MEMORY_CALLS,
    NVLINK_ERRORS,
    NVLINK_MAX_LINKS,
    PROCESS_CALLS,
    SCALARS,
    Read,
    max_memory_clock,
    read,
    system,
)
from exporter.metrics import Family

#: Per-GPU cap on process series: a GPU shared by many small jobs must not flood the scrape.
MAX_PROCESSES = 16
#: NVML: GPM samples closer than 100 ms are below its internal refresh rate.
GPM_MIN_WINDOW = 0.1


@dataclass
class Gpm:
    prev: Any
    cur: Any
    request: Any  # one c_nvmlGpmMetricsGet_t (19 KB) reused every tick
    prev_at: float | None = None
    last: dict[Family, float] = field(default_factory=dict)


@dataclass
class Gpu:
    index: int
    uuid: str
    name: str
    handle: Any = None
    up: bool = False
    unsupported: set[str] = field(default_factory=set)
    gpm: Gpm | None = None
    peak: tuple[float, str] | None = None
    peak_done: bool = False


def read_values(gpu: Gpu, missing: set[Read]) -> dict[Family, float]:
    """Utilization, memory and the one-call values, in base units."""
    h = gpu.handle
    values: dict[Family, float] = {}
    util = read(missing, gpu.unsupported, "utilization", (N.nvmlDeviceGetUtilizationRates,), h)
    if util is not None:
        values[metrics.GPU_UTILIZATION] = util.gpu / 100
        values[metrics.GPU_MEMORY_CONTROLLER_BUSY] = util.memory / 100
    mem = read(missing, gpu.unsupported, "memory", MEMORY_CALLS, h)
    if mem is not None:
        values[metrics.GPU_MEMORY_USED] = mem.used
        values[metrics.GPU_MEMORY_TOTAL] = mem.total
        if isinstance(mem, N.c_nvmlMemory_v2_t):
            values[metrics.GPU_MEMORY_RESERVED] = mem.reserved
    for key, calls, family, factor in SCALARS:
        raw = read(missing, gpu.unsupported, key, calls, h)
        if raw is not None:
            values[family] = raw * factor
    return values


def read_clock_events(gpu: Gpu, missing: set[Read]) -> dict[str, bool]:
    mask = read(missing, gpu.unsupported, "clock_events", CLOCK_EVENT_CALLS, gpu.handle)
    if mask is None:
        return {}
    return {reason: bool(mask & bit) for bit, reason in CLOCK_EVENT_REASONS}


def read_ecc(gpu: Gpu, missing: set[Read]) -> dict[str, int]:
    ecc: dict[str, int] = {}
    for kind, calls in ECC_CALLS:
        count = read(missing, gpu.unsupported, "ecc_" + kind, calls, gpu.handle)
        if count is not None:
            ecc[kind] = count
    return ecc


def read_nvlink(gpu: Gpu, missing: set[Read]) -> dict[int, tuple[bool, dict[str, int]]]:
    """Link -> (active, error counts by kind) of each NVLink the GPU answers for, from link
    0 up to the first it does not (a GPU without NVLink answers none, once)."""
    out: dict[int, tuple[bool, dict[str, int]]] = {}
    for link in range(NVLINK_MAX_LINKS):
        state = read(missing, gpu.unsupported, f"nvlink{link}", (N.nvmlDeviceGetNvLinkState,),
                     gpu.handle, link)
        if state is None:
            break
        errors: dict[str, int] = {}
        if state:
            for kind, counter in NVLINK_ERRORS:
                count = read(missing, gpu.unsupported, f"nvlink{link}_{kind}",
                             (N.nvmlDeviceGetNvLinkErrorCounter,), gpu.handle, link, counter)
                if count is not None:
                    errors[kind] = count
        out[link] = (bool(state), errors)
    return out


def read_peak(gpu: Gpu, missing: set[Read]) -> tuple[float, str] | None:
    """Peak DRAM bandwidth (bytes/s) and where it came from: the datasheet, else the clock."""
    spec = spec_peak_bandwidth(gpu.name)
    if spec is not None:
        return spec, "spec"
    clock = read(missing, gpu.unsupported, "max_memory_clock", (max_memory_clock,), gpu.handle)
    width = read(
        missing, gpu.unsupported, "bus_width", (N.nvmlDeviceGetMemoryBusWidth,), gpu.handle
    )
    if clock and width:
        return formula_peak_bandwidth(clock, width), "clock_x_bus_width"
    return None


def top_processes(gpu: Gpu, missing: set[Read]) -> list[tuple[int, int]]:
    """(pid, used bytes) of the processes using the most memory, at most MAX_PROCESSES."""
    procs = read(missing, gpu.unsupported, "processes", PROCESS_CALLS, gpu.handle)
    if not procs:
        return []
    # A process appears once per MIG instance it uses; the GPU total is their sum.
    used: dict[int, int] = {}
    for p in procs:
        if p.usedGpuMemory is not None:
            used[p.pid] = used.get(p.pid, 0) + p.usedGpuMemory
    return sorted(used.items(), key=lambda item: (-item[1], item[0]))[:MAX_PROCESSES]


# --- GPM (Hopper and newer) --------------------------------------------------------------


def read_gpm(gpu: Gpu, missing: set[Read], clock: Callable[[], float]) -> Mapping[Family, float]:
    """GPM ratios over the window since the previous sample; empty on the first."""
    if "gpm" in gpu.unsupported:
        return {}
    g = gpu.gpm
    if g is None:
        g = gpu.gpm = _gpm_setup(gpu, missing)
        if g is None:
            return {}
    # Window edges are timed after the earlier SampleGet returned and before the later
    # one starts, so the real window is never shorter than the one checked here.
    if g.prev_at is None:
        first = read(missing, gpu.unsupported, "gpm", (N.nvmlGpmSampleGet,), gpu.handle, g.prev)
        if first is not None:
            g.prev_at = clock()
        return {}
    if clock() - g.prev_at < GPM_MIN_WINDOW:
        return g.last  # ticks closer than NVML's refresh: the last window still stands
    if read(missing, gpu.unsupported, "gpm", (N.nvmlGpmSampleGet,), gpu.handle, g.cur) is None:
        return {}
    g.request.sample1, g.request.sample2 = g.prev, g.cur
    done = read(missing, gpu.unsupported, "gpm", (N.nvmlGpmMetricsGet,), g.request)
    # The newest sample starts the next window whether or not this one was readable.
    g.prev, g.cur, g.prev_at = g.cur, g.prev, clock()
    if done is None:
        g.last = {}
        return {}
    out: dict[Family, float] = {}
    for i, (_, family) in enumerate(GPM_METRICS):
        metric = g.request.metrics[i]
        if metric.nvmlReturn == N.NVML_SUCCESS:
            out[family] = metric.value / 100
    g.last = out
    return out


def _gpm_setup(gpu: Gpu, missing: set[Read]) -> Gpm | None:
    support = read(missing, gpu.unsupported, "gpm", (N.nvmlGpmQueryDeviceSupport,), gpu.handle)
    if support is None or not support.isSupportedDevice:
        gpu.unsupported.add("gpm")
        return None
    samples: list[Any] = []
    for _ in range(2):
        sample = read(missing, gpu.unsupported, "gpm", (N.nvmlGpmSampleAlloc,))
        if sample is None:
            for allocated in samples:
                system(N.nvmlGpmSampleFree, allocated)
            gpu.unsupported.add("gpm")
            return None
        samples.append(sample)
    request = N.c_nvmlGpmMetricsGet_t()
    request.version = N.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(GPM_METRICS)
    for i, (metric_id, _) in enumerate(GPM_METRICS):
        request.metrics[i].metricId = metric_id
    return Gpm(samples[0], samples[1], request)


def free_gpm(gpu: Gpu) -> None:
    g, gpu.gpm = gpu.gpm, None
    if g is None:
        return
    for sample in (g.prev, g.cur):
        # Host memory; a dead session or lost GPU leaves nothing more to do on failure.
        with contextlib.suppress(N.NVMLError):
            N.nvmlGpmSampleFree(sample)
