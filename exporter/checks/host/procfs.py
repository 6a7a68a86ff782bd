"""The kernel's own accounts of the host, read from /proc and the cgroup v2 hierarchy.

Pure parsers of each file's text, and one ``read`` that takes a snapshot: what a file the
kernel lacks (PSI before Linux 4.20, ``full`` for CPU before 5.13) would give is absent,
never 0. cgroup v2 sits at /sys/fs/cgroup on a pure v2 host, or at /sys/fs/cgroup/unified
beside v1 controllers (a hybrid host): the engine's pressure is read wherever it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from exporter.metrics.host import CPU_MODES, ENGINE_SCOPE, HOST_SCOPE, PRESSURE_RESOURCES

#: Fields of the aggregate ``cpu`` line of /proc/stat, in the kernel's order.
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
_KIB = 1024


def pressure(text: str) -> dict[str, float]:
    """``some`` / ``full`` -> seconds stalled, from a PSI file (``total=`` is in us)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        for item in rest.split():
            key, _, value = item.partition("=")
            if key == "total" and value.isdigit():
                out[kind] = int(value) / 1e6
    return out


def meminfo(text: str) -> dict[str, int]:
    """Field -> bytes (the kernel writes kB)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (_KIB if parts[1:] == ["kB"] else 1)
    return out


def vmstat(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def cpu_seconds(text: str, hz: int) -> dict[str, float]:
    """busy / idle / iowait seconds of all CPUs, from the ``cpu`` line of /proc/stat."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            ticks = dict(zip(_STAT_FIELDS, (int(x) for x in line.split()[1:]), strict=False))
            idle, iowait = ticks.get("idle", 0), ticks.get("iowait", 0)
            busy = sum(ticks.values()) - idle - iowait
            return dict(zip(CPU_MODES, (busy / hz, idle / hz, iowait / hz), strict=True))
    return {}


def cgroup_usage(text: str) -> float | None:
    """Seconds of CPU of a cgroup (``usage_usec`` of its v2 cpu.stat)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec" and value.strip().isdigit():
            return int(value) / 1e6
    return None


def v2_path(proc_cgroup: str) -> str | None:
    """A process's cgroup v2 path (the ``0::`` line of /proc/<pid>/cgroup)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


@dataclass
class Snapshot:
    """One reading. ``pressure`` maps (scope, resource, kind) to seconds."""

    pressure: dict[tuple[str, str, str], float] = field(default_factory=dict)
    memory: dict[str, int] = field(default_factory=dict)
    vm: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    cpus: int | None = None
    engine_cpu: float | None = None
    #: Why the engine's part is missing though one was configured; None when read.
    engine_missing: str | None = None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:  # absent on this kernel, or a process that exited meanwhile
        return None


@dataclass(frozen=True)
class Host:
    """Where the kernel's files are: / on a host, a fixture tree in tests."""

    proc: Path = Path("/proc")
    cgroup: Path = Path("/sys/fs/cgroup")

    def v2_root(self) -> Path | None:
        """The cgroup v2 hierarchy: the mount itself (pure v2), or ``unified`` (hybrid)."""
        for root in (self.cgroup, self.cgroup / "unified"):
            if (root / "cgroup.controllers").exists():
                return root
        return None

    def processes(self, prefix: str) -> Iterator[int]:
        """PIDs whose name starts with ``prefix`` (case-insensitive), lowest first."""
        want = prefix.lower()
        pids = sorted(int(p.name) for p in self.proc.iterdir() if p.name.isdigit())
        for pid in pids:
            comm = _read(self.proc / str(pid) / "comm")
            if comm is not None and comm.strip().lower().startswith(want):
                yield pid

    def engine_cgroup(self, cgroup: str | None, process: str | None) -> str | None:
        if cgroup is not None:
            return cgroup
        if process is None:
            return None
        for pid in self.processes(process):
            text = _read(self.proc / str(pid) / "cgroup")
            path = v2_path(text) if text is not None else None
            if path is not None:
                return path
        return None


def read(host: Host, cgroup: str | None, process: str | None) -> Snapshot:
    snap = Snapshot()
    for resource in PRESSURE_RESOURCES:
        text = _read(host.proc / "pressure" / resource)
        for kind, seconds in (pressure(text) if text else {}).items():
            snap.pressure[HOST_SCOPE, resource, kind] = seconds
    snap.memory = meminfo(_read(host.proc / "meminfo") or "")
    snap.vm = vmstat(_read(host.proc / "vmstat") or "")
    snap.cpu = cpu_seconds(_read(host.proc / "stat") or "", os.sysconf("SC_CLK_TCK"))
    snap.cpus = os.cpu_count()
    if cgroup is None and process is None:
        return snap
    path = host.engine_cgroup(cgroup, process)
    root = host.v2_root()
    if path is None:
        snap.engine_missing = f"no process named {process}* with a cgroup v2 path"
        return snap
    if root is None:
        snap.engine_missing = f"no cgroup v2 hierarchy under {host.cgroup}"
        return snap
    group = root / path.lstrip("/")
    if not group.is_dir():
        snap.engine_missing = f"no cgroup {group}"
        return snap
    if group == root:
        return snap  # the root group is the host: nothing of the engine's own
    for resource in PRESSURE_RESOURCES:
        text = _read(group / f"{resource}.pressure")
        for kind, seconds in (pressure(text) if text else {}).items():
            snap.pressure[ENGINE_SCOPE, resource, kind] = seconds
    snap.engine_cpu = cgroup_usage(_read(group / "cpu.stat") or "")
    return snap
