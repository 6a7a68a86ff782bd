"""Limits on processes by the kernel's own controllers, in cgroups the tests create and
remove: cgroup v2's files (``cpu.max``, ``memory.max``, ``io.max``) where the unified
hierarchy has the controller, else the v1 hierarchy's (``cpu.cfs_quota_us``,
``memory.limit_in_bytes``, ``blkio.throttle.read_bps_device``): this machine mounts v1
controllers beside a v2 hierarchy that has none of them but carries the pressure files;
production hosts are mostly pure v2. A CPU cap moves only the process named: its threads go
with it, children it already started stay where they are (vLLM's engine core keeps its CPUs
while its API server is starved)."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
from pathlib import Path

from exporter.checks.host.procfs import Host
from tests.support.procs import FOREGROUND_NICE

ROOT = Path("/sys/fs/cgroup")
#: CFS period, microseconds: a tenth of the kernel's default, so a capped process is slowed
#: evenly (at the default a burst of a few ms runs at full speed until the quota is spent).
PERIOD_US = 10_000
MIN_QUOTA_US = 1000
#: The v1 hierarchy of each v2 controller the tests limit.
V1_HIERARCHY = {"cpu": "cpu", "memory": "memory", "io": "blkio"}


def _hierarchy(controller: str) -> tuple[Path, bool]:
    """The root of ``controller``'s hierarchy and whether it is cgroup v2."""
    controllers = ROOT / "cgroup.controllers"
    if controllers.exists() and controller in controllers.read_text().split():
        return ROOT, True
    v1 = ROOT / V1_HIERARCHY[controller]
    if (v1 / "cgroup.procs").exists():
        return v1, False
    raise OSError(f"no {controller} controller under {ROOT} (neither cgroup v2's nor v1's "
                  f"{V1_HIERARCHY[controller]})")


def _cpu_files(cpus: float) -> tuple[dict[str, str], dict[str, str]]:
    """A quota of ``cpus`` CPUs: v2's files and v1's."""
    # The kernel's least quota is 1 ms: a smaller cap takes a longer period.
    period = max(PERIOD_US, math.ceil(MIN_QUOTA_US / cpus))
    quota = round(cpus * period)
    return ({"cpu.max": f"{quota} {period}"},
            {"cpu.cfs_period_us": str(period), "cpu.cfs_quota_us": str(quota)})


