"""What the GPU check asks NVML: the calls behind each value (newest first, then the older
ones a driver may have instead), the bit and id tables, and how NVML's errors are sorted.

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

from collections.abc import Callable, Iterable
from typing import Any

import pynvml as N

from exporter import metrics
from exporter.metrics import Family

#: NVML reports PCIe throughput in "KB/s"; like nvitop and most NVML consumers we read KiB.
PCIE_KB = 1024

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


def max_memory_clock(h: Any) -> Any:
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
SCALARS: tuple[tuple[str, tuple[Read, ...], Family, float], ...] = (
    ("power", (N.nvmlDeviceGetPowerUsage,), metrics.GPU_POWER, 1e-3),  # mW
    ("power_limit", (N.nvmlDeviceGetEnforcedPowerLimit,), metrics.GPU_POWER_LIMIT, 1e-3),
    ("energy", (N.nvmlDeviceGetTotalEnergyConsumption,), metrics.GPU_ENERGY, 1e-3),  # mJ
    ("temperature", (_temperature_v, _temperature_legacy), metrics.GPU_TEMPERATURE, 1.0),
    ("sm_clock", (_sm_clock,), metrics.GPU_SM_CLOCK, 1e6),  # MHz
    ("memory_clock", (_memory_clock,), metrics.GPU_MEMORY_CLOCK, 1e6),
    ("pcie_rx", (_pcie_rx,), metrics.GPU_PCIE_RX, PCIE_KB),  # KB/s
    ("pcie_tx", (_pcie_tx,), metrics.GPU_PCIE_TX, PCIE_KB),
    ("pcie_gen", (N.nvmlDeviceGetCurrPcieLinkGeneration,), metrics.GPU_PCIE_LINK_GENERATION,
     1.0),
    ("pcie_gen_max", (N.nvmlDeviceGetMaxPcieLinkGeneration,),
     metrics.GPU_PCIE_LINK_GENERATION_MAX, 1.0),
    ("pcie_width", (N.nvmlDeviceGetCurrPcieLinkWidth,), metrics.GPU_PCIE_LINK_WIDTH, 1.0),
    ("pcie_width_max", (N.nvmlDeviceGetMaxPcieLinkWidth,), metrics.GPU_PCIE_LINK_WIDTH_MAX,
     1.0),
    ("pcie_replays", (N.nvmlDeviceGetPcieReplayCounter,), metrics.GPU_PCIE_REPLAYS, 1.0),
)
#: NVML's NVLink error counters, in the order of metrics.NVLINK_ERROR_KINDS.
NVLINK_ERRORS = tuple(zip(
    metrics.NVLINK_ERROR_KINDS,
    (N.NVML_NVLINK_ERROR_DL_REPLAY, N.NVML_NVLINK_ERROR_DL_RECOVERY,
     N.NVML_NVLINK_ERROR_DL_CRC_FLIT, N.NVML_NVLINK_ERROR_DL_CRC_DATA),
    strict=True))
#: Links NVML numbers at most (a GPU answers for the ones it has).
NVLINK_MAX_LINKS = N.NVML_NVLINK_MAX_LINKS
MEMORY_CALLS = (_memory_v2, _memory_v1)
CLOCK_EVENT_CALLS = (
    N.nvmlDeviceGetCurrentClocksEventReasons,
    N.nvmlDeviceGetCurrentClocksThrottleReasons,
)
ECC_CALLS = (("corrected", (_ecc_corrected,)), ("uncorrected", (_ecc_uncorrected,)))
PROCESS_CALLS = (
    N.nvmlDeviceGetComputeRunningProcesses_v3,
    N.nvmlDeviceGetComputeRunningProcesses_v2,
)


# --- calls and their errors ----------------------------------------------------------------


class SessionLost(Exception):
    """NVML as a whole stopped answering: shut down and initialize again."""


class GpuLost(Exception):
    """One GPU stopped answering."""


def fatal(exc: N.NVMLError) -> None:
    if exc.value in _SESSION_ERRORS:
        raise SessionLost(str(exc)) from exc


def system(fn: Read, *args: Any) -> Any:
    """A call not tied to one GPU: None if NVML declines it, SessionLost if NVML is gone."""
    try:
        return fn(*args)
    except N.NVMLError as exc:
        fatal(exc)
        return None


def read(
    missing: set[Read], unsupported: set[str], key: str, calls: Iterable[Read], *args: Any
) -> Any:
    """The first of ``calls`` the driver has, or None if the value is not available now.

    ``missing`` is the session's set of calls this driver lacks, ``unsupported`` the GPU's set
    of values it does not have; both grow here so that neither is asked again.
    """
    if key in unsupported:
        return None
    for fn in calls:
        if fn in missing:
            continue
        try:
            return fn(*args)
        except N.NVMLError as exc:
            code = exc.value
            if code in _MISSING_ERRORS:
                missing.add(fn)
                continue
            if code in _SESSION_ERRORS:
                raise SessionLost(str(exc)) from exc
            if code in _GPU_ERRORS:
                raise GpuLost(str(exc)) from exc
            if code == N.NVML_ERROR_NOT_SUPPORTED:
                unsupported.add(key)
            return None
        except N.NVMLLibraryMismatchError:
            missing.add(fn)
    unsupported.add(key)  # no call for it in this driver
    return None
