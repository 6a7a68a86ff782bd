"""Hostile or mistaken config files: each is one line and exit 2 from the CLI, and on
SIGHUP the old config keeps running, /metrics keeps answering, the reload metrics say so."""

from __future__ import annotations

import re
import resource
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.hostile import HOSTILE
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.simulator import StartSimulator

#: The exporter may use this much at most on any of these files (it idles near 60 MB).
MAX_RSS_BYTES = 200 * 1024 * 1024


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_hostile_file_is_one_line_and_exit_2(tmp_path: Path, kind: str, command: str) -> None:
    write, expected = HOSTILE[kind]
    path = tmp_path / f"{kind}.yaml"
    write(path)
    args = [command, str(path)] if command == "check-config" else [command, "--config.file",
                                                                    str(path)]
    # A hang guard only: the figures are in docs/benchmarks.md (hostile configs).
    proc = subprocess.run(exporter_cmd(*args), capture_output=True, text=True, timeout=30,
                          cwd=ROOT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert re.search(expected, lines[0]), lines[0]
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 < MAX_RSS_BYTES


def test_many_mistakes_print_the_first_ones_and_a_count(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("engines:\n" + "".join(
        f"  - {{name: e{i}, url: 'http://127.0.0.1:1/metrics', bogus: 1}}\n" for i in range(500)))
    proc = subprocess.run(exporter_cmd("check-config", str(path)), capture_output=True,
                          text=True, timeout=30, cwd=ROOT)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 21 and lines[-1].endswith("... and 480 more problems"), lines[-3:]


def metrics(port: int) -> str:
    return http_get(f"http://127.0.0.1:{port}/metrics")[1]


def test_hostile_files_on_sighup_keep_the_old_config(
    tmp_path: Path, spawn: Callable[..., Proc], simulator: StartSimulator
) -> None:
    sim = simulator(fast=True)
    port = free_port()
    cfg = tmp_path / "config.yaml"
    good = (f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
            f"engines: [{{name: main, url: '{sim.base}/metrics', interval: 200ms}}]\n")
    cfg.write_text(good)
    proc = spawn(exporter_cmd("run", "--config.file", str(cfg)))
    wait_until(lambda: 'llm_engine_up{target="main"} 1.0' in metrics(port), 30, "engine up")
    for failures, kind in enumerate(sorted(HOSTILE), start=1):
        cfg.unlink()
        HOSTILE[kind][0](cfg)
        proc.signal(signal.SIGHUP)
        wait_until(
            lambda n=failures: f'llm_exporter_config_reloads_total{{outcome="error"}} {n}.0'  # type: ignore[misc]
            in metrics(port), 30, f"failed reload of {kind} counted")
        body = metrics(port)
        assert "llm_exporter_config_last_reload_successful 0.0" in body
        assert 'llm_engine_up{target="main"} 1.0' in body, kind
    assert proc.popen.poll() is None
    assert "Traceback" not in proc.output()
    cfg.unlink()
    cfg.write_text(good)
    proc.signal(signal.SIGHUP)
    wait_until(lambda: "llm_exporter_config_last_reload_successful 1.0" in metrics(port), 30,
               "good reload")
