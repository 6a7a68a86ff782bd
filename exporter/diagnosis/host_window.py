"""The host under the engines, one window of it (the ``host`` check): read by the chain's
host step (``steps/host.py``), declared as ``observations.py``'s windows are."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter import metrics
from exporter.diagnosis import finish
from exporter.diagnosis.declare import (
    HOST,
    Increase,
    Last,
    MeanOverTime,
    PerSecond,
    Ratio,
    measured,
)

_SCOPE, _RESOURCE, _KIND = metrics.HOST_PRESSURE.labels
#: Stalled seconds per second by (scope, resource), PSI's ``some`` line only.
_STALLED = PerSecond(Increase(metrics.HOST_PRESSURE.name, (_SCOPE, _RESOURCE),
                              ((_KIND, metrics.PRESSURE_KINDS[0]),)))


@dataclass(frozen=True)
class HostWindow:
    """The host under the engines over the window (the ``host`` check): the kernel's
    pressure stall information of the host and, where the config names it, of the engine's
    cgroup; memory, swap and CPU."""

    site: str = ""
    vantage: str = ""
    #: (scope, resource) -> the share of the window at least one task stalled waiting for
    #: the resource (PSI ``some``), per metrics.HOST_SCOPES and PRESSURE_RESOURCES.
    pressure: Mapping[tuple[str, str], float] = measured(
        HOST, _STALLED, finish.pairs, factory=dict, trend=True)
    #: Mean MemAvailable over MemTotal.
    memory_available_ratio: float | None = measured(HOST, Ratio(
        MeanOverTime(metrics.HOST_MEMORY_AVAILABLE.name),
        MeanOverTime(metrics.HOST_MEMORY_TOTAL.name)))
    #: Pages swapped in and out, per second.
    swap_pages: float | None = measured(HOST, PerSecond(Increase(metrics.HOST_SWAP.name)))
    #: The host's CPUs' busy share, and how many it has.
    cpu_busy: float | None = measured(HOST, Ratio(
        Increase(metrics.HOST_CPU.name, match=((metrics.HOST_CPU.labels[0],
                                                metrics.CPU_MODES[0]),)),
        Increase(metrics.HOST_CPU.name)))
    cpus: float | None = measured(HOST, Last(metrics.HOST_CPUS.name))
    #: CPUs' worth of time the engine's cgroup used (1.0: one core all the window).
    engine_cpu: float | None = measured(HOST, PerSecond(Increase(metrics.HOST_ENGINE_CPU.name)))

    @property
    def engine_measured(self) -> bool:
        """Whether the check reads the engine's own cgroup (``host.engine_cgroup`` or
        ``engine_process``): the chain judges only that."""
        return any(k[0] == metrics.ENGINE_SCOPE for k in self.pressure)
