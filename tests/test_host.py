"""The host check (exporter/checks/host/): the kernel's files parsed as the kernel writes
them, a fixture tree for the engine's cgroup, and real pressure from a real cgroup."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter import metrics
from exporter.checks.host import procfs
from exporter.checks.host.check import HostCheck, build
from exporter.config.models import Config, HostConfig
from tests.support.cgroups import Group, Pod, v2_root

PSI = ("some avg10=10.93 avg60=12.29 avg300=37.65 total=7943692408\n"
       "full avg10=0.00 avg60=0.00 avg300=0.00 total=1500000\n")
STAT = ("cpu  2449869 46579 341668 9418283 13307 0 31176 1630 0 0\n"
        "cpu0 1196775 24998 173383 4738306 3174 0 13786 802 0 0\n")


def test_the_kernels_files_parse_as_it_writes_them() -> None:
    assert procfs.pressure(PSI) == {"some": 7943.692408, "full": 1.5}
    mem = procfs.meminfo("MemTotal:       24683664 kB\nMemAvailable:   23610936 kB\n"
                         "HugePages_Total:       0\n")
    assert mem == {"MemTotal": 24683664 * 1024, "MemAvailable": 23610936 * 1024,
                   "HugePages_Total": 0}
    assert procfs.vmstat("pswpin 3\npswpout 7\npgmajfault 34229\n") == {
        "pswpin": 3, "pswpout": 7, "pgmajfault": 34229}
    busy = 2449869 + 46579 + 341668 + 0 + 31176 + 1630
    assert procfs.cpu_seconds(STAT, 100) == pytest.approx(
        {"busy": busy / 100, "idle": 94182.83, "iowait": 133.07})
    assert procfs.cgroup_usage("usage_usec 28692931671\nuser_usec 1\n") == 28692.931671
    assert procfs.v2_path("4:memory:/a\n0::/system.slice/vllm.service\n") == \
        "/system.slice/vllm.service"
    assert procfs.v2_path("1:cpu:/\n") is None


def _tree(tmp: Path, psi: bool = True) -> procfs.Host:
    proc, cg = tmp / "proc", tmp / "cgroup"
    (proc / "pressure").mkdir(parents=True)
    if psi:
        for r in metrics.PRESSURE_RESOURCES:
            (proc / "pressure" / r).write_text(PSI)
    (proc / "meminfo").write_text("MemTotal: 100 kB\nMemAvailable: 40 kB\n")
    (proc / "vmstat").write_text("pswpin 3\npswpout 7\npgmajfault 9\n")
    (proc / "stat").write_text(STAT)
    for pid, comm, group in ((12, "bash", "/"), (40, "VLLM::EngineCor", "/vllm.service"),
                             (41, "vllm", "/vllm.service")):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "comm").write_text(comm + "\n")
        (proc / str(pid) / "cgroup").write_text(f"1:cpu:/\n0::{group}\n")
    unified = cg / "unified"
    (unified / "vllm.service").mkdir(parents=True)
    (unified / "cgroup.controllers").write_text("hugetlb\n")
    (unified / "vllm.service" / "cpu.pressure").write_text(PSI)
    (unified / "vllm.service" / "cpu.stat").write_text("usage_usec 2500000\n")
    return procfs.Host(proc, cg)


def _run(check: HostCheck) -> dict[tuple[str, tuple[str, ...]], float]:
    try:
        asyncio.run(check.run())
    finally:
        published = {(f.name, labels): v for f, labels, v in check.batch()
                     if isinstance(v, float)}
    return published


def test_the_engines_cgroup_found_by_its_process_name_on_a_hybrid_host(tmp_path: Path) -> None:
    check = HostCheck(HostConfig(engine_process="vllm"), _tree(tmp_path))
    got = _run(check)
    assert got["llm_host_pressure_seconds_total", ("engine", "cpu", "some")] == 7943.692408
    assert got["llm_host_pressure_seconds_total", ("host", "io", "full")] == 1.5
    assert got["llm_host_engine_cpu_seconds_total", ()] == 2.5
    assert got["llm_host_memory_available_bytes", ()] == 40 * 1024
    assert got["llm_host_swap_pages_total", ("out",)] == 7
    assert got["llm_host_major_faults_total", ()] == 9
    # The engine's cgroup has no memory or io pressure file here: absent, not 0.
    assert ("llm_host_pressure_seconds_total", ("engine", "memory", "some")) not in got


def test_a_kernel_without_psi_publishes_the_rest(tmp_path: Path) -> None:
    got = _run(HostCheck(HostConfig(), _tree(tmp_path, psi=False)))
    assert not any(name == "llm_host_pressure_seconds_total" for name, _ in got)
    assert got["llm_host_cpu_seconds_total", ("iowait",)] == pytest.approx(133.07)


def test_a_missing_engine_cgroup_fails_the_check_and_keeps_the_hosts_series(
        tmp_path: Path) -> None:
    check = HostCheck(HostConfig(engine_cgroup="/gone.service"), _tree(tmp_path))
    with pytest.raises(RuntimeError, match=r"no cgroup .*gone\.service"):
        asyncio.run(check.run())
    names = {f.name for f, _, _ in check.batch()}
    assert "llm_host_memory_total_bytes" in names and "llm_host_engine_cpu_seconds_total" \
        not in names


def test_series_do_not_grow_with_processes(tmp_path: Path) -> None:
    host = _tree(tmp_path)
    before = len(_run(HostCheck(HostConfig(engine_process="vllm"), host)))
    for pid in range(100, 400):
        (host.proc / str(pid)).mkdir()
        (host.proc / str(pid) / "comm").write_text("vllm\n")
        (host.proc / str(pid) / "cgroup").write_text("0::/vllm.service\n")
    assert len(_run(HostCheck(HostConfig(engine_process="vllm"), host))) == before


def test_on_by_default_on_linux_off_when_disabled() -> None:
    assert [c.kind for c in build(Config())] == (["host"] if sys.platform == "linux" else [])
    assert build(Config.model_validate({"host": {"enabled": False}})) == []


def need_cgroups() -> None:
    if sys.platform != "linux" or os.geteuid() != 0 or v2_root() is None:
        reason = "needs Linux, root and a cgroup v2 hierarchy"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason)


def stalls(check: HostCheck, key: tuple[str, tuple[str, ...]], at_least: float) -> float:
    """Seconds of ``key``'s stall counted while reading until ``at_least`` (a minute at
    most: on a machine other tests keep busy, a nice 19 hog may wait its turn)."""
    first = _run(check)
    deadline = time.monotonic() + 60
    while True:
        time.sleep(0.5)
        stalled = _run(check)[key] - first[key]
        if stalled > at_least or time.monotonic() > deadline:
            return stalled


@pytest.mark.slow
@pytest.mark.parametrize("resource", ["memory", "io"])
def test_the_labs_memory_and_io_hogs_stall_the_pod_as_the_kernel_counts(
        resource: str, tmp_path: Path) -> None:
    """The lab's ``memory_hog`` (a working set four times its memory limit, no swap) and
    ``io_hog`` (direct reads under a read-rate cap) beside a sleeping engine: the kernel
    counts their waits in the pod's pressure, which the host check reads."""
    need_cgroups()
    engine = subprocess.Popen(["sleep", "300"])
    pod = None
    try:
        pod = Pod(engine.pid, f"llepod{os.getpid()}")
        if resource == "memory":
            pod.memory_hog(tmp_path / "hog", 64 << 20)
        else:
            pod.io_hog(tmp_path / "hog")
        check = HostCheck(HostConfig(engine_cgroup=pod.name))
        stalled = stalls(check, ("llm_host_pressure_seconds_total",
                                 ("engine", resource, "some")), 1.0)
    finally:
        if pod is not None:
            pod.release()
        engine.kill()
        engine.wait()
    assert stalled > 1.0, stalled
    assert pod is not None and not pod.path.exists()


