"""Host check: the kernel's pressure stall information, memory, swap and CPU of the host,
and the pressure and CPU of the engine's own cgroup when the config names it
(``exporter/checks/host/procfs.py`` reads them). On Linux only; files the kernel lacks
leave their series absent."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

from exporter import metrics
from exporter.checks.base import Check, Registration
from exporter.checks.batch import Batch, Sample
from exporter.checks.host.procfs import Host, Snapshot, read
from exporter.config.models import Config, HostConfig

#: /proc/vmstat keys of each swap direction (metrics.SWAP_DIRECTIONS' order).
_SWAP_KEYS = ("pswpin", "pswpout")


class HostCheck(Check):
    kind = "host"

    def __init__(self, cfg: HostConfig, host: Host | None = None) -> None:
        super().__init__("local", cfg.interval, cfg.interval)
        self.cfg = cfg
        self.host = host or Host()
        self._batch: Batch = ()

    def describe(self) -> str:
        c = self.cfg
        engine = c.engine_cgroup or (f"processes {c.engine_process}*" if c.engine_process
                                     else "none")
        return f"procfs and cgroup v2; engine cgroup: {engine}"

    async def run(self) -> None:
        snap = await asyncio.to_thread(read, self.host, self.cfg.engine_cgroup,
                                       self.cfg.engine_process)
        self._batch = tuple(samples(snap))
        if snap.engine_missing is not None:
            raise RuntimeError(f"engine cgroup: {snap.engine_missing}")

    def batch(self) -> Batch:
        return self._batch


def samples(snap: Snapshot) -> Iterator[Sample]:
    for labels, seconds in sorted(snap.pressure.items()):
        yield metrics.HOST_PRESSURE, labels, seconds
    for family, key in ((metrics.HOST_MEMORY_AVAILABLE, "MemAvailable"),
                        (metrics.HOST_MEMORY_TOTAL, "MemTotal")):
        if key in snap.memory:
            yield family, (), float(snap.memory[key])
    for direction, key in zip(metrics.SWAP_DIRECTIONS, _SWAP_KEYS, strict=True):
        if key in snap.vm:
            yield metrics.HOST_SWAP, (direction,), float(snap.vm[key])
    if "pgmajfault" in snap.vm:
        yield metrics.HOST_MAJOR_FAULTS, (), float(snap.vm["pgmajfault"])
    for mode, seconds in snap.cpu.items():
        yield metrics.HOST_CPU, (mode,), seconds
    if snap.cpus is not None:
        yield metrics.HOST_CPUS, (), float(snap.cpus)
    if snap.engine_cpu is not None:
        yield metrics.HOST_ENGINE_CPU, (), snap.engine_cpu


def build(config: Config) -> list[Check]:
    h = config.host
    return [HostCheck(h)] if h.enabled and sys.platform == "linux" else []


REGISTRATION = Registration("host", build)
