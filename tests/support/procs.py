"""Free loopback ports, readiness waits, plain HTTP GETs and subprocesses stopped by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tests.support import ROOT

#: Ports handed out below the kernel's ephemeral range (32768 up by default), so that no
#: outgoing connection takes one between free_port() and the server's bind; each pytest-xdist
#: worker has a slice of its own, so concurrent workers never pick the same one.
PORTS = range(10000, 32768)
SLICE = 2500
_next: list[int] = []


def _slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    first = PORTS.start + (index * SLICE) % (len(PORTS) - SLICE)
    return range(first, first + SLICE)


def free_port() -> int:
    """A loopback TCP port nothing listens on, from this process's slice, in turn."""
    ports = _slice()
    if not _next:  # a random start: a rerun or a second session does not retrace the first
        _next.append(ports.start + (os.getpid() * 7919) % len(ports))
    for _ in range(len(ports)):
        port = _next[0]
        _next[0] = ports.start + (port + 1 - ports.start) % len(ports)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free loopback port in {ports.start}-{ports.stop - 1}")


def wait_until(pred: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll ``pred`` until true (readiness, not sleeping a fixed time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def http_get(
    url: str, timeout: float = 5.0, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, ""


class Proc:
    """A child process we started; stopped by PID (its own process group) on teardown."""

    def __init__(self, args: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None):
        self.log = open(os.devnull, "wb")  # noqa: SIM115 - closed in stop()
        self.stderr_path = (
            Path(os.environ.get("TMPDIR", "/tmp")) / f"proc-{os.getpid()}-{id(self)}.log"
        )
        self._err = open(self.stderr_path, "wb")  # noqa: SIM115
        full_env = {**os.environ, **(env or {})}
        self.popen = subprocess.Popen(
            args,
            cwd=cwd,
            env=full_env,
            stdout=self._err,
            stderr=self._err,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        self._err.flush()
        return self.stderr_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        self.log.close()
        self._err.close()
        return self.popen.returncode


#: Niceness of what a timing comparison measures, while it measures (see foreground()).
FOREGROUND_NICE = -10


def _threads(pid: int) -> list[int]:
    """Every thread of ``pid`` and of its descendants (Linux nice values are per thread)."""
    out, todo = [], [pid]
    while todo:
        tids = _threads_of(todo.pop())
        out += tids
        for tid in tids:
            with suppress(FileNotFoundError):
                todo += [int(c) for c in Path(f"/proc/{tid}/task/{tid}/children").read_text()
                         .split()]
    return out


def this_thread_to_foreground() -> None:
    """The calling thread ahead of other load, where this user may raise priority: for a
    thread whose own clock or answer is the measurement, and which blocks nearly always.
    Real time (SCHED_FIFO, as the lab's stand-ins take it: netlab.py says why) where allowed,
    else FOREGROUND_NICE. A nice value only weights the fair scheduler's shares, which gives
    a waking thread no bound on its wait (the delay proxy test's echo thread, at nice -10
    beside the fast tier's two workers, was one suspect of a round trip 21 ms late in CI).
    Linux applies both to the calling thread alone, so call it on a thread of its own."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except PermissionError:
        with suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, FOREGROUND_NICE)


def children_at(pid: int, nice: int) -> bool:
    """Every thread of ``pid``'s descendants, not its own, at niceness ``nice`` from now on,
    where this user may set it (raising priority needs root). Whether any was set."""
    own = set(_threads_of(pid))
    done = False
    for tid in _threads(pid):
        if tid in own:
            continue
        with suppress(PermissionError, ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            done = True
    return done


def _threads_of(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def ahead_of_load(pid: int) -> bool:
    """``pid``'s own threads, not its children's, ahead of other load from now on, where this
    user may raise priority (root); threads it starts later inherit it. For a light process
    (an HTTP frontend, a prober) whose latency a test reads while the tier's other tests
    share the CPUs. Whether it was raised."""
    tids = _threads_of(pid)
    if not tids:
        return False
    raised = False
    for tid in tids:
        with suppress(PermissionError, ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, tid, FOREGROUND_NICE)
            raised = True
    return raised


@contextmanager
def foreground(pid: int) -> Iterator[list[str]]:
    """``pid``'s whole process tree ahead of other load for the block, where this user may
    raise priority (root, as CI runs): a comparison of two clocks on a server (a client's
    TTFT against the engine's own) then measures the server, not the tests that happen to
    share its CPUs. Yields the prefix that runs a command at the same priority."""
    raised = []
    for tid in _threads(pid):
        try:
            before = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, FOREGROUND_NICE)
        except (PermissionError, ProcessLookupError):
            continue
        raised.append((tid, before))
    try:
        yield ["nice", "-n", str(FOREGROUND_NICE)] if raised else []
    finally:
        for tid, before in raised:
            with suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PROCESS, tid, before)


def exporter_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "exporter", *args]
