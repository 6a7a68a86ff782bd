"""What users of node_exporter and blackbox_exporter expect: a clean exposition that
promtool accepts, process self-metrics, node_exporter-style flags, a promtool-like
check-config."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.prometheus import PromCli
from tests.support.simulator import StartSimulator

NO_SECRETS_ENV = {k: v for k, v in os.environ.items()
                  if k not in ("ENGINE_TOKEN", "LLM_API_KEY")}


def exporter_config(tmp_path: Path, sim_base: str, port: int) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
        f"engines: [{{name: main, url: '{sim_base}/metrics', type: vllm, interval: 1s}}]\n"
        f"probes: [{{name: chat, url: '{sim_base}/v1/chat/completions', model: simulated-model,"
        " interval: 1s, max_tokens: 8, prompt_tokens: 32}]\n"
    )
    return path


def start_exporter(spawn: Callable[..., Proc], config: Path, *flags: str) -> Proc:
    proc: Proc = spawn(exporter_cmd("run", "--config.file", str(config), *flags))
    return proc


def test_live_metrics_pass_promtool_and_carry_self_metrics(
    tmp_path: Path, spawn: Callable[..., Proc], simulator: StartSimulator, prom_cli: PromCli
) -> None:
    sim = simulator(fast=True)
    port = free_port()
    start_exporter(spawn, exporter_config(tmp_path, sim.base, port))
    url = f"http://127.0.0.1:{port}/metrics"
    # Wait until both checks have run, so every family that will exist exists.
    wait_until(lambda: 'llm_probe_requests_total{' in http_get(url)[1]
               and "llm_engine_up" in http_get(url)[1], 30, "probe and engine series")
    status, body = http_get(url)
    assert status == 200
    names = {line.split("{")[0].split(" ")[0] for line in body.splitlines()
             if line and not line.startswith("#")}
    assert not [n for n in names if n.endswith("_created")]
    assert "process_resident_memory_bytes" in names and "python_info" in names
    checked = prom_cli("promtool", "check", "metrics", input=body)
    assert checked.returncode == 0 and checked.stdout == "" and checked.stderr == "", (
        checked.stdout + checked.stderr)


def test_flags_override_the_server_section(
    tmp_path: Path, spawn: Callable[..., Proc], simulator: StartSimulator
) -> None:
    sim = simulator(fast=True)
    in_file, on_flag = free_port(), free_port()
    proc = start_exporter(spawn, exporter_config(tmp_path, sim.base, in_file),
                          "--web.listen-address", f"127.0.0.1:{on_flag}",
                          "--log.format", "json", "--log.level", "debug")
    wait_until(lambda: http_get(f"http://127.0.0.1:{on_flag}/-/healthy")[0] == 200, 20,
               "the listener the flag names")
    assert http_get(f"http://127.0.0.1:{in_file}/-/healthy")[0] == 0
    first = proc.output().splitlines()[0]
    assert json.loads(first)["level"] in ("debug", "info")


@pytest.mark.parametrize(("flags", "message"), [
    (("--web.listen-address", "nonsense"), "error: --web.listen-address: expected host:port"),
    (("--log.level", "loud"), "invalid choice: 'loud'"),
])
def test_bad_flags_exit_2_with_one_line(
    tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    config = exporter_config(tmp_path, "http://127.0.0.1:1", free_port())
    proc = subprocess.run(exporter_cmd("run", "--config.file", str(config), *flags),
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_check_config_warns_about_unset_secrets_and_passes() -> None:
    proc = subprocess.run(exporter_cmd("check-config", "config.example.yaml"), cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=NO_SECRETS_ENV)
    assert proc.returncode == 0, proc.stderr
    warnings = proc.stderr.splitlines()
    assert len(warnings) == 2, warnings
    assert "engines[0].bearer_token (line" in warnings[0] and "ENGINE_TOKEN" in warnings[0]
    assert "probes[0].api_key (line" in warnings[1] and "LLM_API_KEY" in warnings[1]
    assert all(w.startswith("warning: ") for w in warnings)
    assert proc.stdout.startswith("config.example.yaml: valid")


def test_run_still_refuses_unset_secrets() -> None:
    proc = subprocess.run(exporter_cmd("run", "--config.file", "config.example.yaml"),
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=NO_SECRETS_ENV)
    assert proc.returncode == 2
    assert "ENGINE_TOKEN is not set" in proc.stderr and "Traceback" not in proc.stderr
