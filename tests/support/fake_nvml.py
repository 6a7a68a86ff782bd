"""A scripted stand-in for libnvidia-ml.so.1, installed as ``pynvml.nvmlLib``.

nvidia-ml-py looks each C function up with ``getattr(nvmlLib, name)`` and calls it with
ctypes arguments, so this object answers at that layer: it writes results through the
``byref()`` pointers, struct fields and string buffers it is handed, and returns
``NVML_ERROR_*`` codes. The real wrappers, structs and error classes all run; only the
driver is scripted. Handles are opaque pointer values written into the caller's
``nvmlDevice_t``, as the real library does, so a stale handle from before a driver restart
is detectably stale.

Scripting: per-GPU values and ``not_supported`` symbols on ``FakeGpu``; ``missing`` symbols
(an old driver) on ``FakeNvml``; ``lose``/``regain`` a GPU; ``unload_driver``/``load_driver``;
queue XID events with ``xid``. Bookkeeping the tests assert on: ``calls`` per symbol, the
threads that called, live GPM samples and event sets, the session refcount, every event-wait
timeout, the GPM sample pairs and any GPM window shorter than NVML's 100 ms.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml as N

# pynvml ships no types, so its constants read as Any; the C return codes the fake answers
# with are ints, typed once here.
OK: int = N.NVML_SUCCESS
NVML_ERROR_ARGUMENT_VERSION_MISMATCH: int = N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
NVML_ERROR_DRIVER_NOT_LOADED: int = N.NVML_ERROR_DRIVER_NOT_LOADED
NVML_ERROR_GPU_IS_LOST: int = N.NVML_ERROR_GPU_IS_LOST
NVML_ERROR_INSUFFICIENT_SIZE: int = N.NVML_ERROR_INSUFFICIENT_SIZE
NVML_ERROR_INVALID_ARGUMENT: int = N.NVML_ERROR_INVALID_ARGUMENT
NVML_ERROR_NOT_FOUND: int = N.NVML_ERROR_NOT_FOUND
NVML_ERROR_NOT_SUPPORTED: int = N.NVML_ERROR_NOT_SUPPORTED
NVML_ERROR_TIMEOUT: int = N.NVML_ERROR_TIMEOUT
NVML_ERROR_UNINITIALIZED: int = N.NVML_ERROR_UNINITIALIZED

HANDLE_BASE = 0x7F0000000000
EPOCH_STRIDE = 0x100000
GPU_STRIDE = 0x1000

F = TypeVar("F", bound=Callable[..., int])


@dataclass
class FakeGpu:
    name: str
    uuid: str
    util_gpu: int = 0  # percent
    util_memory: int = 0
    memory_total: int = 0  # bytes
    memory_reserved: int = 0
    memory_used: int = 0
    power_mw: int = 0
    power_limit_mw: int = 0
    energy_mj: int = 0
    temperature_c: int = 0
    sm_clock_mhz: int = 0
    memory_clock_mhz: int = 0
    max_memory_clock_mhz: int = 0
    memory_bus_width: int = 0
    pcie_rx_kbs: int = 0
    pcie_tx_kbs: int = 0
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    pcie_replays: int = 0
    #: Each NVLink's state (True: active); None: no NVLink (NotSupported).
    nvlink: list[bool] | None = None
    #: (link, NVML error counter) -> count; unlisted counters read 0.
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    clock_event_reasons: int = 0
    ecc_corrected: int | None = None  # None: no ECC (answers NotSupported)
    ecc_uncorrected: int | None = None
    gpm: dict[int, float] | None = None  # metric id -> percent; None: pre-Hopper
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    not_supported: set[str] = field(default_factory=set)  # C symbols answering NotSupported
    lost: bool = False
    #: A regained GPU that only a fresh nvmlInit enumerates again (after a reset).
    hidden_until_init: int = 0


def _write_str(buf: Any, length: Any, text: str) -> int:
    data = text.encode() + b"\0"
    if len(data) > length.value:
        return NVML_ERROR_INSUFFICIENT_SIZE
    ctypes.memmove(buf, data, len(data))
    return OK


def _set_pointer(address: int, value: int) -> None:
    """Store a pointer-sized value at address: what C's ``*out = handle`` does."""
    ctypes.c_void_p.from_address(address).value = value


