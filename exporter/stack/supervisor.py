"""The monitoring stack on loopback without Docker: ``make stack`` and ``make stack-down``.

Runs Debian's ``prometheus`` and ``prometheus-alertmanager`` with the same files
docker-compose.yml mounts: deploy/prometheus/prometheus.yml (copied byte for byte), the
generated rules in alerts/rules/ and the generated alerts/alertmanager.yaml. Next to them
run the engine simulator, the exporter and a webhook sink that records notifications. All
listen on 127.0.0.1; data, rendered files and logs live in one temporary directory.

What differs from compose is only what must: prometheus.yml reads its targets from files
under targets/, written here with loopback ports; and Alertmanager's receivers are pointed
at the local sink (``local_receivers``), so a notification never leaves the machine.

Each started process is recorded with its PID and kernel start time in a state file;
``down`` stops exactly those, and never a process that merely reused one of the PIDs.

    python -m exporter.stack up        # start, print the URLs, return
    python -m exporter.stack down      # stop what `up` started, remove its directory
    python -m exporter.stack sink --listen 127.0.0.1:9095   # the webhook sink alone
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from string import Template
from typing import Any

import yaml

EXIT_USAGE = 2
STATE_FILE = Path(".stack") / "state.json"
#: Seconds each service gets to answer its readiness URL, and to exit after SIGTERM.
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"  # Debian's name for the alertmanager binary


class StackError(Exception):
    """A problem starting or stopping the stack, worded for the user."""


@dataclass(frozen=True)
class Ports:
    # Away from the demo's 8800/9400 (`make run`) and the compose stack's 9090/9093, so
    # the native stack can run beside either.
    simulator: int = 18800
    exporter: int = 19400
    prometheus: int = 19090
    alertmanager: int = 19093
    sink: int = 19095


@dataclass
class Service:
    name: str
    pid: int
    #: Kernel start time of the process (clock ticks after boot): a PID reused by another
    #: process after ours exited has a different one, so `down` leaves it alone.
    started: int
    url: str
    log: str


@dataclass
class Stack:
    directory: str
    ports: Ports
    services: list[Service] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Stack:
        data = json.loads(text)
        return cls(
            directory=data["directory"],
            ports=Ports(**data["ports"]),
            services=[Service(**s) for s in data["services"]],
        )


# --- files -----------------------------------------------------------------------------


def local_receivers(config: dict[str, Any], sink: str) -> dict[str, Any]:
    """Alertmanager config with every notification endpoint replaced by the local sink.

    Webhook-style URLs become ``<sink>/<receiver>``, so the sink can tell which receiver
    (pager, tickets, ...) a notification was routed to; SMTP smarthosts point at the sink
    too, which refuses to speak SMTP, so mail fails locally instead of leaving the host.
    Routing, grouping, inhibition and time intervals are left exactly as generated.
    """
    out = copy.deepcopy(config)
    host_port = sink.removeprefix("http://")
    defaults = out.get("global") or {}
    for key in list(defaults):
        if key.endswith("_url"):
            defaults[key] = sink
        elif key == "smtp_smarthost":
            defaults[key] = host_port
    for receiver in out.get("receivers") or []:
        for kind, entries in receiver.items():
            if not kind.endswith("_configs"):
                continue
            for entry in entries:
                for key in list(entry):
                    if key in ("url", "api_url"):
                        entry[key] = f"{sink}/{receiver['name']}"
                    elif key in ("url_file", "api_url_file"):
                        del entry[key]
                        entry[key.removesuffix("_file")] = f"{sink}/{receiver['name']}"
                    elif key == "smarthost":
                        entry[key] = host_port
    return out


def _targets(hostport: str, labels: dict[str, str] | None = None) -> str:
    group: dict[str, Any] = {"targets": [hostport]}
    if labels:
        group["labels"] = labels
    return yaml.safe_dump([group], sort_keys=False)


def render(root: Path, workdir: Path, ports: Ports) -> None:
    """Write everything the processes read into ``workdir``."""
    prom = workdir / "prometheus"
    (prom / "targets").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(root / "deploy/prometheus/prometheus.yml", prom / "prometheus.yml")
    loopback = "127.0.0.1:{}".format
    targets = {
        "exporter.yml": _targets(loopback(ports.exporter)),
        # `target` matches the engine's name in deploy/stack/exporter.yaml, as the compose
        # targets file labels the demo engine.
        "engine.yml": _targets(loopback(ports.simulator), {"target": "main"}),
        "prometheus.yml": _targets(loopback(ports.prometheus)),
        "alertmanager.yml": _targets(loopback(ports.alertmanager)),
    }
    for name, text in targets.items():
        (prom / "targets" / name).write_text(text)
    rules = prom / "rules"
    if rules.is_symlink() or rules.exists():
        rules.unlink()
    rules.symlink_to((root / "alerts/rules").resolve(), target_is_directory=True)

    am = workdir / "alertmanager"
    am.mkdir(parents=True, exist_ok=True)
    generated = yaml.safe_load((root / "alerts/alertmanager.yaml").read_text())
    local = local_receivers(generated, f"http://127.0.0.1:{ports.sink}")
    (am / "alertmanager.yml").write_text(
        "# alerts/alertmanager.yaml with its receivers pointed at the local sink "
        "(exporter/stack/supervisor.py).\n" + yaml.safe_dump(local, sort_keys=False)
    )

    template = Template((root / "deploy/stack/exporter.yaml").read_text())
    (workdir / "exporter.yaml").write_text(
        template.substitute(exporter_port=ports.exporter, simulator_port=ports.simulator)
    )


# --- processes ---------------------------------------------------------------------------


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


# --- webhook sink ------------------------------------------------------------------------


class Sink:
    """Records Alertmanager webhook notifications: in memory, as JSON lines, on stdout."""

    def __init__(self, log: Path | None = None) -> None:
        self.notifications: list[dict[str, Any]] = []
        self._log = log
        self._lock = threading.Lock()

    def record(self, path: str, payload: dict[str, Any]) -> None:
        entry = {"path": path, "received": time.time(), "payload": payload}
        with self._lock:
            self.notifications.append(entry)
            if self._log is not None:
                with open(self._log, "a") as f:
                    f.write(json.dumps(entry, sort_keys=True) + "\n")
        for alert in payload.get("alerts", []):
            labels = alert.get("labels", {})
            others = " ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
            print(f"{path} {alert.get('status')} {labels.get('alertname')} {others}", flush=True)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.notifications)


def make_sink_server(host: str, port: int, sink: Sink) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                payload = json.loads(self.rfile.read(length))
            except ValueError:
                self._send(400, {"error": "body is not JSON"})
                return
            if not isinstance(payload, dict):
                self._send(400, {"error": "body is not a JSON object"})
                return
            sink.record(self.path, payload)
            self._send(200, {"status": "ok"})

        def do_GET(self) -> None:
            if self.path == "/notifications":
                self._send(200, sink.snapshot())
            elif self.path == "/-/healthy":
                self._send(200, {"status": "ok"})
            else:
                self._send(404, {"error": "GET /notifications or /-/healthy"})

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per notification comes from Sink.record instead

    return ThreadingHTTPServer((host, port), Handler)


def serve_sink(listen: str, log: Path | None) -> None:
    host, _, port = listen.rpartition(":")
    server = make_sink_server(host or "127.0.0.1", int(port), Sink(log))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"webhook sink listening on http://{listen}/ (GET /notifications)", flush=True)
    with server:
        server.serve_forever()


# --- command line ------------------------------------------------------------------------


def _print_urls(stack: Stack) -> None:
    print("llm-latency native stack (all on 127.0.0.1):")
    labels = {
        "sink": "alert sink (notifications)",
        "simulator": "engine simulator faults",
        "exporter": "exporter",
        "alertmanager": "alertmanager",
        "prometheus": "prometheus",
    }
    for service in stack.services:
        print(f"  {labels[service.name]:<28} {service.url}")
    print(f"  {'data, configs and logs':<28} {stack.directory}")
    print(
        "inject a fault:  curl -s "
        f"http://127.0.0.1:{stack.ports.simulator}/admin/faults -d '{{\"metrics_error_rate\": 1}}'"
    )
    print("stop:            make stack-down")


def _parse_ports(args: argparse.Namespace) -> Ports:
    defaults = asdict(Ports())
    return Ports(**{name: getattr(args, f"{name}_port") or port for name, port in
                    defaults.items()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exporter.stack",
        description="Prometheus, Alertmanager, the exporter and the engine simulator on "
        "loopback, without Docker.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the stack and print its URLs")
    for name, port in asdict(Ports()).items():
        p_up.add_argument(f"--{name}-port", type=int, default=None,
                          help=f"(default {port})")
    p_down = sub.add_parser("down", help="stop what `up` started and remove its directory")
    p_down.add_argument("--keep", action="store_true", help="keep the data and logs")
    p_sink = sub.add_parser("sink", help="run only the webhook sink")
    p_sink.add_argument("--listen", default="127.0.0.1:9095")
    p_sink.add_argument("--log", type=Path, default=None, help="append JSON lines here")
    for p in (p_up, p_down):
        p.add_argument("--root", type=Path, default=Path.cwd(),
                       help="repository root (default: the current directory)")
        p.add_argument("--state", type=Path, default=None,
                       help=f"state file (default: ROOT/{STATE_FILE})")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            _print_urls(up(args.root, _parse_ports(args), args.state))
        elif args.command == "down":
            stopped = down(args.root, args.state, keep=args.keep)
            for service in stopped:
                print(f"stopped {service.name} (pid {service.pid})")
            if not stopped:
                print("no stack running")
        else:
            serve_sink(args.listen, args.log)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


