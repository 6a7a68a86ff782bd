"""A CPU cap on one process by the kernel's own CFS quota, in a cgroup the tests create and
remove: cgroup v2's ``cpu.max`` where the unified hierarchy has the cpu controller, else the
v1 ``cpu`` hierarchy's ``cpu.cfs_quota_us`` (this machine mounts v1 controllers; production
hosts are mostly pure v2). Only the process named moves: its threads go with it, children it
already started stay where they are (vLLM's engine core keeps its CPUs while its API server
is starved)."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from pathlib import Path

from exporter.checks.host.procfs import Host

ROOT = Path("/sys/fs/cgroup")
#: CFS period, microseconds: a tenth of the kernel's default, so a capped process is slowed
#: evenly (at the default a burst of a few ms runs at full speed until the quota is spent).
PERIOD_US = 10_000
MIN_QUOTA_US = 1000


def _hierarchy() -> tuple[Path, bool]:
    """The cpu hierarchy's root and whether it is cgroup v2."""
    controllers = ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return ROOT, True
    v1 = ROOT / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return v1, False
    raise OSError(f"no cpu controller under {ROOT} (neither cgroup v2's cpu nor v1's cpu)")


class CpuCap:
    """``pid`` capped at ``cpus`` CPUs until ``release()``."""

    def __init__(self, pid: int, cpus: float, name: str, under: Path | None = None) -> None:
        """``under``: a group of the root's holding no process of its own to create it in,
        where the cpu controller is v2's; v1's ``cpu`` hierarchy is separate and ignores it."""
        root, v2 = _hierarchy()
        self.parent = root
        self.path = root / name
        if v2:
            for parent in (root, *([] if under is None else [under])):
                subtree = parent / "cgroup.subtree_control"
                if "cpu" not in subtree.read_text().split():
                    subtree.write_text("+cpu")
            self.path = (root if under is None else under) / name
        self.path.mkdir()
        # The kernel's least quota is 1 ms: a smaller cap takes a longer period.
        period = max(PERIOD_US, math.ceil(MIN_QUOTA_US / cpus))
        quota = round(cpus * period)
        if v2:
            (self.path / "cpu.max").write_text(f"{quota} {period}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(period))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        (self.path / "cgroup.procs").write_text(str(pid))

    def release(self) -> None:
        """The process back in the hierarchy's root (if it still runs), the cgroup removed."""
        if not self.path.exists():
            return
        for line in (self.path / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                (self.parent / "cgroup.procs").write_text(line)
        os.rmdir(self.path)


def v2_root() -> Path | None:
    """The cgroup v2 hierarchy, found as the host check finds it."""
    return Host(cgroup=ROOT).v2_root()


class Group:
    """A cgroup v2 group the test creates, holding ``pid``, until ``release()``: what the
    host check reads an engine's pressure and CPU from (on a hybrid host a process sits in
    a v2 group and the v1 ``cpu`` one at once)."""

    def __init__(self, pid: int, name: str) -> None:
        root = v2_root()
        if root is None:
            raise OSError(f"no cgroup v2 hierarchy under {ROOT}")
        self.root = root
        self.path = root / name
        self.path.mkdir()
        (self.path / "cgroup.procs").write_text(str(pid))

    @property
    def name(self) -> str:
        """The path as /proc/<pid>/cgroup's ``0::`` line writes it."""
        return "/" + str(self.path.relative_to(self.root))

    def release(self) -> None:
        if not self.path.exists():
            return
        for line in (self.path / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                (self.root / "cgroup.procs").write_text(line)
        os.rmdir(self.path)


#: The hogs' CPU quota, all of them together: enough to keep them waiting for a CPU, little
#: enough to leave the machine to the other tests.
HOG_CPUS = 0.25


class Pod:
    """A cgroup v2 group holding the engine's process (in its child ``engine``) and the hogs
    a scenario starts beside it (in ``hog``): what the host check reads as the engine's
    cgroup. The kernel's pressure stall information of a group counts every task below it,
    so the hogs' waits are the pod's, as a noisy job's in a container's cgroup are."""

    def __init__(self, pid: int, name: str) -> None:
        root = v2_root()
        if root is None:
            raise OSError(f"no cgroup v2 hierarchy under {ROOT}")
        self.root, self.path = root, root / name
        self.path.mkdir()
        (self.path / "engine").mkdir()
        (self.path / "engine" / "cgroup.procs").write_text(str(pid))
        self.hogs: list[subprocess.Popen[bytes]] = []
        self.cap: CpuCap | None = None

    @property
    def name(self) -> str:
        """The path as /proc/<pid>/cgroup's ``0::`` line writes it."""
        return "/" + str(self.path.relative_to(self.root))

    def cpu_hog(self, loops: int) -> None:
        """``loops`` busy loops at nice 19 in the pod, capped together at HOG_CPUS."""
        self.hogs = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c",
                                       "while True: pass"]) for _ in range(loops)]
        _, v2 = _hierarchy()
        if v2:  # one hierarchy: the cap is the pod's hog group itself
            self.cap = CpuCap(self.hogs[0].pid, HOG_CPUS, "hog", under=self.path)
        else:  # v1's cpu beside v2: the hogs sit in both
            (self.path / "hog").mkdir()
            self.cap = CpuCap(self.hogs[0].pid, HOG_CPUS, self.path.name + "-hog")
        for hog in self.hogs:
            (self.path / "hog" / "cgroup.procs").write_text(str(hog.pid))
            (self.cap.path / "cgroup.procs").write_text(str(hog.pid))

    def release(self) -> None:
        """The hogs stopped, the engine back in the root, the groups removed."""
        for hog in self.hogs:
            hog.kill()
            hog.wait()
        self.hogs = []
        if self.cap is not None:
            self.cap.release()
            self.cap = None
        for child in ("engine", "hog"):
            group = self.path / child
            if group.exists():
                for line in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        (self.root / "cgroup.procs").write_text(line)
                os.rmdir(group)
        if self.path.exists():
            os.rmdir(self.path)