@pytest.mark.slow
def test_busy_loops_outnumbering_the_cpus_stall_the_engines_cgroup() -> None:
    """Real pressure: one busy loop more than the host has CPUs, at the lowest priority so
    the machine stays usable, in a v2 group of their own: at every moment one of them waits
    for a CPU, which the kernel counts in the group's cpu.pressure (``some``); the host check
    reads that and the group's CPU from cpu.stat."""
    need_cgroups()
    loops = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])
             for _ in range((os.cpu_count() or 1) + 1)]
    group = None
    try:
        group = Group(loops[0].pid, f"llehost{os.getpid()}")
        for loop in loops[1:]:
            (group.path / "cgroup.procs").write_text(str(loop.pid))
        check = HostCheck(HostConfig(engine_cgroup=group.name))
        key = ("llm_host_pressure_seconds_total", ("engine", "cpu", "some"))
        used_key = ("llm_host_engine_cpu_seconds_total", ())
        first = _run(check)
        # Read until both show: at nice 19 on a machine other tests keep busy, the loops
        # may get little CPU for a while; they still stall all the while.
        deadline = time.monotonic() + 60
        while True:
            time.sleep(0.5)
            second = _run(check)
            stalled, used = second[key] - first[key], second[used_key] - first[used_key]
            if (stalled > 1.0 and used > 0.1) or time.monotonic() > deadline:
                break
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
        if group is not None:
            group.release()
    assert stalled > 1.0 and used > 0.1, (stalled, used)
