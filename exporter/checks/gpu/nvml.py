"""Blocking NVML sampling for the GPU check: one NVML session, per-GPU reads, one snapshot.

Everything here blocks (NVML calls are ioctls; the PCIe counters hold the caller for a 20 ms
window) and runs on the GPU check's single worker thread, never on the event loop. A tick
ends by publishing an immutable ``Snapshot`` that the check's collector renders, so a value
NVML did not give is simply not in it: absent, never 0.

NVML errors are sorted by what they take down:

* one value (NotSupported, FunctionNotFound, NoPermission, ...): that series only. The first
  two are remembered per GPU for the session, so an old driver is not asked again each tick;
  a missing new symbol falls back to the older one where NVML has one (memory v2 -> v1,
  TemperatureV -> Temperature, ClocksEventReasons -> ClocksThrottleReasons, processes v3 -> v2).
* one GPU (GpuIsLost, GpuNotFound, ResetRequired): that GPU is marked down and its data series
  dropped; its handle is looked up again every tick, and NVML is re-initialized with back-off
  in case the GPU only shows up in a fresh enumeration.
* the session (Uninitialized, DriverNotLoaded, LibRmVersionMismatch, library missing): every
  GPU series; NVML is shut down and initialized again with back-off (a driver restart).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml as N

from exporter import metrics
from exporter.metrics import Family

log = logging.getLogger("exporter.checks.gpu")

#: Per-GPU cap on process series: a GPU shared by many small jobs must not flood the scrape.
MAX_PROCESSES = 16
#: NVML: GPM samples closer than 100 ms are below its internal refresh rate.
GPM_MIN_WINDOW = 0.1
#: Bound on XID events drained per tick; the rest stay queued in NVML for the next tick.
MAX_EVENTS_PER_TICK = 256
#: NVML init retries back off from 1 s to this, so a host without a GPU costs ~nothing.
INIT_BACKOFF_MAX = 60.0
#: While a GPU is down, NVML is re-initialized after this long (doubling up to RESCAN_MAX),
#: since a GPU that was reset or re-attached may only appear in a fresh enumeration. Each
#: re-init costs the other GPUs one tick of GPM series, hence the back-off.
RESCAN_FIRST = 30.0
RESCAN_MAX = 600.0
#: NVML reports PCIe throughput in "KB/s"; like nvitop and most NVML consumers we read KiB.
PCIE_KB = 1024
PROCESS_NAME_MAX = 64

_SESSION_ERRORS = frozenset(
    {
        N.NVML_ERROR_UNINITIALIZED,
        N.NVML_ERROR_DRIVER_NOT_LOADED,
        N.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        N.NVML_ERROR_LIBRARY_NOT_FOUND,
    }
)
_GPU_ERRORS = frozenset(
    {N.NVML_ERROR_GPU_IS_LOST, N.NVML_ERROR_GPU_NOT_FOUND, N.NVML_ERROR_RESET_REQUIRED}
)
# A symbol the driver lacks, or a struct version it does not know: try the older call.
_MISSING_ERRORS = frozenset(
    {N.NVML_ERROR_FUNCTION_NOT_FOUND, N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)

# Clock-event bits, in the order of metrics.GPU_CLOCK_EVENT_REASONS (the `reason` label).
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = tuple(
    zip(
        (
            N.nvmlClocksEventReasonGpuIdle,
            N.nvmlClocksEventReasonApplicationsClocksSetting,
            N.nvmlClocksEventReasonSwPowerCap,
            N.nvmlClocksEventReasonHwSlowdown,
            N.nvmlClocksEventReasonSyncBoost,
            N.nvmlClocksEventReasonSwThermalSlowdown,
            N.nvmlClocksEventReasonHwThermalSlowdown,
            N.nvmlClocksEventReasonHwPowerBrakeSlowdown,
            N.nvmlClocksEventReasonDisplayClockSetting,
        ),
        metrics.GPU_CLOCK_EVENT_REASONS,
        strict=True,
    )
)

GPM_METRICS: tuple[tuple[int, Family], ...] = (
    (N.NVML_GPM_METRIC_DRAM_BW_UTIL, metrics.GPU_DRAM_BANDWIDTH_UTILIZATION),
    (N.NVML_GPM_METRIC_SM_UTIL, metrics.GPU_SM_ACTIVE),
    (N.NVML_GPM_METRIC_SM_OCCUPANCY, metrics.GPU_SM_OCCUPANCY),
    (N.NVML_GPM_METRIC_ANY_TENSOR_UTIL, metrics.GPU_TENSOR_ACTIVE),
)


def _contains(*words: str) -> re.Pattern[str]:
    """A name pattern matching when every word appears as a whole word, in any order."""
    return re.compile("".join(rf"(?=.*\b{w}\b)" for w in words), re.IGNORECASE)


# Datasheet peak DRAM bandwidth (TB/s) keyed on nvmlDeviceGetName; first match wins, so a
# specific variant precedes its family. Whole-word matching keeps H20 from matching H200 and
# A10 from matching A100. The clock x bus-width formula is only the fallback: on H200 it
# gives 4.92 TB/s against the datasheet's 4.8.
PEAK_BANDWIDTH_TBPS: tuple[tuple[re.Pattern[str], float], ...] = (
    (_contains("H200"), 4.8),  # SXM and NVL, 141 GB HBM3e
    (_contains("H100", "PCIe"), 2.0),  # 80 GB HBM2e
    (_contains("H100", "NVL"), 3.9),  # 94 GB HBM3
    (_contains("H100"), 3.35),  # SXM5 80 GB HBM3 ("NVIDIA H100 80GB HBM3")
    (_contains("H800", "PCIe"), 2.0),
    (_contains("H800"), 3.35),
    (_contains("H20"), 4.0),  # 96 GB HBM3
    (_contains("B200"), 8.0),
    (_contains("A100", "80GB", "PCIe"), 1.935),
    (_contains("A100", "80GB"), 2.039),  # SXM4
    (_contains("A100"), 1.555),  # 40 GB, SXM4 and PCIe
    (_contains("A800", "80GB", "PCIe"), 1.935),
    (_contains("A800"), 2.039),
    (_contains("L40S"), 0.864),
    (_contains("L40"), 0.864),
    (_contains("L20"), 0.864),
    (_contains("RTX 4090"), 1.008),
    (_contains("L4"), 0.300),
    (_contains("A10"), 0.600),
)


def spec_peak_bandwidth(name: str) -> float | None:
    """Datasheet peak DRAM bandwidth in bytes/s for a GPU model name, if it is in the table."""
    for pattern, tbps in PEAK_BANDWIDTH_TBPS:
        if pattern.search(name):
            return tbps * 1e12
    return None


def formula_peak_bandwidth(max_memory_clock_mhz: int, bus_width_bits: int) -> float:
    """Double data rate x bus width: the fallback for GPUs missing from the table."""
    return max_memory_clock_mhz * 1e6 * 2 * bus_width_bits / 8


# --- the snapshot ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcessReading:
    pid: int
    name: str
    used_bytes: int


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    uuid: str
    name: str
    up: bool
    #: Families labelled only by gpu/uuid/name, in base units; only what NVML answered.
    values: Mapping[Family, float] = field(default_factory=dict)
    clock_events: Mapping[str, bool] = field(default_factory=dict)
    ecc: Mapping[str, int] = field(default_factory=dict)
    xid: Mapping[int, int] = field(default_factory=dict)
    #: (bytes/s, "spec" | "clock_x_bus_width")
    peak: tuple[float, str] | None = None
    bandwidth: float | None = None
    processes: tuple[ProcessReading, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    nvml_up: bool
    driver_version: str = ""
    cuda_version: str = ""
    gpus: tuple[GpuReading, ...] = ()


# --- NVML calls with fixed arguments (so each is one cacheable callable) -------------------


def _memory_v2(h: Any) -> Any:
    return N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)


def _memory_v1(h: Any) -> Any:
    return N.nvmlDeviceGetMemoryInfo(h)


def _temperature_v(h: Any) -> Any:
    return N.nvmlDeviceGetTemperatureV(h, N.NVML_TEMPERATURE_GPU)


def _temperature_legacy(h: Any) -> Any:
    return N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU)


def _sm_clock(h: Any) -> Any:
    return N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)


def _memory_clock(h: Any) -> Any:
    return N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM)


def _max_memory_clock(h: Any) -> Any:
    return N.nvmlDeviceGetMaxClockInfo(h, N.NVML_CLOCK_MEM)


def _pcie_rx(h: Any) -> Any:
    return N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_RX_BYTES)


def _pcie_tx(h: Any) -> Any:
    return N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_TX_BYTES)


def _ecc_corrected(h: Any) -> Any:
    return N.nvmlDeviceGetTotalEccErrors(h, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC)


def _ecc_uncorrected(h: Any) -> Any:
    return N.nvmlDeviceGetTotalEccErrors(
        h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC
    )


Read = Callable[..., Any]

# (key, calls newest first, family, factor to base units): one value each.
_SCALARS: tuple[tuple[str, tuple[Read, ...], Family, float], ...] = (
    ("power", (N.nvmlDeviceGetPowerUsage,), metrics.GPU_POWER, 1e-3),  # mW
    ("power_limit", (N.nvmlDeviceGetEnforcedPowerLimit,), metrics.GPU_POWER_LIMIT, 1e-3),
    ("energy", (N.nvmlDeviceGetTotalEnergyConsumption,), metrics.GPU_ENERGY, 1e-3),  # mJ
    ("temperature", (_temperature_v, _temperature_legacy), metrics.GPU_TEMPERATURE, 1.0),
    ("sm_clock", (_sm_clock,), metrics.GPU_SM_CLOCK, 1e6),  # MHz
    ("memory_clock", (_memory_clock,), metrics.GPU_MEMORY_CLOCK, 1e6),
    ("pcie_rx", (_pcie_rx,), metrics.GPU_PCIE_RX, PCIE_KB),  # KB/s
    ("pcie_tx", (_pcie_tx,), metrics.GPU_PCIE_TX, PCIE_KB),
)
_MEMORY = (_memory_v2, _memory_v1)
_CLOCK_EVENTS = (
    N.nvmlDeviceGetCurrentClocksEventReasons,
    N.nvmlDeviceGetCurrentClocksThrottleReasons,
)
_ECC = (("corrected", (_ecc_corrected,)), ("uncorrected", (_ecc_uncorrected,)))
_PROCESSES = (
    N.nvmlDeviceGetComputeRunningProcesses_v3,
    N.nvmlDeviceGetComputeRunningProcesses_v2,
)


# --- session state -----------------------------------------------------------------------


class _SessionLost(Exception):
    """NVML as a whole stopped answering: shut down and initialize again."""


class _GpuLost(Exception):
    """One GPU stopped answering."""


def _address(pointer: Any) -> int:
    """A handle's identity: the opaque pointer NVML gave out."""
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


