"""The field guides' host and GPU checklist over the period, per machine (vantage) and GPU:
nothing swapped, system memory at least twice the GPUs', the engine's tasks did not wait on
the host, every PCIe link at its widest and fastest, every NVLink up and clean, no XID
error. One row a check: what it should be, what it was, and whether it held. The host-wide
rows read node_exporter's series where the exporter's host check is off."""

from __future__ import annotations

from collections.abc import Callable

from exporter import metrics
from exporter.config.models import Config
from exporter.diagnosis.promapi import PromClient, Sample
from exporter.metrics.names import prom_duration
from exporter.report.model import Check
from exporter.report.sections import VANTAGE

#: The guides' rule of thumb: system memory 2-4x the GPUs', so that nothing swaps.
MEMORY_PER_GPU_MEMORY = 2.0
#: The engine's pressure is judged over its worst stretch of this length, as its alert does.
PRESSURE_SPAN = "5m"
#: How finely the worst stretch is looked for.
PRESSURE_STEP = "1m"
GPU = (VANTAGE, "gpu")
#: node_exporter's names for the host-wide numbers, read where the host check is off and
#: node_exporter runs (its job labelled with the exporter's vantage, where there are several).
NODE_EXPORTER = {metrics.HOST_MEMORY_TOTAL.name: "node_memory_MemTotal_bytes",
                 metrics.HOST_MEMORY_AVAILABLE.name: "node_memory_MemAvailable_bytes"}
NODE_EXPORTER_SWAP = ("node_vmstat_pswpin", "node_vmstat_pswpout")


def _by(labels: tuple[str, ...]) -> str:
    return ", ".join(labels)


def _at_most(line: float) -> Callable[[float], bool]:
    return lambda v: v <= line


def checklist(client: PromClient, config: Config, start: float, end: float) -> list[Check]:
    span = prom_duration(max(60.0, round(end - start)))

    def rows(expr: str, item: str, expected: str, unit: str, holds: Callable[[float], bool],
             labels: tuple[str, ...] = (VANTAGE,)) -> list[Check]:
        found: list[Sample] = client.query(expr, end)
        return [Check(scope={k: s.labels.get(k, "") for k in labels}, item=item,
                      expected=expected, value=s.value, unit=unit,
                      ok=None if s.value is None else holds(s.value))
                for s in sorted(found, key=lambda s: [s.labels.get(k, "") for k in labels])]

    def host(agg: str, over: str, family: str) -> str:
        """``agg by (vantage) (over(family[span]))``, else node_exporter's equivalent."""
        ours, theirs = (f"{agg} by ({VANTAGE}) ({over}({name}[{span}]))"
                        for name in (family, NODE_EXPORTER[family]))
        return f"({ours}\nor\n{theirs})"

    alerting = config.alerting
    pressure = metrics.HOST_PRESSURE.name
    engine = f'scope="{metrics.ENGINE_SCOPE}",kind="{metrics.PRESSURE_KINDS[0]}"'
    swap = metrics.HOST_SWAP.name
    out = rows(f"sum by ({VANTAGE}) (increase({swap}[{span}]))\nor\n"
               + "\n+\n".join(f"sum by ({VANTAGE}) (increase({name}[{span}]))"
                               for name in NODE_EXPORTER_SWAP),
               "pages swapped in or out", "0", "pages", lambda v: v < 1)
    total = host("max", "max_over_time", metrics.HOST_MEMORY_TOTAL.name)
    out += rows(
        f"{total}\n/\n"
        f"sum by ({VANTAGE}) (max_over_time({metrics.GPU_MEMORY_TOTAL.name}[{span}]))",
        "system memory over the GPUs' memory", f"at least {MEMORY_PER_GPU_MEMORY:g}x", "x",
        lambda v: v >= MEMORY_PER_GPU_MEMORY)
    out += rows(
        f"{host('min', 'min_over_time', metrics.HOST_MEMORY_AVAILABLE.name)}\n/\n{total}",
        "memory available at its lowest", "over 10%", "ratio", lambda v: v > 0.1)
    for resource, line in (("cpu", alerting.host_cpu_pressure_ratio),
                           ("memory", alerting.host_memory_pressure_ratio),
                           ("io", alerting.host_io_pressure_ratio)):
        out += rows(
            f"max by ({VANTAGE}) (max_over_time((sum by ({VANTAGE}) (rate({pressure}"
            f'{{{engine},resource="{resource}"}}[{PRESSURE_SPAN}])))[{span}:{PRESSURE_STEP}]))',
            f"engine waiting for {resource}, worst {PRESSURE_SPAN}",
            f"at most {line:.0%}", "ratio", _at_most(line))
    width, width_max = metrics.GPU_PCIE_LINK_WIDTH.name, metrics.GPU_PCIE_LINK_WIDTH_MAX.name
    gen, gen_max = (metrics.GPU_PCIE_LINK_GENERATION.name,
                    metrics.GPU_PCIE_LINK_GENERATION_MAX.name)
    # Narrower than its maximum at any moment is a link that trained down; a generation
    # below its maximum is normal while idle (power saving), so it must reach it once.
    out += rows(f"min by ({_by(GPU)}) (min_over_time({width}[{span}]))\n-\n"
                f"max by ({_by(GPU)}) (max_over_time({width_max}[{span}]))",
                "PCIe lanes at their narrowest, less the maximum", "0", "lanes",
                lambda v: v >= 0, GPU)
    out += rows(f"max by ({_by(GPU)}) (max_over_time({gen}[{span}]))\n-\n"
                f"max by ({_by(GPU)}) (max_over_time({gen_max}[{span}]))",
                "PCIe generation at its fastest, less the maximum", "0", "generations",
                lambda v: v >= 0, GPU)
    out += rows(f"count by ({_by(GPU)}) (min_over_time({metrics.GPU_NVLINK_UP.name}[{span}])"
                " == 0)\nor\n"
                f"count by ({_by(GPU)}) (max_over_time({metrics.GPU_NVLINK_UP.name}[{span}]))"
                " * 0", "NVLinks down at some time", "0", "links", lambda v: v == 0, GPU)
    # A GPU's XID series appears with its first event: none is none, not unknown.
    seen = f"count by ({_by(GPU)}) (max_over_time({metrics.GPU_UTILIZATION.name}[{span}])) * 0"
    for family, item, absent in ((metrics.GPU_NVLINK_ERRORS, "NVLink errors", ""),
                                 (metrics.GPU_PCIE_REPLAYS, "PCIe replays", ""),
                                 (metrics.GPU_XID_ERRORS, "XID errors", f"\nor\n{seen}")):
        out += rows(f"sum by ({_by(GPU)}) (increase({family.name}[{span}])){absent}", item,
                    "0", "events", lambda v: v < 1, GPU)
    return out
