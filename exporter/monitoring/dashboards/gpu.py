"""The GPU dashboard (NVML): is the GPU busy, bandwidth-bound, hot, throttled or failing?"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import Family
from exporter.monitoring.dashboards.kit import (
    RI,
    Section,
    build_dashboard,
    sel,
    stat_panel,
    timeline,
    ts,
)
from exporter.monitoring.promql import pct


def gpu(config: Config) -> db.Dashboard:
    gs = sel("instance", "gpu")
    g = "GPU {{gpu}}"

    def series(family: Family) -> str:
        return f"{family.name}{gs}"

    activity = Section("Activity", [
        ts("Utilization vs memory-controller busy vs DRAM bandwidth",
           "Kernel-active time (utilization: 1 even for one small kernel), memory-"
           "controller duty cycle, and achieved DRAM bandwidth over peak (Hopper+). Decode "
           "is bandwidth-bound: watch the last one.", "percentunit",
           [(series(metrics.GPU_UTILIZATION), f"{g} utilization"),
            (series(metrics.GPU_MEMORY_CONTROLLER_BUSY), f"{g} memory busy"),
            (series(metrics.GPU_DRAM_BANDWIDTH_UTILIZATION), f"{g} DRAM bandwidth")]),
        ts("SM and tensor activity",
           "Share of SMs busy, warp occupancy and tensor-core activity (NVML GPM, Hopper+).",
           "percentunit",
           [(series(metrics.GPU_SM_ACTIVE), f"{g} SM active"),
            (series(metrics.GPU_SM_OCCUPANCY), f"{g} occupancy"),
            (series(metrics.GPU_TENSOR_ACTIVE), f"{g} tensor active")]),
        ts("Memory bandwidth",
           "Achieved DRAM bandwidth against the GPU's theoretical peak.", "Bps",
           [(series(metrics.GPU_MEMORY_BANDWIDTH), f"{g} achieved"),
            (series(metrics.GPU_MEMORY_BANDWIDTH_PEAK), f"{g} peak")]),
        ts("PCIe traffic", "PCIe bytes per second into and out of the GPU.", "Bps",
           [(series(metrics.GPU_PCIE_RX), f"{g} rx"), (series(metrics.GPU_PCIE_TX), f"{g} tx")]),
    ])
    memory = Section("Memory, power, clocks", [
        ts("Memory",
           "Device memory used and installed. Engines preallocate most of it for the KV "
           f"cache; above {pct(config.alerting.gpu_memory_ratio)} alerts.", "bytes",
           [(series(metrics.GPU_MEMORY_USED), f"{g} used"),
            (series(metrics.GPU_MEMORY_TOTAL), f"{g} total")], span=8),
        ts("Power", "Board power draw against the enforced power limit.", "watt",
           [(series(metrics.GPU_POWER), f"{g} draw"),
            (series(metrics.GPU_POWER_LIMIT), f"{g} limit")], span=8),
        ts("Temperature", "GPU die temperature.", "celsius",
           [(series(metrics.GPU_TEMPERATURE), g)], span=8),
        ts("Clocks", "Current SM and memory clocks; a drop under load is throttling.",
           "hertz",
           [(series(metrics.GPU_SM_CLOCK), f"{g} SM"),
            (series(metrics.GPU_MEMORY_CLOCK), f"{g} memory")]),
        timeline("Throttle reasons",
                 "Which clock-event reasons hold the clocks down. power_cap under full load "
                 f"is normal; {', '.join(config.alerting.throttle_reasons)} alert.", "none",
                 [(f"max by (gpu, reason) ({metrics.GPU_CLOCK_EVENT.name}{gs})",
                   f"{g} {{{{reason}}}}")],
                 {"0": "off", "1": "active"}),
    ])
    links = Section("Links", [
        ts("PCIe link width and generation",
           "What the link runs at against what it supports: a width under its max trained "
           "narrower (a riser, a slot); a generation under its max under load is the same.",
           "short",
           [(series(metrics.GPU_PCIE_LINK_WIDTH), f"{g} width"),
            (series(metrics.GPU_PCIE_LINK_WIDTH_MAX), f"{g} max width"),
            (series(metrics.GPU_PCIE_LINK_GENERATION), f"{g} generation"),
            (series(metrics.GPU_PCIE_LINK_GENERATION_MAX), f"{g} max generation")], span=8),
        ts("NVLinks down", "Links NVML reports down, per GPU (none without NVLink).", "short",
           [(f"sum by (gpu) (1 - {metrics.GPU_NVLINK_UP.name}{gs})", g)], span=8),
        ts("Link errors", "NVLink data-link errors by kind and PCIe replays, per rate "
           "interval: any rising count is a link going bad.", "short",
           [(f"sum by (gpu, kind) (increase({metrics.GPU_NVLINK_ERRORS.name}{gs}[{RI}]))",
             f"{g} NVLink {{{{kind}}}}"),
            (f"sum by (gpu) (increase({metrics.GPU_PCIE_REPLAYS.name}{gs}[{RI}]))",
             f"{g} PCIe replays")], span=8),
    ])
    errors = Section("Errors", [
        ts("XID errors",
           "XID critical errors reported by the driver, by XID number, per rate interval.",
           "short",
           [(f"sum by (gpu, xid) (increase({metrics.GPU_XID_ERRORS.name}{gs}[{RI}]))",
             f"{g} XID {{{{xid}}}}")]),
        stat_panel("GPU up", "1 while the GPU answers NVML; 0 after it fell off the bus.",
                   "none", (f"min by (gpu) ({series(metrics.GPU_UP)})", g),
                   [(None, "red"), (1, "green")], span=12, mappings={"0": "lost", "1": "up"}),
    ])
    return build_dashboard(
        "llm-gpu", "LLM latency: GPU and host",
        "NVML telemetry: is the GPU busy, bandwidth-bound, hot, throttled or failing? And "
        "the host under it: is the engine waiting for a CPU, memory or IO?",
        ("instance", "gpu"), [activity, memory, links, errors, _host(config)],
    )


def _host(config: Config) -> Section:
    """The host check's series: the field guides' next look when the GPU idles."""
    hs = sel("instance")
    a = config.alerting
    some = sel("instance",
               extra=f'{metrics.HOST_PRESSURE.labels[2]}="{metrics.PRESSURE_KINDS[0]}"')
    cpu = metrics.HOST_CPU
    busy = sel("instance", extra=f'{cpu.labels[0]}="{metrics.CPU_MODES[0]}"')
    return Section("Host", [
        ts("Pressure: time a task waited",
           "Share of time at least one task waited (the kernel's PSI some) for a CPU, "
           "memory or IO, of the engine's cgroup and of the whole host. The engine's own "
           f"over {pct(a.host_cpu_pressure_ratio)} (CPU), {pct(a.host_memory_pressure_ratio)}"
           f" (memory) or {pct(a.host_io_pressure_ratio)} (IO) alerts.", "percentunit",
           [(f"rate({metrics.HOST_PRESSURE.name}{some}[{RI}])",
             "{{instance}} {{scope}} {{resource}}")]),
        ts("Memory available and swapping",
           "Memory available over total, and pages swapped per second: system memory 2-4x "
           "GPU memory means nothing swaps.", "percentunit",
           [(f"{metrics.HOST_MEMORY_AVAILABLE.name}{hs} / {metrics.HOST_MEMORY_TOTAL.name}{hs}",
             "{{instance}} available")], span=6),
        ts("Swap and major faults", "Pages swapped in and out, and page faults read from "
           "disk, per second.", "short",
           [(f"rate({metrics.HOST_SWAP.name}{hs}[{RI}])", "{{instance}} swap {{direction}}"),
            (f"rate({metrics.HOST_MAJOR_FAULTS.name}{hs}[{RI}])", "{{instance}} major faults")],
           span=6),
        ts("CPU: the host's busy CPUs of all it has",
           "The host's CPUs busy (every mode but idle and iowait) against how many it has. "
           "The engine cgroup's own CPU, where the host check names it: "
           f"rate({metrics.HOST_ENGINE_CPU.name}).", "short",
           [(f"sum by (instance) (rate({cpu.name}{busy}[{RI}]))", "{{instance}} busy CPUs"),
            (f"{metrics.HOST_CPUS.name}{hs}", "{{instance}} CPUs")]),
    ])
