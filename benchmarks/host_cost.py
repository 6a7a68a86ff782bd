"""The host check's cost per run and its series, against a run that reads the host only.

Medians over ``--runs`` runs as the scheduler runs them (``await check.run()``, the reading
on a worker thread), in this process:

* ``host`` (the reference): no engine named, the host's files only;
* ``cgroup``: the engine's cgroup named (a v2 group this script makes, one process in it);
* ``process, none found``: ``engine_process`` naming no process, with ``--processes`` more
  processes running: the worst case of the name scan, every /proc/<pid>/comm read;
* ``process, found``: the same with the last process started so named.

The series count must not change with the number of processes. Needs root for the cgroup
(skipped without it).

    .venv/bin/python -m benchmarks.host_cost                   # 2,000 more processes
    .venv/bin/python -m benchmarks.host_cost --processes 500 --runs 21

Exit status 1 unless the series counts of the process runs agree with and without the
extra processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack

from exporter.checks.host.check import HostCheck
from exporter.config.models import HostConfig
from tests.support.cgroups import Group, v2_root

NAME = "llehostbench"


def timed(check: HostCheck, runs: int) -> tuple[float, int]:
    """Median ms per run, and the series the last run published."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        # A named process that is not running fails the run: its cost is the point here.
        with contextlib.suppress(RuntimeError):
            asyncio.run(check.run())
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), len(check.batch())


def started(stack: ExitStack, args: list[str]) -> subprocess.Popen[bytes]:
    """A process stopped by PID when the stack closes."""
    proc = subprocess.Popen(args)

    def stop() -> None:
        proc.kill()
        proc.wait()

    stack.callback(stop)
    return proc


def named(stack: ExitStack) -> None:
    """One sleeping process named NAME (its comm)."""
    code = (f"import ctypes, time; ctypes.CDLL(None).prctl(15, b'{NAME}', 0, 0, 0); "
            "time.sleep(3600)")
    started(stack, [sys.executable, "-c", code])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=11)
    args = ap.parse_args(argv)
    rows: list[tuple[str, float, int]] = []
    with ExitStack() as stack:
        ref, ref_series = timed(HostCheck(HostConfig()), args.runs)
        rows.append(("host (reference)", ref, ref_series))
        if os.geteuid() == 0 and v2_root() is not None:
            sleeper = started(stack, ["sleep", "3600"])
            group = Group(sleeper.pid, f"{NAME}{os.getpid()}")
            stack.callback(group.release)
            rows.append(("cgroup", *timed(HostCheck(HostConfig(engine_cgroup=group.name)),
                                          args.runs)))
        absent = HostConfig(engine_process="nosuchengine")
        before = timed(HostCheck(absent), args.runs)[1]
        for _ in range(args.processes):
            started(stack, ["sleep", "3600"])
        rows.append(("process, none found", *timed(HostCheck(absent), args.runs)))
        named(stack)
        rows.append(("process, found", *timed(HostCheck(HostConfig(engine_process=NAME)),
                                              args.runs)))
        procs = len([p for p in os.listdir("/proc") if p.isdigit()])
    print(f"{procs} processes running; medians of {args.runs} runs")
    print("| run | ms | x host | series |")
    print("|---|---|---|---|")
    for name, ms, series in rows:
        print(f"| {name} | {ms:.2f} | {ms / ref:.1f} | {series} |")
    same = before == rows[-2][2]
    print(f"series with and without {args.processes} more processes: {before} and "
          f"{rows[-2][2]}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
