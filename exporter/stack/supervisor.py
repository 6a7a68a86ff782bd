"""The monitoring stack on loopback without Docker: ``make stack`` and ``make stack-down``.

Runs Debian's ``prometheus`` and ``prometheus-alertmanager`` with the files configs.py renders,
and next to them the engine simulator, the exporter and a webhook sink that records
notifications. All listen on 127.0.0.1; data, rendered files and logs live in one temporary
directory.

Each started process is recorded with its PID and kernel start time in a state file;
``down`` stops exactly those, and never a process that merely reused one of the PIDs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path

from exporter.stack.configs import render
from exporter.stack.state import STATE_FILE, Ports, Service, Stack

#: Seconds each service gets to answer its readiness URL, and to exit after SIGTERM.
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"  # Debian's name for the alertmanager binary


class StackError(Exception):
    """A problem starting or stopping the stack, worded for the user."""


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a live process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may hold spaces and parentheses; fields resume after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our child (it is when tests call up())."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def is_running(service: Service) -> bool:
    _reap(service.pid)
    stat = _proc_stat(service.pid)
    return stat is not None and stat[0] != "Z" and stat[1] == service.started


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _tail(path: str, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def _commands(workdir: Path, ports: Ports) -> list[tuple[str, list[str], str, str]]:
    """(name, argv, readiness URL, URL shown to the user) in start order."""
    py = [sys.executable, "-m", "exporter"]
    prom, am = workdir / "prometheus", workdir / "alertmanager"
    base = "http://127.0.0.1:{}".format
    return [
        ("sink",
         [sys.executable, "-m", "exporter.stack", "sink",
          "--listen", f"127.0.0.1:{ports.sink}", "--log", str(workdir / "notifications.jsonl")],
         f"{base(ports.sink)}/-/healthy", f"{base(ports.sink)}/notifications"),
        ("simulator",
         [*py, "simulate", "--host", "127.0.0.1", "--port", str(ports.simulator),
          "--format", "vllm"],
         f"{base(ports.simulator)}/health", f"{base(ports.simulator)}/admin/faults"),
        ("exporter",
         [*py, "run", "--config", str(workdir / "exporter.yaml")],
         f"{base(ports.exporter)}/-/healthy", f"{base(ports.exporter)}/"),
        ("alertmanager",
         [ALERTMANAGER, f"--config.file={am / 'alertmanager.yml'}",
          f"--storage.path={am / 'data'}",
          f"--web.listen-address=127.0.0.1:{ports.alertmanager}",
          "--cluster.listen-address="],
         f"{base(ports.alertmanager)}/-/ready", f"{base(ports.alertmanager)}/"),
        ("prometheus",
         [PROMETHEUS, f"--config.file={prom / 'prometheus.yml'}",
          f"--storage.tsdb.path={prom / 'data'}",
          f"--web.listen-address=127.0.0.1:{ports.prometheus}"],
         f"{base(ports.prometheus)}/-/ready", f"{base(ports.prometheus)}/"),
    ]


def _load(state: Path) -> Stack | None:
    try:
        return Stack.from_json(state.read_text())
    except FileNotFoundError:
        return None


def up(root: Path, ports: Ports | None = None, state: Path | None = None,
       workdir: Path | None = None) -> Stack:
    """Start the stack and return once every service answers; on any failure stop what
    was started and raise StackError with the failing service's log tail."""
    ports = ports or Ports()
    state = state or root / STATE_FILE
    previous = _load(state)
    if previous is not None and any(is_running(s) for s in previous.services):
        raise StackError(f"a stack is already running ({state}); stop it with make stack-down")
    missing = [b for b in (PROMETHEUS, ALERTMANAGER) if shutil.which(b) is None]
    if missing:
        raise StackError(
            f"{' and '.join(missing)} not found: apt-get install prometheus "
            "prometheus-alertmanager (or make system-deps)"
        )
    busy = [f"{name} {port}" for name, port in asdict(ports).items() if not _port_free(port)]
    if busy:
        raise StackError(f"ports in use on 127.0.0.1: {', '.join(busy)}")
    if not (root / "alerts/rules").is_dir() or not (root / "alerts/alertmanager.yaml").exists():
        raise StackError("alerts/ has no generated rules: run make generate")

    workdir = workdir or Path(tempfile.mkdtemp(prefix="llm-latency-stack-"))
    stack = Stack(str(workdir), ports)
    try:
        render(root, workdir, ports)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    state.parent.mkdir(parents=True, exist_ok=True)
    try:
        for name, argv, ready, shown in _commands(workdir, ports):
            log = workdir / f"{name}.log"
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    argv, cwd=root, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                    # Its own session: Ctrl-C in the shell that ran `make stack` does not
                    # reach it, and `down` signals it alone.
                    start_new_session=True,
                )
            stat = _proc_stat(proc.pid)
            started = stat[1] if stat else 0
            stack.services.append(Service(name, proc.pid, started, shown, str(log)))
            # Saved after every start, so that `down` finds whatever a failure left behind.
            state.write_text(stack.to_json())
            _wait_ready(name, proc, ready, str(log))
    except BaseException:
        down(root, state)
        raise
    return stack


def _wait_ready(name: str, proc: subprocess.Popen[bytes], url: str, log: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StackError(f"{name} exited with status {proc.returncode}:\n{_tail(log)}")
        if _http_ok(url):
            return
        time.sleep(0.1)
    raise StackError(f"{name} did not answer {url} within {READY_TIMEOUT:g}s:\n{_tail(log)}")


def _stop(service: Service) -> None:
    if not is_running(service):
        return
    try:
        os.kill(service.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        if not is_running(service):
            return
        time.sleep(0.05)
    if is_running(service):
        os.kill(service.pid, signal.SIGKILL)
        while is_running(service):
            time.sleep(0.05)


def down(root: Path, state: Path | None = None, keep: bool = False) -> list[Service]:
    """Stop every recorded process (last started first); return those that were running."""
    state = state or root / STATE_FILE
    stack = _load(state)
    if stack is None:
        return []
    running = [s for s in stack.services if is_running(s)]
    for service in reversed(stack.services):
        _stop(service)
    if not keep:
        shutil.rmtree(stack.directory, ignore_errors=True)
    state.unlink(missing_ok=True)
    return running
