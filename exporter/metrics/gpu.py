"""The GPU families (NVML).

Read by exporter/checks/gpu/check.py. Per-GPU series carry `gpu` (NVML index), `uuid` and `name`.
A value NVML does not provide for a GPU (NotSupported, FunctionNotFound on an old driver,
no permission) is absent for that GPU, never 0; while llm_gpu_nvml_up is 0 every other
llm_gpu_* series is absent. docs/gpu.md explains utilization vs bandwidth.
"""

from __future__ import annotations

from exporter.metrics.schema import Kind, define

GPU_LABELS = ("gpu", "uuid", "name")

GPU_NVML_UP = define(
    "llm_gpu_nvml_up",
    Kind.GAUGE,
    "1 while the NVML library is loaded and initialized; 0 when it cannot be (no driver, "
    "no libnvidia-ml.so.1, driver restarting). While 0 the other llm_gpu_* series are absent.",
    section="gpu",
)
GPU_INFO = define(
    "llm_gpu_info",
    Kind.GAUGE,
    "Always 1 while NVML is up; labels carry the driver version and the CUDA version the "
    "driver supports (e.g. 12.4; empty if NVML does not report it).",
    ("driver_version", "cuda_version"),
    section="gpu",
)
GPU_UP = define(
    "llm_gpu_up",
    Kind.GAUGE,
    "1 while the GPU answers NVML; 0 after it was lost (fell off the bus, needs a reset). "
    "While 0 its data series are absent (XID counts stay); it returns to 1 when NVML sees "
    "the GPU again.",
    GPU_LABELS,
    section="gpu",
)
GPU_UTILIZATION = define(
    "llm_gpu_utilization_ratio",
    Kind.GAUGE,
    "Fraction of NVML's last sample period (1/6 s to 1 s by product) during which one or more "
    "kernels was running on the GPU. Not how busy the SMs are: one small kernel running all "
    "the time reads 1. See llm_gpu_sm_active_ratio (Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_CONTROLLER_BUSY = define(
    "llm_gpu_memory_controller_busy_ratio",
    Kind.GAUGE,
    "Fraction of NVML's last sample period during which device memory was being read or "
    "written. A duty cycle, not a share of bandwidth: see "
    "llm_gpu_dram_bandwidth_utilization_ratio (Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_USED = define(
    "llm_gpu_memory_used_bytes",
    Kind.GAUGE,
    "Device memory allocated by processes. With drivers before 510 (no memory info v2) it "
    "includes the driver-reserved memory.",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_TOTAL = define(
    "llm_gpu_memory_total_bytes",
    Kind.GAUGE,
    "Installed device memory.",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_RESERVED = define(
    "llm_gpu_memory_reserved_bytes",
    Kind.GAUGE,
    "Device memory reserved by the driver and firmware (NVML memory info v2, driver 510+); "
    "total = used + reserved + free.",
    GPU_LABELS,
    section="gpu",
)
GPU_POWER = define(
    "llm_gpu_power_watts",
    Kind.GAUGE,
    "Board power draw: a 1 s average on Ampere (except A100) and newer, instantaneous on "
    "older GPUs.",
    GPU_LABELS,
    section="gpu",
)
GPU_POWER_LIMIT = define(
    "llm_gpu_power_limit_watts",
    Kind.GAUGE,
    "Power limit the driver enforces (the lowest of the configured and board limits).",
    GPU_LABELS,
    section="gpu",
)
GPU_ENERGY = define(
    "llm_gpu_energy_joules_total",
    Kind.COUNTER,
    "Energy consumed since the driver was loaded (Volta and newer); resets on driver reload.",
    GPU_LABELS,
    section="gpu",
)
GPU_TEMPERATURE = define(
    "llm_gpu_temperature_celsius",
    Kind.GAUGE,
    "GPU die temperature.",
    GPU_LABELS,
    section="gpu",
)
GPU_SM_CLOCK = define(
    "llm_gpu_sm_clock_hertz",
    Kind.GAUGE,
    "Current SM clock.",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_CLOCK = define(
    "llm_gpu_memory_clock_hertz",
    Kind.GAUGE,
    "Current memory clock.",
    GPU_LABELS,
    section="gpu",
)
GPU_PCIE_RX = define(
    "llm_gpu_pcie_rx_bytes_per_second",
    Kind.GAUGE,
    "PCIe traffic into the GPU, measured by NVML over a 20 ms window at sampling time.",
    GPU_LABELS,
    section="gpu",
)
GPU_PCIE_TX = define(
    "llm_gpu_pcie_tx_bytes_per_second",
    Kind.GAUGE,
    "PCIe traffic out of the GPU, measured by NVML over a 20 ms window at sampling time.",
    GPU_LABELS,
    section="gpu",
)
GPU_PCIE_LINK_GENERATION = define(
    "llm_gpu_pcie_link_generation",
    Kind.GAUGE,
    "PCIe generation the GPU's link runs at now (it may train down when idle to save power).",
    GPU_LABELS,
    section="gpu",
)
GPU_PCIE_LINK_GENERATION_MAX = define(
    "llm_gpu_pcie_link_generation_max",
    Kind.GAUGE,
    "Highest PCIe generation the GPU and the slot's path to it support.",
    GPU_LABELS,
    section="gpu",
)
GPU_PCIE_LINK_WIDTH = define(
    "llm_gpu_pcie_link_width",
    Kind.GAUGE,
    "PCIe lanes the GPU's link runs with now: under its max, the link trained narrower "
    "(a x16 card at x8 halves host-to-GPU bandwidth).",
    GPU_LABELS,
    section="gpu",
)
GPU_PCIE_LINK_WIDTH_MAX = define(
    "llm_gpu_pcie_link_width_max",
    Kind.GAUGE,
    "Most PCIe lanes the GPU's link supports.",
    GPU_LABELS,
    section="gpu",
)
GPU_PCIE_REPLAYS = define(
    "llm_gpu_pcie_replays_total",
    Kind.COUNTER,
    "PCIe packets the link had to replay (a transmission error) since the driver loaded.",
    GPU_LABELS,
    section="gpu",
)
#: Bounded values of ``kind`` on GPU_NVLINK_ERRORS (NVML's data-link error counters).
NVLINK_ERROR_KINDS = ("replay", "recovery", "crc_flit", "crc_data")
GPU_NVLINK_UP = define(
    "llm_gpu_nvlink_up",
    Kind.GAUGE,
    "1 while the NVLink link is active, 0 while down; one series per link NVML reports "
    "(none on a GPU without NVLink).",
    (*GPU_LABELS, "link"),
    section="gpu",
)
GPU_NVLINK_ERRORS = define(
    "llm_gpu_nvlink_errors_total",
    Kind.COUNTER,
    "NVLink data-link errors of an active link since the driver loaded, by kind: replay, "
    "recovery, crc_flit, crc_data.",
    (*GPU_LABELS, "link", "kind"),
    section="gpu",
)
#: Bounded values of ``reason`` on GPU_CLOCK_EVENT (dcgm-exporter's names, so dashboards
#: translate); the NVML sampler maps its clock-event bits onto these.
GPU_CLOCK_EVENT_REASONS = (
    "gpu_idle",
    "clocks_setting",
    "power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks",
)
GPU_CLOCK_EVENT = define(
    "llm_gpu_clock_event_active",
    Kind.GAUGE,
    "1 while the named reason holds clocks below their maximum, else 0: "
    + ", ".join(GPU_CLOCK_EVENT_REASONS) + ".",
    (*GPU_LABELS, "reason"),
    section="gpu",
)
GPU_XID_ERRORS = define(
    "llm_gpu_xid_errors_total",
    Kind.COUNTER,
    "XID critical errors reported by the driver while the exporter was subscribed, by XID "
    "number (999: unknown). A series appears with its first event.",
    (*GPU_LABELS, "xid"),
    section="gpu",
)
GPU_ECC_ERRORS = define(
    "llm_gpu_ecc_errors_total",
    Kind.COUNTER,
    "Device-memory ECC errors since the driver was loaded, by type: corrected (single-bit) "
    "or uncorrected (double-bit). Absent on GPUs without ECC or with it disabled.",
    (*GPU_LABELS, "type"),
    section="gpu",
)
GPU_DRAM_BANDWIDTH_UTILIZATION = define(
    "llm_gpu_dram_bandwidth_utilization_ratio",
    Kind.GAUGE,
    "Achieved DRAM bandwidth over the GPU's theoretical peak, averaged between two samples "
    "one check interval apart (NVML GPM; Hopper and newer, absent on older GPUs).",
    GPU_LABELS,
    section="gpu",
)
GPU_SM_ACTIVE = define(
    "llm_gpu_sm_active_ratio",
    Kind.GAUGE,
    "Fraction of SMs that were busy between two samples one check interval apart (NVML GPM "
    "SM_UTIL; Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_SM_OCCUPANCY = define(
    "llm_gpu_sm_occupancy_ratio",
    Kind.GAUGE,
    "Resident warps over the theoretical maximum, between two samples one check interval "
    "apart (NVML GPM; Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_TENSOR_ACTIVE = define(
    "llm_gpu_tensor_active_ratio",
    Kind.GAUGE,
    "Fraction of time the SMs were running any tensor-core instruction, between two samples "
    "one check interval apart (NVML GPM; Hopper and newer).",
    GPU_LABELS,
    section="gpu",
)
GPU_MEMORY_BANDWIDTH = define(
    "llm_gpu_memory_bandwidth_bytes_per_second",
    Kind.GAUGE,
    "Achieved DRAM bandwidth: llm_gpu_dram_bandwidth_utilization_ratio times the peak. "
    "`peak_source` says where the peak came from: spec (a table of datasheet values) or "
    "clock_x_bus_width (computed from NVML, can read a few percent above the datasheet).",
    (*GPU_LABELS, "peak_source"),
    section="gpu",
)
GPU_MEMORY_BANDWIDTH_PEAK = define(
    "llm_gpu_memory_bandwidth_peak_bytes_per_second",
    Kind.GAUGE,
    "Theoretical peak DRAM bandwidth of the GPU (the divisor for memory-bandwidth "
    "utilization, MBU); `peak_source` as for llm_gpu_memory_bandwidth_bytes_per_second.",
    (*GPU_LABELS, "peak_source"),
    section="gpu",
)
GPU_PROCESS_MEMORY = define(
    "llm_gpu_process_memory_bytes",
    Kind.GAUGE,
    "Device memory used by each compute process, the 16 largest per GPU; `process` is the "
    "executable name (empty when NVML cannot see it, e.g. another PID namespace).",
    (*GPU_LABELS, "pid", "process"),
    section="gpu",
)
