"""Hostile or mistaken config files: each is one line and exit 2 from the CLI, and on
SIGHUP the old config keeps running, /metrics keeps answering, the reload metrics say so."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.simulator.state import DEFAULT_MODEL
from tests.support import ROOT
from tests.support.hostile import HOSTILE
from tests.support.matrix import exposition, leaks, pages, runs, scrape, watch
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.samples import value
from tests.support.simulator import StartSimulator

#: The exporter may use this much at most on any of these files (it idles near 60 MB).
MAX_RSS_BYTES = 200 * 1024 * 1024


def run_measured(args: list[str], timeout: float) -> tuple[int, str, str, int]:
    """(exit status, stdout, stderr, peak RSS in bytes) of this one child: RUSAGE_CHILDREN
    would be the largest of every child the test process ever reaped."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdout=out, stderr=err, cwd=ROOT)
        guard = threading.Timer(timeout, proc.kill)
        guard.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            guard.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (proc.returncode, out.read().decode(), err.read().decode(),
                usage.ru_maxrss * 1024)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_hostile_file_is_one_line_and_exit_2(tmp_path: Path, kind: str, command: str) -> None:
    write, expected = HOSTILE[kind]
    path = tmp_path / f"{kind}.yaml"
    write(path)
    args = [command, str(path)] if command == "check-config" else [command, "--config.file",
                                                                    str(path)]
    # A hang guard only: the figures are in docs/benchmarks.md (hostile configs).
    rc, stdout, stderr, peak = run_measured(exporter_cmd(*args), timeout=30)
    assert rc == 2, stdout + stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert re.search(expected, lines[0]), lines[0]
    assert peak < MAX_RSS_BYTES, peak


def test_many_mistakes_print_the_first_ones_and_a_count(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("engines:\n" + "".join(
        f"  - {{name: e{i}, url: 'http://127.0.0.1:1/metrics', bogus: 1}}\n" for i in range(500)))
    proc = subprocess.run(exporter_cmd("check-config", str(path)), capture_output=True,
                          text=True, timeout=30, cwd=ROOT)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 21 and lines[-1].endswith("... and 480 more problems"), lines[-3:]


#: The good config's secrets, and a hostile file that quotes one in a bad URL: none may show in
#: the logs (at debug), on a page or in /metrics, whatever the reloads do.
CANARY_KEY, CANARY_PASSWORD = "sk-canary-reload-5e1b", "pw-canary-reload-a07c"
BAD_URL = f"engines: [{{name: e, url: 'ftp://u:{CANARY_PASSWORD}@h/x?t={CANARY_KEY}'}}]\n"
PROBE_INTERVAL = 0.5


def test_hostile_files_on_sighup_keep_the_old_config(
    tmp_path: Path, spawn: Callable[..., Proc], simulator: StartSimulator
) -> None:
    sim = simulator(fast=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cfg = tmp_path / "config.yaml"
    good = (f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
            f"engines: [{{name: main, url: '{sim.base}/metrics', interval: 200ms}}]\n"
            f"probes: [{{name: chat, url: '{sim.url}?key={CANARY_PASSWORD}', model: "
            f"{DEFAULT_MODEL}, interval: {PROBE_INTERVAL:g}s, min_spacing: 10ms, max_tokens: 4,"
            " api_key: {env: CANARY_KEY}}]\n")
    cfg.write_text(good)
    proc = spawn(exporter_cmd("run", "--config.file", str(cfg), "--log.level", "debug"),
                 env={"CANARY_KEY": CANARY_KEY})
    wait_until(lambda: 'llm_engine_up{target="main"} 1.0' in http_get(f"{base}/metrics")[1],
               30, "engine up")
    _, first = scrape(f"{base}/metrics")
    started, slowest = time.monotonic(), 0.0
    kinds = [*sorted(HOSTILE), "bad-url"]
    for failures, kind in enumerate(kinds, start=1):
        cfg.unlink()
        if kind == "bad-url":
            cfg.write_text(BAD_URL)
        else:
            HOSTILE[kind][0](cfg)
        proc.signal(signal.SIGHUP)
        # /metrics answers promptly while the file is parsed (off the event loop).
        seen = watch(f"{base}/metrics", lambda m, n=failures: value(  # type: ignore[misc]
            m, "llm_exporter_config_reloads_total", outcome="error") == n, 30, every=0.05)
        assert value(seen.samples, "llm_exporter_config_reloads_total", outcome="error") == \
            failures, f"failed reload of {kind} counted"
        slowest = max(slowest, seen.slowest)
        assert value(seen.samples, "llm_exporter_config_last_reload_successful") == 0.0
        assert value(seen.samples, "llm_engine_up", target="main") == 1.0, kind
    elapsed = time.monotonic() - started
    # The old config's checks kept their schedule through every failed reload (half of it
    # at least on a shared machine), and keep it after them: the reloads can all fit inside
    # one probe interval, so the schedule is seen continuing for two more runs at least.
    due = max(2, int(0.5 * elapsed / PROBE_INTERVAL))

    def kept() -> bool:
        return runs(scrape(f"{base}/metrics")[1], "probe/chat", "success") - \
            runs(first, "probe/chat", "success") >= due
    wait_until(kept, 10 * PROBE_INTERVAL * due, f"{due} probe runs since the first reload")
    _, last = scrape(f"{base}/metrics")
    assert proc.popen.poll() is None
    assert slowest < 2.0, f"/metrics took {slowest:.2f}s during a reload"
    logs = proc.output()
    assert "Traceback" not in logs
    assert len([line for line in logs.splitlines() if "reload" in line and "level=error" in
                line]) == len(kinds), "one line per failed reload"
    places = {"logs": logs, "/metrics": exposition(last), **pages(base)}
    assert leaks([CANARY_KEY, CANARY_PASSWORD], places) == {}
    cfg.unlink()
    cfg.write_text(good)
    proc.signal(signal.SIGHUP)
    wait_until(lambda: "llm_exporter_config_last_reload_successful 1.0"
               in http_get(f"{base}/metrics")[1], 30, "good reload")