class Cap:
    """A group the test creates that limits its processes by one controller, until
    ``release()``: ``v2``'s files where the unified hierarchy has the controller, else
    ``v1``'s, in that controller's own hierarchy."""

    def __init__(self, controller: str, name: str, files: tuple[dict[str, str], dict[str, str]],
                 under: Path | None = None) -> None:
        """``under``: where the controller is v2's, a group of the root's holding no
        process of its own to create it in (the group may exist already: a pod's group of
        that kind of hog); v1's hierarchy is separate and ignores it."""
        root, v2 = _hierarchy(controller)
        self.parent = root
        self.path = root / name
        if v2:
            for parent in (root, *([] if under is None else [under])):
                subtree = parent / "cgroup.subtree_control"
                if controller not in subtree.read_text().split():
                    subtree.write_text(f"+{controller}")
            self.path = (root if under is None else under) / name
        self.path.mkdir(exist_ok=v2)
        for file, value in files[0 if v2 else 1].items():
            (self.path / file).write_text(value)

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def release(self) -> None:
        """Its processes back in the hierarchy's root (those still running), the group
        removed."""
        if not self.path.exists():
            return
        for line in (self.path / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                (self.parent / "cgroup.procs").write_text(line)
        os.rmdir(self.path)


class CpuCap(Cap):
    """``pid`` capped at ``cpus`` CPUs by the kernel's CFS quota."""

    def __init__(self, pid: int, cpus: float, name: str) -> None:
        super().__init__("cpu", name, _cpu_files(cpus))
        self.add(pid)


def disk_of(path: Path) -> str:
    """``MAJ:MIN`` of the whole disk under ``path``'s file system (a partition's disk):
    what an IO limit names."""
    dev = os.stat(path).st_dev
    if os.major(dev) == 0:
        raise OSError(f"{path} is on no block device (tmpfs, overlay): the memory and IO "
                      "hogs need a disk under their file")
    block = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if (block / "partition").exists():
        block = block.resolve().parent
    return (block / "dev").read_text().strip()


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


#: The CPU hogs' quota, all of them together: enough to keep them waiting for a CPU, little
#: enough to leave the machine to the other tests.
HOG_CPUS = 0.25
#: The memory hog's limit, as a share of the file it cycles through: most of its pages are
#: evicted before it comes back to them.
HOG_MEMORY_SHARE = 0.25
#: The IO hog's read rate, bytes per second: each 64 KiB read waits on it.
HOG_IO_BPS = 4 << 20
#: The kinds of hog, each in a group of its own under the pod.
HOG_KINDS = ("cpu", "memory", "io")


class Pod:
    """A cgroup v2 group holding the engine's process (in its child ``engine``) and the hogs
    a scenario starts beside it (a child per kind of :data:`HOG_KINDS`): what the host
    check reads as the engine's cgroup. The kernel's pressure stall information of a group
    counts every task below it, so the hogs' waits are the pod's, as a noisy job's in a
    container's cgroup are."""

    def __init__(self, pid: int, name: str) -> None:
        root = v2_root()
        if root is None:
            raise OSError(f"no cgroup v2 hierarchy under {ROOT}")
        self.root, self.path = root, root / name
        self.path.mkdir()
        (self.path / "engine").mkdir()
        (self.path / "engine" / "cgroup.procs").write_text(str(pid))
        self.hogs: list[subprocess.Popen[bytes]] = []
        self.caps: list[Cap] = []

    @property
    def name(self) -> str:
        """The path as /proc/<pid>/cgroup's ``0::`` line writes it."""
        return "/" + str(self.path.relative_to(self.root))

    def _hogs(self, kind: str, argv: list[str], count: int,
              files: tuple[dict[str, str], dict[str, str]], nice: int = FOREGROUND_NICE
              ) -> None:
        """``count`` processes of ``argv`` at niceness ``nice`` in the pod's group ``kind``,
        limited together by the controller of that name (on a hybrid host, in its v1 group
        too). A memory or IO hog runs ahead of the tests' load (where root may raise it):
        what it waits for is then its own resource, not a CPU the tier's other tests hold."""
        group = self.path / kind
        group.mkdir()
        # The pod's group is the cap where v2 has the controller; v1's is named for the pod.
        v2 = _hierarchy(kind)[1]
        cap = Cap(kind, kind if v2 else f"{self.path.name}-{kind}", files, under=self.path)
        self.caps.append(cap)
        started = [subprocess.Popen(["nice", "-n", str(nice), *argv], stdin=subprocess.PIPE)
                   for _ in range(count)]
        self.hogs += started
        for hog in started:
            (group / "cgroup.procs").write_text(str(hog.pid))
            cap.add(hog.pid)
            assert hog.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # a busy loop reads no stdin
                hog.stdin.write(b"go\n")
                hog.stdin.close()

    def cpu_hog(self, loops: int) -> None:
        """``loops`` busy loops at the lowest priority, capped together at HOG_CPUS."""
        self._hogs("cpu", [sys.executable, "-c", "while True: pass"], loops,
                   _cpu_files(HOG_CPUS), nice=19)

    def memory_hog(self, file: Path, size: int) -> None:
        """A reader cycling through ``size`` bytes of ``file`` (written here, to a disk)
        under a memory limit of HOG_MEMORY_SHARE of them."""
        write_file(file, size)
        limit = str(round(size * HOG_MEMORY_SHARE))
        self._hogs("memory", hog_argv("memory", file), 1,
                   ({"memory.max": limit}, {"memory.limit_in_bytes": limit}))

    def io_hog(self, file: Path) -> None:
        """A reader of ``file`` (written here) bypassing the page cache, its disk's reads
        capped at HOG_IO_BPS."""
        disk = write_file(file, 16 * HOG_IO_BPS)
        self._hogs("io", hog_argv("io", file), 1,
                   ({"io.max": f"{disk} rbps={HOG_IO_BPS}"},
                    {"blkio.throttle.read_bps_device": f"{disk} {HOG_IO_BPS}"}))

    def release(self) -> None:
        """The hogs stopped, the engine back in the root, the groups removed."""
        for hog in self.hogs:
            hog.kill()
            hog.wait()
        self.hogs = []
        for cap in self.caps:
            cap.release()
        self.caps = []
        for child in ("engine", *HOG_KINDS):
            group = self.path / child
            if group.exists():
                for line in (group / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        (self.root / "cgroup.procs").write_text(line)
                os.rmdir(group)
        if self.path.exists():
            os.rmdir(self.path)


def hog_argv(kind: str, file: Path) -> list[str]:
    """The command of a tests/support/hogs.py hog (run from the repository's root)."""
    return [sys.executable, "-m", "tests.support.hogs", kind, str(file)]


def write_file(file: Path, size: int) -> str:
    """``size`` bytes (whole MiB) of ``file``, on a disk: synced, so that the hog can drop
    the pages the write left in the page cache (charged to the test) and read them back.
    The disk's ``MAJ:MIN``."""
    disk = disk_of(file.parent)
    block = os.urandom(1 << 20)
    with file.open("wb") as out:
        for _ in range(-(-size // len(block))):
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
    return disk