def _pointer_value(pointer: Any) -> int:
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


def _device(fn: F) -> F:
    """Resolve the handle argument to its FakeGpu, answering for stale, lost and scripted
    NotSupported calls the way the driver would."""
    symbol = fn.__name__.removeprefix("_c_")

    @functools.wraps(fn)
    def wrapper(self: FakeNvml, handle: Any, *args: Any) -> int:
        gpu = self.resolve(handle)
        if isinstance(gpu, int):
            return gpu
        if symbol in gpu.not_supported:
            return NVML_ERROR_NOT_SUPPORTED
        return fn(self, gpu, *args)

    return wrapper  # type: ignore[return-value]


class FakeNvml:
    def __init__(
        self,
        gpus: Iterable[FakeGpu],
        driver_version: str = "550.54.15",
        cuda_version: int = 12040,
        missing: Iterable[str] = (),
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.gpus = list(gpus)
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.missing = set(missing)
        self.clock = clock or (lambda: 0.0)
        self.process_names: dict[int, str] = {}
        self.driver_loaded = True
        self.epoch = 0
        self.refcount = 0
        self.inits = 0
        self.calls: Counter[str] = Counter()
        self.threads: set[int] = set()
        self.active = 0
        self.max_active = 0
        self.block: threading.Event | None = None  # while set to an unset Event, calls wait
        self._lock = threading.Lock()
        self._next_id = 1
        self.event_sets: dict[int, set[int]] = {}  # live set id -> registered GPU indexes
        self.pending_events: list[tuple[int, int, int]] = []  # (gpu index, type, data)
        self.wait_timeouts: list[int] = []
        self.gpm_samples: dict[int, tuple[int, int, float] | None] = {}  # id -> (gpu, seq, t)
        self.gpm_pairs: list[tuple[int, int, int]] = []  # (gpu, sample1 seq, sample2 seq)
        self.gpm_short_windows: list[float] = []
        self._gpm_seq = 0

    # --- scripting -------------------------------------------------------------------------
    def lose(self, index: int) -> None:
        self.gpus[index].lost = True

    def regain(self, index: int, needs_init: bool = False) -> None:
        self.gpus[index].lost = False
        self.gpus[index].hidden_until_init = self.inits + 1 if needs_init else 0

    def xid(self, index: int, code: int) -> None:
        self.pending_events.append((index, N.nvmlEventTypeXidCriticalError, code))

    def unload_driver(self) -> None:
        self.driver_loaded = False

    def load_driver(self) -> None:
        """A new driver instance: old sessions, handles, samples and event sets are void."""
        self.driver_loaded = True
        self.epoch += 1
        self.refcount = 0
        self.event_sets.clear()
        self.gpm_samples.clear()

    # --- the library surface ---------------------------------------------------------------
    def __getattr__(self, name: str) -> Callable[..., Any]:
        impl = getattr(type(self), "_c_" + name, None) if name.startswith("nvml") else None
        if impl is None or name in self.missing:
            raise AttributeError(name)  # pynvml turns this into FunctionNotFound

        # A plain function, not a bound method: pynvml sets attributes such as restype on it.
        def c_function(*args: Any) -> Any:
            with self._lock:
                self.calls[name] += 1
                self.threads.add(threading.get_ident())
                self.active += 1
                self.max_active = max(self.max_active, self.active)
            try:
                if self.block is not None:
                    self.block.wait()
                if name not in ("nvmlInitWithFlags", "nvmlErrorString"):
                    if not self.driver_loaded:
                        return NVML_ERROR_DRIVER_NOT_LOADED
                    if self.refcount == 0:
                        return NVML_ERROR_UNINITIALIZED
                return impl(self, *args)
            finally:
                with self._lock:
                    self.active -= 1

        c_function.__name__ = name
        return c_function

    def handle_of(self, index: int) -> int:
        return HANDLE_BASE + self.epoch * EPOCH_STRIDE + index * GPU_STRIDE

    def resolve(self, handle: Any) -> FakeGpu | int:
        offset = _pointer_value(handle) - HANDLE_BASE - self.epoch * EPOCH_STRIDE
        index, rest = divmod(offset, GPU_STRIDE)
        if rest or not 0 <= index < len(self.gpus):
            return NVML_ERROR_INVALID_ARGUMENT  # a handle from an earlier driver instance
        gpu = self.gpus[index]
        return NVML_ERROR_GPU_IS_LOST if gpu.lost else gpu

    def _new_id(self) -> int:
        self._next_id += 1
        return HANDLE_BASE // 2 + self._next_id * 16

    # --- init and system -------------------------------------------------------------------
    def _c_nvmlInitWithFlags(self, flags: int) -> int:
        if not self.driver_loaded:
            return NVML_ERROR_DRIVER_NOT_LOADED
        self.refcount += 1
        self.inits += 1
        return OK

    def _c_nvmlShutdown(self) -> int:
        self.refcount -= 1
        return OK

    def _c_nvmlErrorString(self, code: int) -> bytes:
        return b"fake NVML error %d" % code

    def _c_nvmlSystemGetDriverVersion(self, buf: Any, length: Any) -> int:
        return _write_str(buf, length, self.driver_version)

    def _c_nvmlSystemGetCudaDriverVersion(self, out: Any) -> int:
        out._obj.value = self.cuda_version
        return OK

    def _c_nvmlSystemGetProcessName(self, pid: Any, buf: Any, length: Any) -> int:
        name = self.process_names.get(pid.value)
        if name is None:
            return NVML_ERROR_NOT_FOUND
        return _write_str(buf, length, name)

    def _c_nvmlDeviceGetCount_v2(self, out: Any) -> int:
        out._obj.value = len(self.gpus)
        return OK

    def _c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, out: Any) -> int:
        i = index.value
        if i >= len(self.gpus):
            return NVML_ERROR_INVALID_ARGUMENT
        gpu = self.gpus[i]
        if gpu.lost or self.inits < gpu.hidden_until_init:
            return NVML_ERROR_GPU_IS_LOST
        _set_pointer(ctypes.addressof(out._obj), self.handle_of(i))
        return OK

    # --- per-device reads ------------------------------------------------------------------
    @_device
    def _c_nvmlDeviceGetName(self, gpu: FakeGpu, buf: Any, length: Any) -> int:
        return _write_str(buf, length, gpu.name)

    @_device
    def _c_nvmlDeviceGetUUID(self, gpu: FakeGpu, buf: Any, length: Any) -> int:
        return _write_str(buf, length, gpu.uuid)

    @_device
    def _c_nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.gpu, out._obj.memory = gpu.util_gpu, gpu.util_memory
        return OK

    @_device
    def _c_nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu, out: Any) -> int:
        # v1 has no reserved field: the driver counts reserved memory as used.
        m = out._obj
        m.total = gpu.memory_total
        m.used = gpu.memory_used + gpu.memory_reserved
        m.free = gpu.memory_total - m.used
        return OK

    @_device
    def _c_nvmlDeviceGetMemoryInfo_v2(self, gpu: FakeGpu, out: Any) -> int:
        m = out._obj
        if m.version != N.nvmlMemory_v2:
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        m.total, m.reserved, m.used = gpu.memory_total, gpu.memory_reserved, gpu.memory_used
        m.free = gpu.memory_total - gpu.memory_used - gpu.memory_reserved
        return OK

    @_device
    def _c_nvmlDeviceGetPowerUsage(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.power_mw
        return OK

    @_device
    def _c_nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.power_limit_mw
        return OK

    @_device
    def _c_nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.energy_mj
        return OK

    @_device
    def _c_nvmlDeviceGetTemperatureV(self, gpu: FakeGpu, out: Any) -> int:
        t = out._obj
        if t.version != N.nvmlTemperature_v1:
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if t.sensorType != N.NVML_TEMPERATURE_GPU:
            return NVML_ERROR_INVALID_ARGUMENT
        t.temperature = gpu.temperature_c
        return OK

    @_device
    def _c_nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: Any, out: Any) -> int:
        if sensor.value != N.NVML_TEMPERATURE_GPU:
            return NVML_ERROR_INVALID_ARGUMENT
        out._obj.value = gpu.temperature_c
        return OK

    @_device
    def _c_nvmlDeviceGetClockInfo(self, gpu: FakeGpu, kind: Any, out: Any) -> int:
        clocks = {N.NVML_CLOCK_SM: gpu.sm_clock_mhz, N.NVML_CLOCK_MEM: gpu.memory_clock_mhz}
        if kind.value not in clocks:
            return NVML_ERROR_INVALID_ARGUMENT
        out._obj.value = clocks[kind.value]
        return OK

    @_device
    def _c_nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, kind: Any, out: Any) -> int:
        if kind.value != N.NVML_CLOCK_MEM:
            return NVML_ERROR_INVALID_ARGUMENT
        out._obj.value = gpu.max_memory_clock_mhz
        return OK

    @_device
    def _c_nvmlDeviceGetMemoryBusWidth(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.memory_bus_width
        return OK

    @_device
    def _c_nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: Any, out: Any) -> int:
        values = {
            N.NVML_PCIE_UTIL_RX_BYTES: gpu.pcie_rx_kbs,
            N.NVML_PCIE_UTIL_TX_BYTES: gpu.pcie_tx_kbs,
        }
        if counter.value not in values:
            return NVML_ERROR_INVALID_ARGUMENT
        out._obj.value = values[counter.value]
        return OK

    @_device
    def _c_nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.pcie_gen
        return OK

    @_device
    def _c_nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.pcie_gen_max
        return OK

    @_device
    def _c_nvmlDeviceGetCurrPcieLinkWidth(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.pcie_width
        return OK

    @_device
    def _c_nvmlDeviceGetMaxPcieLinkWidth(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.pcie_width_max
        return OK

    @_device
    def _c_nvmlDeviceGetPcieReplayCounter(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.pcie_replays
        return OK

    @_device
    def _c_nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: Any, out: Any) -> int:
        if gpu.nvlink is None:
            return NVML_ERROR_NOT_SUPPORTED
        # pynvml passes the link and the counter as plain ints.
        if not 0 <= link < len(gpu.nvlink):
            return NVML_ERROR_INVALID_ARGUMENT  # as the driver answers past the GPU's links
        out._obj.value = int(gpu.nvlink[link])
        return OK

    @_device
    def _c_nvmlDeviceGetNvLinkErrorCounter(self, gpu: FakeGpu, link: Any, counter: Any,
                                           out: Any) -> int:
        if gpu.nvlink is None or not 0 <= link < len(gpu.nvlink):
            return NVML_ERROR_INVALID_ARGUMENT
        out._obj.value = gpu.nvlink_errors.get((link, counter), 0)
        return OK

    @_device
    def _c_nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.clock_event_reasons
        return OK

    @_device
    def _c_nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: FakeGpu, out: Any) -> int:
        out._obj.value = gpu.clock_event_reasons
        return OK

    @_device
    def _c_nvmlDeviceGetTotalEccErrors(
        self, gpu: FakeGpu, error_type: Any, counter_type: Any, out: Any
    ) -> int:
        if counter_type.value not in (N.NVML_VOLATILE_ECC, N.NVML_AGGREGATE_ECC):
            return NVML_ERROR_INVALID_ARGUMENT
        value = {
            N.NVML_MEMORY_ERROR_TYPE_CORRECTED: gpu.ecc_corrected,
            N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: gpu.ecc_uncorrected,
        }.get(error_type.value, -1)
        if value == -1:
            return NVML_ERROR_INVALID_ARGUMENT
        if value is None:
            return NVML_ERROR_NOT_SUPPORTED
        out._obj.value = value
        return OK

    def _processes(self, gpu: FakeGpu, count: Any, array: Any) -> int:
        n = len(gpu.processes)
        if array is None:
            count._obj.value = n
            return OK if n == 0 else NVML_ERROR_INSUFFICIENT_SIZE
        if count._obj.value < n:
            count._obj.value = n
            return NVML_ERROR_INSUFFICIENT_SIZE
        for slot, (pid, used) in zip(array, gpu.processes, strict=False):
            slot.pid = pid
            slot.usedGpuMemory = (
                N.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used
            )
            slot.gpuInstanceId = slot.computeInstanceId = 0xFFFFFFFF
        count._obj.value = n
        return OK

    @_device
    def _c_nvmlDeviceGetComputeRunningProcesses_v3(
        self, gpu: FakeGpu, count: Any, array: Any
    ) -> int:
        return self._processes(gpu, count, array)

    @_device
    def _c_nvmlDeviceGetComputeRunningProcesses_v2(
        self, gpu: FakeGpu, count: Any, array: Any
    ) -> int:
        return self._processes(gpu, count, array)

    # --- events ----------------------------------------------------------------------------
    def _c_nvmlEventSetCreate(self, out: Any) -> int:
        es = self._new_id()
        self.event_sets[es] = set()
        _set_pointer(ctypes.addressof(out._obj), es)
        return OK

    def _c_nvmlEventSetFree(self, es: Any) -> int:
        if self.event_sets.pop(_pointer_value(es), None) is None:
            return NVML_ERROR_INVALID_ARGUMENT
        return OK

    @_device
    def _c_nvmlDeviceRegisterEvents(self, gpu: FakeGpu, types: Any, es: Any) -> int:
        registered = self.event_sets.get(_pointer_value(es))
        if registered is None:
            return NVML_ERROR_INVALID_ARGUMENT
        if types.value & ~N.nvmlEventTypeXidCriticalError:
            return NVML_ERROR_NOT_SUPPORTED
        registered.add(self.gpus.index(gpu))
        return OK

    def _c_nvmlEventSetWait_v2(self, es: Any, out: Any, timeout_ms: Any) -> int:
        registered = self.event_sets.get(_pointer_value(es))
        if registered is None:
            return NVML_ERROR_INVALID_ARGUMENT
        self.wait_timeouts.append(timeout_ms.value)
        for k, (index, kind, data) in enumerate(self.pending_events):
            if index in registered:
                del self.pending_events[k]
                ev = out._obj
                _set_pointer(
                    ctypes.addressof(ev) + N.c_nvmlEventData_t.device.offset, self.handle_of(index)
                )
                ev.eventType, ev.eventData = kind, data
                ev.gpuInstanceId = ev.computeInstanceId = 0xFFFFFFFF
                return OK
        return NVML_ERROR_TIMEOUT

    # --- GPM -------------------------------------------------------------------------------
    @_device
    def _c_nvmlGpmQueryDeviceSupport(self, gpu: FakeGpu, out: Any) -> int:
        if out._obj.version != N.NVML_GPM_SUPPORT_VERSION:
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        out._obj.isSupportedDevice = int(gpu.gpm is not None)
        return OK

    def _c_nvmlGpmSampleAlloc(self, out: Any) -> int:
        sample = self._new_id()
        self.gpm_samples[sample] = None
        _set_pointer(ctypes.addressof(out._obj), sample)
        return OK

    def _c_nvmlGpmSampleFree(self, sample: Any) -> int:
        if _pointer_value(sample) not in self.gpm_samples:
            return NVML_ERROR_INVALID_ARGUMENT
        del self.gpm_samples[_pointer_value(sample)]
        return OK

    @_device
    def _c_nvmlGpmSampleGet(self, gpu: FakeGpu, sample: Any) -> int:
        sid = _pointer_value(sample)
        if sid not in self.gpm_samples:
            return NVML_ERROR_INVALID_ARGUMENT
        if gpu.gpm is None:
            return NVML_ERROR_NOT_SUPPORTED
        self._gpm_seq += 1
        self.gpm_samples[sid] = (self.gpus.index(gpu), self._gpm_seq, self.clock())
        return OK

    def _c_nvmlGpmMetricsGet(self, out: Any) -> int:
        req = out._obj
        if req.version != N.NVML_GPM_METRICS_GET_VERSION:
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        first = self.gpm_samples.get(_pointer_value(req.sample1))
        second = self.gpm_samples.get(_pointer_value(req.sample2))
        if first is None or second is None or first[0] != second[0] or first[1] >= second[1]:
            return NVML_ERROR_INVALID_ARGUMENT
        if second[2] - first[2] < 0.1:
            self.gpm_short_windows.append(second[2] - first[2])
        self.gpm_pairs.append((first[0], first[1], second[1]))
        values = self.gpus[first[0]].gpm or {}
        for i in range(req.numMetrics):
            metric = req.metrics[i]
            if metric.metricId in values:
                metric.value, metric.nvmlReturn = values[metric.metricId], OK
            else:
                metric.value, metric.nvmlReturn = 0.0, NVML_ERROR_NOT_SUPPORTED
        return OK


# --- GPU profiles: distinct values per GPU so a mixed-up index or unit shows ----------------

GiB = 1024**3


def h200(uuid: str = "GPU-h200-0000") -> FakeGpu:
    return FakeGpu(
        name="NVIDIA H200", uuid=uuid, util_gpu=87, util_memory=42, memory_total=150_754_820_096,
        memory_reserved=567_279_616, memory_used=128 * GiB, power_mw=512_345,
        power_limit_mw=700_000, energy_mj=987_654_321, temperature_c=61, sm_clock_mhz=1980,
        memory_clock_mhz=3201, max_memory_clock_mhz=3201, memory_bus_width=6144,
        pcie_rx_kbs=1_234_567, pcie_tx_kbs=234_567,
        clock_event_reasons=N.nvmlClocksEventReasonSwPowerCap, ecc_corrected=3, ecc_uncorrected=0,
        gpm={N.NVML_GPM_METRIC_DRAM_BW_UTIL: 63.5, N.NVML_GPM_METRIC_SM_UTIL: 91.25,
             N.NVML_GPM_METRIC_SM_OCCUPANCY: 37.5, N.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 55.0},
        processes=[(4242, 120 * GiB), (4343, 6 * GiB)],
        # 18 NVLinks, link 3 having replayed 12 packets.
        nvlink=[True] * 18, nvlink_errors={(3, N.NVML_NVLINK_ERROR_DL_REPLAY): 12},
    )


def h100(uuid: str = "GPU-h100-0001") -> FakeGpu:
    return FakeGpu(
        name="NVIDIA H100 80GB HBM3", uuid=uuid, util_gpu=100, util_memory=71,
        memory_total=85_520_809_984, memory_reserved=536_870_912, memory_used=70 * GiB,
        power_mw=650_100, power_limit_mw=700_000, energy_mj=555_000_111, temperature_c=70,
        sm_clock_mhz=1755, memory_clock_mhz=2619, max_memory_clock_mhz=2619, memory_bus_width=5120,
        pcie_rx_kbs=4_000, pcie_tx_kbs=3_000,
        clock_event_reasons=N.nvmlClocksEventReasonSwPowerCap
        | N.nvmlClocksEventReasonSwThermalSlowdown,
        ecc_corrected=0, ecc_uncorrected=1,
        gpm={N.NVML_GPM_METRIC_DRAM_BW_UTIL: 80.0, N.NVML_GPM_METRIC_SM_UTIL: 99.0,
             N.NVML_GPM_METRIC_SM_OCCUPANCY: 48.0, N.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 70.5},
        processes=[(5001, 70 * GiB)],
    )


def a100_80gb(uuid: str = "GPU-a100-0002") -> FakeGpu:
    return FakeGpu(
        name="NVIDIA A100-SXM4-80GB", uuid=uuid, util_gpu=33, util_memory=12,
        memory_total=85_899_345_920, memory_reserved=629_145_600, memory_used=40 * GiB,
        power_mw=250_750, power_limit_mw=400_000, energy_mj=123_456_789, temperature_c=48,
        sm_clock_mhz=1410, memory_clock_mhz=1593, max_memory_clock_mhz=1593, memory_bus_width=5120,
        pcie_rx_kbs=10_240, pcie_tx_kbs=5_120, clock_event_reasons=N.nvmlClocksEventReasonGpuIdle,
        ecc_corrected=7, ecc_uncorrected=0, gpm=None, processes=[(6001, 40 * GiB)],
        pcie_gen=4, pcie_gen_max=4, nvlink=[True] * 12,
    )


def l40s(uuid: str = "GPU-l40s-0003") -> FakeGpu:
    return FakeGpu(
        name="NVIDIA L40S", uuid=uuid, util_gpu=55, util_memory=60, memory_total=48_305_799_168,
        memory_reserved=500_000_000, memory_used=30 * GiB, power_mw=300_500, power_limit_mw=350_000,
        energy_mj=42_000_000, temperature_c=66, sm_clock_mhz=2520, memory_clock_mhz=9001,
        max_memory_clock_mhz=9001, memory_bus_width=384, pcie_rx_kbs=800, pcie_tx_kbs=900,
        clock_event_reasons=0, ecc_corrected=0, ecc_uncorrected=0, processes=[(7001, 30 * GiB)],
    )


def rtx4090(uuid: str = "GPU-4090-0004") -> FakeGpu:
    return FakeGpu(
        name="NVIDIA GeForce RTX 4090", uuid=uuid, util_gpu=97, util_memory=88,
        memory_total=25_757_220_864, memory_reserved=400_000_000, memory_used=22 * GiB,
        power_mw=420_000, power_limit_mw=450_000, energy_mj=7_000_000, temperature_c=74,
        sm_clock_mhz=2745, memory_clock_mhz=10501, max_memory_clock_mhz=10501, memory_bus_width=384,
        pcie_rx_kbs=50, pcie_tx_kbs=60, clock_event_reasons=N.nvmlClocksEventReasonHwSlowdown,
        # A consumer board: no ECC.
        ecc_corrected=None, ecc_uncorrected=None, processes=[(8001, 22 * GiB)],
    )


def v100(uuid: str = "GPU-v100-0005") -> FakeGpu:
    return FakeGpu(
        name="Tesla V100-SXM2-32GB", uuid=uuid, util_gpu=10, util_memory=5,
        memory_total=34_359_738_368, memory_reserved=300_000_000, memory_used=4 * GiB,
        power_mw=90_000, power_limit_mw=300_000, energy_mj=1_000_000_000, temperature_c=40,
        sm_clock_mhz=1530, memory_clock_mhz=877, max_memory_clock_mhz=877, memory_bus_width=4096,
        pcie_rx_kbs=100, pcie_tx_kbs=200, clock_event_reasons=N.nvmlClocksEventReasonGpuIdle,
        ecc_corrected=1, ecc_uncorrected=0, processes=[],
    )


def t4(uuid: str = "GPU-t4-00006") -> FakeGpu:
    return FakeGpu(
        name="Tesla T4", uuid=uuid, util_gpu=25, util_memory=20, memory_total=16_106_127_360,
        memory_reserved=250_000_000, memory_used=3 * GiB, power_mw=35_000, power_limit_mw=70_000,
        energy_mj=9_000_000, temperature_c=52, sm_clock_mhz=1590, memory_clock_mhz=5000,
        max_memory_clock_mhz=5001, memory_bus_width=256, pcie_rx_kbs=300, pcie_tx_kbs=400,
        clock_event_reasons=N.nvmlClocksEventReasonSwThermalSlowdown, ecc_corrected=0,
        ecc_uncorrected=0, processes=[(9001, 3 * GiB)], pcie_gen=3, pcie_gen_max=3,
    )


def gh200(uuid: str = "GPU-gh200-007") -> FakeGpu:
    """A Hopper the peak table does not know, so its peak comes from clock x bus width."""
    gpu = h100(uuid)
    gpu.name = "NVIDIA GH200 480GB"
    gpu.max_memory_clock_mhz = 2619
    gpu.memory_bus_width = 6144
    gpu.processes = [(9901, 90 * GiB)]
    return gpu


def eight_mixed() -> list[FakeGpu]:
    """H200, H100, A100, L40S, RTX 4090, V100, T4, GH200: Volta to Hopper, with and without
    GPM, ECC and a datasheet peak."""
    return [h200(), h100(), a100_80gb(), l40s(), rtx4090(), v100(), t4(), gh200()]


PROCESS_NAMES = {
    4242: "/opt/vllm/bin/python3",
    4343: "tritonserver",
    5001: "/usr/bin/python3.11",
    6001: "sglang",
    7001: "trtllm-serve",
    8001: "python",
    9001: "python",
    9901: "/usr/local/bin/vllm",
}

#: Symbols a driver older than R510 lacks, of those the exporter tries first.
OLD_DRIVER_MISSING = frozenset(
    {
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlGpmQueryDeviceSupport",
        "nvmlGpmSampleAlloc",
        "nvmlGpmSampleFree",
        "nvmlGpmSampleGet",
        "nvmlGpmMetricsGet",
    }
)
