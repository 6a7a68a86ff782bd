"""The real CLI as a process: SIGHUP reloads, SIGTERM shuts down, bad ports fail cleanly."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.samples import value
from tests.support.simulator import StartSimulator


def write(path: Path, port: int, extra: str) -> None:
    path.write_text(f"server: {{listen_address: '127.0.0.1:{port}'}}\n{extra}")


def metrics(port: int) -> str:
    status, body = http_get(f"http://127.0.0.1:{port}/metrics")
    return body if status == 200 else ""


def runs(body: str, check: str) -> float:
    return value(body, "llm_exporter_check_runs_total", check=check, outcome="success") or 0.0


def test_sighup_keeps_old_config_on_error_and_applies_good_one(
    tmp_path: Path, spawn: Callable[..., Proc], simulator: StartSimulator
) -> None:
    sim = simulator().port
    engine = f"url: 'http://127.0.0.1:{sim}/metrics', interval: 200ms"
    port = free_port()
    cfg = tmp_path / "config.yaml"
    write(
        cfg,
        port,
        "peak_windows:\n  windows: {evening: {start: '20:00', end: '23:00'}}\n"
        f"engines:\n  - {{name: old, {engine}}}\n",
    )
    proc = spawn(exporter_cmd("run", "--config", str(cfg)))
    wait_until(lambda: runs(metrics(port), "engine/old") >= 1, what="old check running")

    cfg.write_text(cfg.read_text() + "peak_windows_typo: 1\n")
    proc.signal(signal.SIGHUP)
    wait_until(
        lambda: 'llm_exporter_config_reloads_total{outcome="error"} 1.0' in metrics(port),
        what="failed reload counted",
    )
    body = metrics(port)
    assert 'llm_exporter_peak_window{window="evening"}' in body
    assert "llm_exporter_config_last_reload_successful 0.0" in body
    # The old checks keep serving after the failed reload.
    before = runs(body, "engine/old")
    wait_until(lambda: runs(metrics(port), "engine/old") >= before + 3, what="old check still running")
    log = proc.output()
    # The same words check-config prints, with path and line.
    assert "peak_windows_typo (line 6): unknown key 'peak_windows_typo'" in log

    write(
        cfg,
        port,
        "peak_windows:\n  windows: {lunch: {start: '12:00', end: '13:30'}}\n"
        f"engines:\n  - {{name: new, {engine}}}\n",
    )
    proc.signal(signal.SIGHUP)
    wait_until(lambda: runs(metrics(port), "engine/new") >= 1, what="new check running")
    body = metrics(port)
    assert 'llm_exporter_peak_window{window="lunch"}' in body
    assert 'window="evening"' not in body and "engine/old" not in body
    assert 'llm_exporter_config_reloads_total{outcome="success"} 1.0' in body
    assert "llm_exporter_config_last_reload_successful 1.0" in body


def test_sigterm_exits_cleanly_within_5s(tmp_path: Path, spawn: Callable[..., Proc]) -> None:
    port = free_port()
    cfg = tmp_path / "config.yaml"
    write(cfg, port, "")
    proc = spawn(exporter_cmd("--config", str(cfg), "--allow-empty"))  # bare: run
    wait_until(lambda: http_get(f"http://127.0.0.1:{port}/-/healthy")[0] == 200, what="healthy")
    t0 = time.monotonic()
    proc.signal(signal.SIGTERM)
    proc.popen.wait(10)
    assert time.monotonic() - t0 < 5
    assert proc.popen.returncode == 0
    assert "Traceback" not in proc.output()


def test_port_in_use_is_a_one_line_error(tmp_path: Path, spawn: Callable[..., Proc]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        cfg = tmp_path / "config.yaml"
        write(cfg, port, "")
        proc = spawn(exporter_cmd("run", "--config", str(cfg), "--allow-empty"))
        proc.popen.wait(30)
        assert proc.popen.returncode == 2
        out = proc.output()
        assert f"server.listen_address 127.0.0.1:{port}" in out and "Traceback" not in out


def test_logs_are_logfmt_or_json(tmp_path: Path, spawn: Callable[..., Proc]) -> None:
    import json

    for fmt in ("logfmt", "json"):
        port = free_port()
        cfg = tmp_path / f"{fmt}.yaml"
        cfg.write_text(f"server: {{listen_address: '127.0.0.1:{port}', log_format: {fmt}}}\n")
        proc = spawn(exporter_cmd("run", "--config", str(cfg), "--allow-empty"))
        wait_until(lambda p=proc: "exporter started" in p.output(), what="start log")  # type: ignore[misc]
        line = next(x for x in proc.output().splitlines() if "exporter started" in x)
        if fmt == "json":
            rec = json.loads(line)
            assert rec["msg"] == "exporter started" and rec["listen"] == f"127.0.0.1:{port}"
        else:
            assert 'msg="exporter started"' in line and f"listen=127.0.0.1:{port}" in line
        proc.stop()
