"""The native stack (``make stack`` / ``make stack-down``): real Prometheus, Alertmanager,
exporter, simulator and webhook sink on loopback, started and stopped by PID."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from exporter.stack import supervisor as stack
from exporter.stack.sink import Sink, make_sink_server
from exporter.stack.state import Ports, Service, Stack
from tests.support import ROOT
from tests.support.procs import http_get, wait_until


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


def gone(pid: int) -> bool:
    """Exited and reaped, or at least no longer running (a zombie of someone else's)."""
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def stack_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter.stack", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=90)


@pytest.mark.timeout(180)
def test_up_serves_every_component_and_down_stops_exactly_them(
        tmp_path: Path, stack_ports: Ports) -> None:
    # Through the command line, as make stack runs it: the services outlive `up` and are
    # no children of ours, which is the case `down` must handle.
    ports, state = stack_ports, tmp_path / "state.json"
    port_args = [f"--{name}-port={port}" for name, port in asdict(ports).items()]
    result = stack_cli("up", f"--state={state}", *port_args)
    assert result.returncode == 0, result.stdout + result.stderr
    running = Stack.from_json(state.read_text())
    try:
        assert [s.name for s in running.services] == [
            "sink", "simulator", "exporter", "alertmanager", "prometheus"
        ]
        for service in running.services:
            assert service.url in result.stdout
            assert stack.is_running(service)
        prom = f"http://127.0.0.1:{ports.prometheus}"

        def all_targets_up() -> bool:
            targets = get_json(f"{prom}/api/v1/targets")["data"]["activeTargets"]
            jobs = {t["labels"]["job"] for t in targets if t["health"] == "up"}
            return jobs == {"llm-latency-exporter", "engine", "prometheus", "alertmanager"}

        wait_until(all_targets_up, timeout=60, what="every scrape target up")
        groups = get_json(f"{prom}/api/v1/rules")["data"]["groups"]
        assert any(r["name"] == "LLMEngineDown" for g in groups for r in g["rules"])
        # Prometheus found Alertmanager through the same targets file it scrapes it with.
        managers = get_json(f"{prom}/api/v1/alertmanagers")["data"]["activeAlertmanagers"]
        assert managers == [{"url": f"http://127.0.0.1:{ports.alertmanager}/api/v2/alerts"}]
        status, text = http_get(f"http://127.0.0.1:{ports.exporter}/metrics")
        assert status == 200 and 'llm_engine_up{target="main"} 1.0' in text
    finally:
        result = stack_cli("down", f"--state={state}")
    assert result.returncode == 0, result.stderr
    for service in running.services:
        assert f"stopped {service.name} (pid {service.pid})" in result.stdout
        assert gone(service.pid), service
    assert not Path(running.directory).exists() and not state.exists()
    assert "no stack running" in stack_cli("down", f"--state={state}").stdout


def test_down_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        started = stack._proc_stat(stranger.pid)
        assert started is not None
        state = tmp_path / "state.json"
        # A state file whose process exited long ago, its PID now someone else's.
        recorded = Stack(str(tmp_path / "gone"), Ports(), [
            Service("exporter", stranger.pid, started[1] - 1, "", "")
        ])
        state.write_text(recorded.to_json())
        assert stack.down(ROOT, state) == []
        assert stranger.poll() is None and not state.exists()
    finally:
        stranger.send_signal(signal.SIGTERM)
        stranger.wait(5)


def test_up_refuses_a_busy_port_before_starting_anything(tmp_path: Path, stack_ports: Ports
                                                         ) -> None:
    ports, state = stack_ports, tmp_path / "state.json"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports.prometheus))
        taken.listen()
        with pytest.raises(stack.StackError, match=f"prometheus {ports.prometheus}"):
            stack.up(ROOT, ports, state)
    assert not state.exists()


@pytest.mark.timeout(120)
def test_a_failing_component_stops_everything_started_before_it(tmp_path: Path,
                                                                stack_ports: Ports) -> None:
    root = tmp_path / "repo"
    for part in ("deploy/prometheus", "deploy/stack", "alerts"):
        shutil.copytree(ROOT / part, root / part)
    # Prometheus starts last and refuses this config, so four services are up by then.
    (root / "deploy/prometheus/prometheus.yml").write_text("scrape_configs: [{}]\n")
    state, workdir = tmp_path / "state.json", tmp_path / "work"
    recorded: list[Service] = []
    original = stack._wait_ready

    def spy(name: str, proc: subprocess.Popen[bytes], url: str, log: str) -> None:
        recorded.append(Service(name, proc.pid, 0, url, log))
        original(name, proc, url, log)

    stack._wait_ready = spy
    try:
        with pytest.raises(stack.StackError, match="prometheus exited"):
            stack.up(root, stack_ports, state, workdir)
    finally:
        stack._wait_ready = original
    assert [s.name for s in recorded][-1] == "prometheus" and len(recorded) == 5
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not all(gone(s.pid) for s in recorded):
        time.sleep(0.05)
    assert all(gone(s.pid) for s in recorded)
    assert not state.exists() and not workdir.exists()


def test_sink_records_notifications(tmp_path: Path) -> None:
    sink = Sink(tmp_path / "log.jsonl")
    server = make_sink_server("127.0.0.1", 0, sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        body = {"status": "firing", "alerts": [{"status": "firing", "labels": {"alertname": "X"}}]}
        req = urllib.request.Request(f"{url}/pager", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200
        bad = urllib.request.Request(f"{url}/pager", data=b"[1]")
        assert http_post_status(bad) == 400
        got = get_json(f"{url}/notifications")
        assert [(n["path"], n["payload"]) for n in got] == [("/pager", body)]
        lines = (tmp_path / "log.jsonl").read_text().splitlines()
        assert [json.loads(line)["payload"] for line in lines] == [body]
    finally:
        server.shutdown()
        server.server_close()


def http_post_status(req: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