@dataclass
class _Gpm:
    prev: Any
    cur: Any
    request: Any  # one c_nvmlGpmMetricsGet_t (19 KB) reused every tick
    prev_at: float | None = None
    last: dict[Family, float] = field(default_factory=dict)


@dataclass
class _Gpu:
    index: int
    uuid: str
    name: str
    handle: Any = None
    up: bool = False
    unsupported: set[str] = field(default_factory=set)
    gpm: _Gpm | None = None
    peak: tuple[float, str] | None = None
    peak_done: bool = False


@dataclass
class _Session:
    driver_version: str = ""
    cuda_version: str = ""
    count: int = -1
    gpus: dict[int, _Gpu] = field(default_factory=dict)
    by_handle: dict[int, _Gpu] = field(default_factory=dict)
    events: Any = None
    #: Calls this driver lacks (FunctionNotFound): skipped for every GPU until re-init.
    missing: set[Read] = field(default_factory=set)
    rescan_at: float | None = None


class NvmlSampler:
    """One NVML session, the state kept across ticks (GPM baselines, XID counts) and the last
    snapshot. The GPU check calls tick() from one worker thread; a lock serializes any other
    caller (the benchmark, tests) so two ticks never interleave NVML state."""

    def __init__(
        self,
        devices: Sequence[int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.devices = None if devices is None else sorted(set(devices))
        self._clock = clock
        # Guards against two ticks at once even if a caller forgets to serialize them.
        self._lock = threading.Lock()
        self._s: _Session | None = None
        self._next_init_at = 0.0
        self._init_failures = 0
        self._reported_down = False
        self._rescan_delay = RESCAN_FIRST
        self._closed = False
        # Across sessions, so a driver restart neither resets XID counts nor loses the labels
        # of a GPU that is down when NVML comes back.
        self._xid: dict[str, dict[int, int]] = {}
        self._labels: dict[int, tuple[str, str]] = {}
        self._process_names: dict[int, str] = {}
        #: The last published snapshot; None until the first tick.
        self.snapshot: Snapshot | None = None

    # --- public ----------------------------------------------------------------------------
    def tick(self) -> Snapshot:
        """Sample every GPU once, publish and return the snapshot. Blocks; never raises NVML."""
        with self._lock:
            if self._closed:
                raise RuntimeError("sampler is closed")
            now = self._clock()
            try:
                snap = self._tick(now)
            except _SessionLost as exc:
                self._drop_session(str(exc), now)
                snap = Snapshot(nvml_up=False)
            self.snapshot = snap
            return snap

    def close(self) -> None:
        """Free NVML resources and shut the session down. Idempotent."""
        with self._lock:
            self._closed = True
            if self._s is not None:
                self._close_session()

    # --- session -------------------------------------------------------------------------
    def _tick(self, now: float) -> Snapshot:
        s = self._s
        if s is not None and s.rescan_at is not None and now >= s.rescan_at:
            log.info("re-initializing NVML to look for lost GPUs")
            self._rescan_delay = min(self._rescan_delay * 2, RESCAN_MAX)
            self._close_session()
            self._next_init_at = now
            s = None
        if s is None:
            if now < self._next_init_at:
                return Snapshot(nvml_up=False)
            s = self._open(now)
            if s is None:
                return Snapshot(nvml_up=False)
        return self._sample(s, now)

    def _open(self, now: float) -> _Session | None:
        try:
            N.nvmlInit()
        except N.NVMLError as exc:
            self._init_failed(str(exc), now)
            return None
        s = _Session()
        self._s = s
        try:
            s.driver_version = self._system(N.nvmlSystemGetDriverVersion) or ""
            cuda = self._system(N.nvmlSystemGetCudaDriverVersion)
            s.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else ""
            s.events = self._system(N.nvmlEventSetCreate)
            self._discover(s, self._count())
        except _SessionLost as exc:
            self._drop_session(str(exc), now)
            return None
        self._init_failures = 0
        if self._reported_down or self.snapshot is None:
            log.info(
                "NVML initialized",
                extra={"driver_version": s.driver_version, "gpus": len(s.gpus)},
            )
        self._reported_down = False
        return s

    def _init_failed(self, reason: str, now: float) -> None:
        self._init_failures += 1
        self._next_init_at = now + min(2.0 ** (self._init_failures - 1), INIT_BACKOFF_MAX)
        if not self._reported_down:
            # One line per outage: a host without a GPU must not log every second.
            log.warning(
                "NVML unavailable; GPU series are absent, other checks are unaffected",
                extra={"reason": reason},
            )
            self._reported_down = True

    def _drop_session(self, reason: str, now: float) -> None:
        if self._s is not None:
            self._close_session()
        self._init_failed(reason, now)
        # A driver restart should be picked up on the next tick, not after the back-off.
        self._next_init_at = now if self._init_failures == 1 else self._next_init_at

    def _close_session(self) -> None:
        s, self._s = self._s, None
        if s is None:
            return
        for gpu in s.gpus.values():
            self._free_gpm(gpu)
        # Errors are ignored: after a driver restart the old session has nothing left to free.
        if s.events is not None:
            with contextlib.suppress(N.NVMLError):
                N.nvmlEventSetFree(s.events)
        with contextlib.suppress(N.NVMLError):
            N.nvmlShutdown()

    @staticmethod
    def _fatal(exc: N.NVMLError) -> None:
        if exc.value in _SESSION_ERRORS:
            raise _SessionLost(str(exc)) from exc

    def _system(self, fn: Read, *args: Any) -> Any:
        """A call not tied to one GPU: None if NVML declines it, _SessionLost if NVML is gone."""
        try:
            return fn(*args)
        except N.NVMLError as exc:
            self._fatal(exc)
            return None

    def _count(self) -> int:
        try:
            return int(N.nvmlDeviceGetCount())
        except N.NVMLError as exc:
            # The count is every tick's liveness probe: if it fails, nothing else will work.
            raise _SessionLost(str(exc)) from exc

    def _discover(self, s: _Session, count: int) -> None:
        s.count = count
        wanted = range(count) if self.devices is None else self.devices
        for index in wanted:
            if index >= count:
                if index not in s.gpus:
                    log.warning(
                        "configured GPU index not present",
                        extra={"gpu": index, "gpus_present": count},
                    )
                    s.gpus[index] = _Gpu(index, *self._labels.get(index, ("", "")))
                continue
            if index not in s.gpus or not s.gpus[index].handle:
                s.gpus[index] = self._attach(s, index)

    def _attach(self, s: _Session, index: int) -> _Gpu:
        uuid, name = self._labels.get(index, ("", ""))
        gpu = _Gpu(index, uuid, name)
        try:
            handle = N.nvmlDeviceGetHandleByIndex(index)
            uuid = N.nvmlDeviceGetUUID(handle)
        except N.NVMLError as exc:
            self._fatal(exc)
            return gpu  # down until NVML gives a handle
        name = self._system(N.nvmlDeviceGetName, handle) or name
        gpu.uuid, gpu.name, gpu.handle, gpu.up = uuid, name, handle, True
        self._labels[index] = (uuid, name)
        s.by_handle[_address(handle)] = gpu
        if s.events is not None:
            try:
                N.nvmlDeviceRegisterEvents(handle, N.nvmlEventTypeXidCriticalError, s.events)
            except N.NVMLError as exc:
                self._fatal(exc)  # otherwise: no XID events from this GPU (NotSupported)
        return gpu

    # --- one tick ------------------------------------------------------------------------
    def _sample(self, s: _Session, now: float) -> Snapshot:
        count = self._count()
        if count != s.count:
            self._discover(s, count)
        self._poll_events(s)
        readings = []
        seen_pids: set[int] = set()
        for index in sorted(s.gpus):
            gpu = s.gpus[index]
            if not gpu.up and index < count:
                gpu = self._reattach(s, gpu)
            if gpu.up:
                try:
                    readings.append(self._sample_gpu(s, gpu, seen_pids))
                    continue
                except _GpuLost as exc:
                    self._mark_down(gpu, str(exc))
            readings.append(
                GpuReading(gpu.index, gpu.uuid, gpu.name, up=False, xid=self._xid_of(gpu))
            )
        for pid in self._process_names.keys() - seen_pids:
            del self._process_names[pid]
        if all(g.up for g in s.gpus.values() if g.index < count):
            s.rescan_at = None
            self._rescan_delay = RESCAN_FIRST
        elif s.rescan_at is None:
            s.rescan_at = now + self._rescan_delay
        return Snapshot(True, s.driver_version, s.cuda_version, tuple(readings))

    def _reattach(self, s: _Session, old: _Gpu) -> _Gpu:
        gpu = self._attach(s, old.index)
        if gpu.up:
            s.gpus[old.index] = gpu
            log.info("GPU is back", extra={"gpu": gpu.index, "uuid": gpu.uuid})
            return gpu
        return old

    def _mark_down(self, gpu: _Gpu, reason: str) -> None:
        log.warning(
            "GPU lost; its series are marked down",
            extra={"gpu": gpu.index, "uuid": gpu.uuid, "reason": reason},
        )
        self._free_gpm(gpu)
        gpu.up = False

    def _read(self, s: _Session, gpu: _Gpu, key: str, calls: Iterable[Read], *args: Any) -> Any:
        """The first call the driver has, or None if the value is not available now."""
        if key in gpu.unsupported:
            return None
        for fn in calls:
            if fn in s.missing:
                continue
            try:
                return fn(*args)
            except N.NVMLError as exc:
                code = exc.value
                if code in _MISSING_ERRORS:
                    s.missing.add(fn)
                    continue
                if code in _SESSION_ERRORS:
                    raise _SessionLost(str(exc)) from exc
                if code in _GPU_ERRORS:
                    raise _GpuLost(str(exc)) from exc
                if code == N.NVML_ERROR_NOT_SUPPORTED:
                    gpu.unsupported.add(key)
                return None
            except N.NVMLLibraryMismatchError:
                s.missing.add(fn)
        gpu.unsupported.add(key)  # no call for it in this driver
        return None

    def _sample_gpu(self, s: _Session, gpu: _Gpu, seen_pids: set[int]) -> GpuReading:
        h = gpu.handle
        values: dict[Family, float] = {}
        util = self._read(s, gpu, "utilization", (N.nvmlDeviceGetUtilizationRates,), h)
        if util is not None:
            values[metrics.GPU_UTILIZATION] = util.gpu / 100
            values[metrics.GPU_MEMORY_CONTROLLER_BUSY] = util.memory / 100
        mem = self._read(s, gpu, "memory", _MEMORY, h)
        if mem is not None:
            values[metrics.GPU_MEMORY_USED] = mem.used
            values[metrics.GPU_MEMORY_TOTAL] = mem.total
            if isinstance(mem, N.c_nvmlMemory_v2_t):
                values[metrics.GPU_MEMORY_RESERVED] = mem.reserved
        for key, calls, family, factor in _SCALARS:
            raw = self._read(s, gpu, key, calls, h)
            if raw is not None:
                values[family] = raw * factor
        clock_events: dict[str, bool] = {}
        mask = self._read(s, gpu, "clock_events", _CLOCK_EVENTS, h)
        if mask is not None:
            clock_events = {reason: bool(mask & bit) for bit, reason in CLOCK_EVENT_REASONS}
        ecc: dict[str, int] = {}
        for kind, calls in _ECC:
            count = self._read(s, gpu, "ecc_" + kind, calls, h)
            if count is not None:
                ecc[kind] = count
        values.update(self._gpm(s, gpu))
        if not gpu.peak_done:
            gpu.peak = self._peak(s, gpu)
            gpu.peak_done = True
        bandwidth = None
        dram = values.get(metrics.GPU_DRAM_BANDWIDTH_UTILIZATION)
        if dram is not None and gpu.peak is not None:
            bandwidth = dram * gpu.peak[0]
        return GpuReading(
            gpu.index,
            gpu.uuid,
            gpu.name,
            up=True,
            values=values,
            clock_events=clock_events,
            ecc=ecc,
            xid=self._xid_of(gpu),
            peak=gpu.peak,
            bandwidth=bandwidth,
            processes=self._processes(s, gpu, seen_pids),
        )

    def _peak(self, s: _Session, gpu: _Gpu) -> tuple[float, str] | None:
        spec = spec_peak_bandwidth(gpu.name)
        if spec is not None:
            return spec, "spec"
        clock = self._read(s, gpu, "max_memory_clock", (_max_memory_clock,), gpu.handle)
        width = self._read(s, gpu, "bus_width", (N.nvmlDeviceGetMemoryBusWidth,), gpu.handle)
        if clock and width:
            return formula_peak_bandwidth(clock, width), "clock_x_bus_width"
        return None

    # --- GPM (Hopper and newer) ----------------------------------------------------------
    def _gpm(self, s: _Session, gpu: _Gpu) -> Mapping[Family, float]:
        if "gpm" in gpu.unsupported:
            return {}
        g = gpu.gpm
        if g is None:
            g = gpu.gpm = self._gpm_setup(s, gpu)
            if g is None:
                return {}
        # Window edges are timed after the earlier SampleGet returned and before the later
        # one starts, so the real window is never shorter than the one checked here.
        if g.prev_at is None:
            if self._read(s, gpu, "gpm", (N.nvmlGpmSampleGet,), gpu.handle, g.prev) is not None:
                g.prev_at = self._clock()
            return {}
        if self._clock() - g.prev_at < GPM_MIN_WINDOW:
            return g.last  # ticks closer than NVML's refresh: the last window still stands
        if self._read(s, gpu, "gpm", (N.nvmlGpmSampleGet,), gpu.handle, g.cur) is None:
            return {}
        g.request.sample1, g.request.sample2 = g.prev, g.cur
        done = self._read(s, gpu, "gpm", (N.nvmlGpmMetricsGet,), g.request)
        # The newest sample starts the next window whether or not this one was readable.
        g.prev, g.cur, g.prev_at = g.cur, g.prev, self._clock()
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

    def _gpm_setup(self, s: _Session, gpu: _Gpu) -> _Gpm | None:
        support = self._read(s, gpu, "gpm", (N.nvmlGpmQueryDeviceSupport,), gpu.handle)
        if support is None or not support.isSupportedDevice:
            gpu.unsupported.add("gpm")
            return None
        samples: list[Any] = []
        for _ in range(2):
            sample = self._read(s, gpu, "gpm", (N.nvmlGpmSampleAlloc,))
            if sample is None:
                for allocated in samples:
                    self._system(N.nvmlGpmSampleFree, allocated)
                gpu.unsupported.add("gpm")
                return None
            samples.append(sample)
        request = N.c_nvmlGpmMetricsGet_t()
        request.version = N.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        for i, (metric_id, _) in enumerate(GPM_METRICS):
            request.metrics[i].metricId = metric_id
        return _Gpm(samples[0], samples[1], request)

    def _free_gpm(self, gpu: _Gpu) -> None:
        g, gpu.gpm = gpu.gpm, None
        if g is None:
            return
        for sample in (g.prev, g.cur):
            # Host memory; a dead session or lost GPU leaves nothing more to do on failure.
            with contextlib.suppress(N.NVMLError):
                N.nvmlGpmSampleFree(sample)

    # --- events and processes ------------------------------------------------------------
    def _poll_events(self, s: _Session) -> None:
        if s.events is None:
            return
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                # Zero timeout: drain what is queued, never wait on the worker thread.
                data = N.nvmlEventSetWait_v2(s.events, 0)
            except N.NVMLError as exc:
                self._fatal(exc)
                if exc.value == N.NVML_ERROR_FUNCTION_NOT_FOUND:
                    self._system(N.nvmlEventSetFree, s.events)
                    s.events = None
                return  # Timeout: the queue is empty
            if not data.eventType & N.nvmlEventTypeXidCriticalError:
                continue
            gpu = s.by_handle.get(_address(data.device))
            if gpu is None:
                continue
            counts = self._xid.setdefault(gpu.uuid, {})
            counts[data.eventData] = counts.get(data.eventData, 0) + 1

    def _xid_of(self, gpu: _Gpu) -> Mapping[int, int]:
        counts = self._xid.get(gpu.uuid)
        return dict(counts) if counts else {}

    def _processes(self, s: _Session, gpu: _Gpu, seen_pids: set[int]) -> tuple[ProcessReading, ...]:
        procs = self._read(s, gpu, "processes", _PROCESSES, gpu.handle)
        if not procs:
            return ()
        # A process appears once per MIG instance it uses; the GPU total is their sum.
        used: dict[int, int] = {}
        for p in procs:
            if p.usedGpuMemory is not None:
                used[p.pid] = used.get(p.pid, 0) + p.usedGpuMemory
        top = sorted(used.items(), key=lambda item: (-item[1], item[0]))[:MAX_PROCESSES]
        seen_pids.update(pid for pid, _ in top)
        return tuple(ProcessReading(pid, self._process_name(pid), b) for pid, b in top)

    def _process_name(self, pid: int) -> str:
        name = self._process_names.get(pid)
        if name is None:
            full = self._system(N.nvmlSystemGetProcessName, pid) or ""
            name = self._process_names[pid] = os.path.basename(full)[:PROCESS_NAME_MAX]
        return name
