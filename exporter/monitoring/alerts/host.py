"""Host alerts: the engine's tasks (its cgroup's) waiting for a CPU, for memory or for IO,
from the kernel's pressure stall information."""

from __future__ import annotations

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics.names import RATE
from exporter.monitoring.promql import VALUE_PERCENT, lbl, num, pct
from exporter.monitoring.rule import Alert

HOST_TEXT = f"The engine's tasks on {lbl('instance')}"
#: One exporter's series: site and vantage keep a central store's vantage points apart.
EXPORTER = "instance, site, vantage"
#: The share of RATE the exporter's series cover: its CPUs' time over all modes runs at
#: one second a second per CPU. rate() spreads an increase over the whole range, so a
#: series younger than RATE (an exporter just started) would read a share too small.
COVERED = (f"(sum by ({EXPORTER}) (rate({metrics.HOST_CPU.name}[{RATE}])) / on ({EXPORTER}) "
           f"{metrics.HOST_CPUS.name})")


def pressure(resource: str) -> str:
    """The PSI ``some`` share over RATE of the engine's cgroup: the series the chain's host
    step judges (the whole host's is not: some task always waits somewhere on a busy one)."""
    name, (scope, res, kind) = metrics.HOST_PRESSURE.name, metrics.HOST_PRESSURE.labels
    engine = (f'rate({name}{{{res}="{resource}", {kind}="{metrics.PRESSURE_KINDS[0]}", '
              f'{scope}="{metrics.ENGINE_SCOPE}"}}[{RATE}])')
    # group_left keeps the pressure series' labels (scope, resource), not only those matched.
    return f"{engine}\n/ on ({EXPORTER}) group_left ()\n{COVERED}"


def host_alerts(config: Config) -> list[Alert]:
    a = config.alerting
    out = []
    for name, resource, line, what in (
            ("LLMHostCPUPressure", "cpu", a.host_cpu_pressure_ratio, "a CPU"),
            ("LLMHostMemoryPressure", "memory", a.host_memory_pressure_ratio, "memory"),
            ("LLMHostIOPressure", "io", a.host_io_pressure_ratio, "IO")):
        out.append(Alert(
            name,
            f"{pressure(resource)}\n> {num(line)}",
            "warning",
            f"The engine's tasks wait for {what}.",
            f"{HOST_TEXT}: a task waited for {what} {VALUE_PERCENT} of the last {RATE} "
            f"(threshold {pct(line)}).",
            "5m",
        ))
    return out
