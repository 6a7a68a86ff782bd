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

from exporter.checks.batch import Ledger
from exporter.metrics.schema import SCHEMA, Kind
from exporter.runtime.exposition import Store
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


def test_every_family_of_the_schema_passes_promtool(prom_cli: PromCli) -> None:
    # A run shows only the families its config and its targets' answers make: this shows
    # them all, so a name promtool refuses (a gauge named like a histogram's part) fails here.
    own = Ledger()
    for family in SCHEMA.values():
        labels = {name: "x" for name in family.labels}
        if family.kind is Kind.COUNTER:
            own.counter(family, labels).inc()
        elif family.kind is Kind.GAUGE:
            own.gauge(family, labels).set(1.0)
        else:
            own.histogram(family, labels, family.buckets or (1.0,)).observe(0.5)
    store = Store()
    store.publish("all", own.batch())
    body = store.text(False).decode()
    assert body.count("# TYPE ") == len(SCHEMA)
    checked = prom_cli("promtool", "check", "metrics", input=body)
    assert checked.returncode == 0 and checked.stdout == "" and checked.stderr == "", (
        checked.stdout + checked.stderr)


def installed_example(tmp_path: Path, sim_base: str, port: int) -> Path:
    """config.example.yaml installed as the README's systemd recipe installs it (its
    ``install -D`` lines, with /etc under ``tmp_path``), every target moved to loopback."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    recipe = [line.partition("#")[0] for line in readme.splitlines()
              if line.startswith("install -D ")]
    assert recipe, "README.md no longer installs the config with install -D"
    for line in recipe:
        subprocess.run(line.replace(" /etc/", f" {tmp_path}/etc/"), shell=True, cwd=ROOT,
                       check=True, timeout=30)
    path = tmp_path / "etc/llm-latency-exporter/config.yaml"
    text = (path.read_text(encoding="utf-8")
            .replace("http://127.0.0.1:8000", sim_base)
            .replace("deepseek-v3", "simulated-model")
            .replace("0.0.0.0:9400", f"127.0.0.1:{port}"))
    for host in ("ct-sh.example.net", "cu-bj.example.net", "cm-gz.example.net"):
        assert host in text, "config.example.yaml's path targets moved"
        text = text.replace(host, "127.0.0.1")
    path.write_text(text, encoding="utf-8")
    return path


def test_the_installed_example_config_is_valid_and_its_metrics_pass_promtool(
    tmp_path: Path, spawn: Callable[..., Proc], simulator: StartSimulator, prom_cli: PromCli
) -> None:
    sim = simulator(fast=True)
    port = free_port()
    config = installed_example(tmp_path, sim.base, port)
    secrets = {"ENGINE_TOKEN": "engine-token", "LLM_API_KEY": "api-key"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    checked = subprocess.run(exporter_cmd("check-config", "--config.file", str(config)),
                             cwd=elsewhere, capture_output=True, text=True, timeout=60,
                             env={**os.environ, **secrets})
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    spawn(exporter_cmd("run", "--config.file", str(config)), cwd=elsewhere, env=secrets)
    url = f"http://127.0.0.1:{port}/metrics"
    wanted = ('llm_probe_requests_total{', "llm_engine_up", "llm_path_rtt_seconds_bucket",
              "llm_path_hops", "llm_gpu_nvml_up", "llm_clients_")
    wait_until(lambda: all(w in http_get(url)[1] for w in wanted), 60,
               "probe, engine, path, route, GPU and clients series")
    body = http_get(url)[1]
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


@pytest.mark.parametrize("command", ["run", "check-config", "generate", "diagnose", "report"])
def test_every_subcommand_spells_the_config_flag_one_way(command: str) -> None:
    proc = subprocess.run(exporter_cmd(command, "--help"), capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "--config.file FILE, --config FILE" in proc.stdout
    # Only a running exporter re-reads its web config on SIGHUP.
    assert ("on SIGHUP" in " ".join(proc.stdout.split())) is (command == "run")


def test_check_config_takes_the_flag_or_the_file_once(tmp_path: Path) -> None:
    config = exporter_config(tmp_path, "http://127.0.0.1:1", free_port())
    by_flag = subprocess.run(exporter_cmd("check-config", "--config.file", str(config)),
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert by_flag.returncode == 0 and by_flag.stdout.startswith(f"{config}: valid")
    for args in ((), (str(config), "--config.file", str(config))):
        twice = subprocess.run(exporter_cmd("check-config", *args), capture_output=True,
                               text=True, timeout=60, cwd=ROOT)
        assert twice.returncode == 2 and twice.stdout == ""
        assert twice.stderr.splitlines() == [
            "error: check-config: give the config file once, as FILE or --config.file FILE"]


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    # `| head -1`, made certain: the pipe is closed before the command writes a byte.
    proc = subprocess.Popen(exporter_cmd("check-config", "config.example.yaml"), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=NO_SECRETS_ENV)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(60) == 128 + 13
    assert "Traceback" not in err and "BrokenPipe" not in err, err


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
