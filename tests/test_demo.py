"""The README's demo, as `make run` starts it: the simulator (``--format vllm``, its default
speed) and the exporter with deploy/demo.yaml. Injecting the README's fault shows the right
verdict on ``/`` within 30 s, and clearing it brings "healthy" back within a minute:
the probes feel nothing over the short window (``diagnosis.short_window``), though the slow
requests stay in the ten-minute window.

Only the ports differ from `make run` (free ones instead of 8800 and 9400), so the test can
run beside a developer's own demo. It runs twice: on the machine as it is, and with every
core kept busy by spinning processes beside it (a loaded CI runner), where the engine's
scrape and the probe's requests drift apart by a second or more: the right verdict must
still be the first one shown (docs/dev/diagnosis.md, "Time alignment and a stable verdict").
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.browser import BrowserSession
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.prometheus import PromCli
from tests.support.simulator import StartSimulator

DEMO = ROOT / "deploy" / "demo.yaml"
MAKEFILE = ROOT / "Makefile"
#: What the README promises: the verdict on / within 30 s of the fault.
WITHIN_S = 30.0
#: And healthy again within a minute of its removal.
CLEARED_S = 60.0
#: The test's own limit: a burner outlives no run of it.
TIMEOUT_S = 300


@contextlib.contextmanager
def cpu_burners(n: int) -> Iterator[list[Proc]]:
    """``n`` processes spinning on a core each, for at most TIMEOUT_S, stopped by PID."""
    spin = f"import time\nend = time.monotonic() + {TIMEOUT_S}\nwhile time.monotonic() < end: pass"
    procs = [Proc([sys.executable, "-c", spin]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()
            p.stderr_path.unlink(missing_ok=True)


def readme_fault() -> dict[str, float]:
    """The fault the README's diagnosis example injects, read from the README itself."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"admin/faults -d '(\{\"slow_first_token\": [0-9.]+\})'", readme)
    assert m, "README.md no longer shows the slow_first_token demo fault"
    fault: dict[str, float] = json.loads(m.group(1))
    return fault


def demo_config(tmp_path: Path, sim_port: int, port: int) -> Path:
    text = DEMO.read_text(encoding="utf-8")
    assert "127.0.0.1:8800" in text and "127.0.0.1:9400" in text, "demo.yaml's ports moved"
    text = (text.replace("127.0.0.1:8800", f"127.0.0.1:{sim_port}")
                .replace("port: 8800", f"port: {sim_port}")
                .replace("127.0.0.1:9400", f"127.0.0.1:{port}"))
    path = tmp_path / "demo.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def diagnosis(base: str) -> dict[str, object]:
    status, body = http_get(f"{base}/api/v1/diagnosis", timeout=5)
    assert status == 200, body
    doc: dict[str, object] = json.loads(body)
    return doc


@contextlib.contextmanager
def watching(base: str) -> Iterator[list[tuple[str, str] | None]]:
    """Every primary verdict /api/v1/diagnosis shows while the block runs, in order."""
    seen: list[tuple[str, str] | None] = []
    done = threading.Event()

    def poll() -> None:
        while not done.wait(0.5):
            with contextlib.suppress(OSError, ValueError, AssertionError):
                got = primary(diagnosis(base))
                if not seen or seen[-1] != got:
                    seen.append(got)

    thread = threading.Thread(target=poll, name="verdicts", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join(10)


def primary(doc: dict[str, object]) -> tuple[str, str] | None:
    verdicts = doc.get("verdicts") or []
    assert isinstance(verdicts, list)
    if not verdicts:
        return None
    return str(verdicts[0]["layer"]), str(verdicts[0]["cause"])


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT_S)
@pytest.mark.parametrize("burners", [
    pytest.param(0, id="idle"),
    # Spinning on every core (the real vLLM, which would feel it, runs in a tier after).
    pytest.param(max(2, os.cpu_count() or 1), id="cpu-load")])
def test_demo_page_shows_tiles_then_the_fault_verdict_without_a_reload(
        simulator: StartSimulator, tmp_path: Path, browser: BrowserSession, burners: int) -> None:
    with cpu_burners(burners) as spinning:
        assert all(p.popen.poll() is None for p in spinning), "a CPU burner did not start"
        walkthrough(simulator, tmp_path, browser)


@pytest.mark.slow
def test_make_run_points_the_demo_at_the_ports_it_is_given_and_passes_promtool(
        prom_cli: PromCli) -> None:
    # `make run SIM_PORT=8801` once left the exporter probing 8800; and the demo's /metrics
    # once failed `promtool check metrics` (a gauge named llm_path_hop_count).
    sim_port, port = free_port(), free_port()
    proc = subprocess.Popen(["make", "-s", "run", f"SIM_PORT={sim_port}", f"DEMO_PORT={port}"],
                            cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    up = re.compile(r'^llm_engine_up\{[^}]*target="demo"[^}]*\} 1\.0$', re.M)
    served = re.compile(r'^llm_probe_requests_total\{[^}]*outcome="ok"[^}]*\} [1-9]', re.M)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_until(lambda: bool(up.search(body := http_get(url)[1]) and served.search(body)
                                and "llm_path_hops{" in body), 90,
                   "the demo's engine up, a probe answered and a route traced, on the ports "
                   "make was given")
        checked = prom_cli("promtool", "check", "metrics", input=http_get(url)[1])
        assert checked.returncode == 0 and checked.stdout == checked.stderr == "", (
            checked.stdout + checked.stderr)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # make's own group: make, the simulator, the exporter
        proc.wait(30)


def walkthrough(simulator: StartSimulator, tmp_path: Path, browser: BrowserSession) -> None:
    assert "--format vllm" in MAKEFILE.read_text(), "make run's simulator flags moved"
    sim = simulator(fmt="vllm")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = Proc(exporter_cmd("run", "--config", str(demo_config(tmp_path, sim.port, port))))
    started = time.monotonic()
    try:
        wait_until(lambda: http_get(f"{base}/-/ready", timeout=2)[0] == 200, timeout=30,
                   what="the demo exporter ready")
        with browser.open(f"{base}/") as tab:
            page = tab.page
            # Verdict block, a tile per layer and their sparklines, within a minute.
            page.wait_for_function(
                "document.querySelector('#diagnosis') && "
                "document.querySelectorAll('.tile').length >= 4 && "
                "document.querySelectorAll('svg.spark path.line, svg.spark path.dot').length"
                " >= 10", timeout=max(1.0, 60 - (time.monotonic() - started)) * 1000)
            kinds = set(page.eval_on_selector_all(".tile", "els => els.map(e => e.dataset.kind)"))
            assert {"probe", "path", "engine"} <= kinds, kinds
            wait_until(lambda: diagnosis(base).get("status") == "healthy", timeout=90,
                       what="the demo healthy before the fault")
            page.wait_for_function(
                "document.querySelector('#diagnosis h2').textContent === 'Diagnosis: healthy'",
                timeout=30_000)
            page.evaluate("window.notReloaded = true")
            with watching(base) as seen:
                sim.faults(**readme_fault())
                injected = time.monotonic()
                page.wait_for_selector("#verdict", timeout=WITHIN_S * 1000)
                took = time.monotonic() - injected
            shown = page.text_content("#verdict") or ""
            doc = diagnosis(base)
            # The probe's TTFT tile follows, still without a reload: over the demo's 1 s SLO.
            # Not at once: the engine's own metrics can carry the verdict before the probe
            # has finished a request under the fault (CI at ec9d5a9: the tile read 0.098 s).
            page.wait_for_function(
                "Number(document.querySelector('.tile[data-name=chat] "
                "[data-metric=ttft_p95]')?.dataset.value) >= 1.0", timeout=WITHIN_S * 1000)
            assert page.evaluate("window.notReloaded") is True, "the page reloaded itself"
            tab.screenshot("demo-fault")
            assert not tab.problems, tab.problems
            sim.faults(**{k: 0 for k in readme_fault()})
            removed = time.monotonic()
            wait_until(lambda: diagnosis(base).get("status") == "healthy", timeout=CLEARED_S,
                       what="healthy again after the fault's removal")
            cleared = time.monotonic() - removed
    finally:
        proc.stop()
    print(f"verdict on the page {took:.0f} s after the fault: {shown}; healthy "
          f"{cleared:.0f} s after its removal")
    # A slow first token with an idle engine: the engine's prefill, seen by the probe; and
    # the API never showed another cause on the way (the page refreshes less often).
    assert primary(doc) == ("engine", "slow_prefill"), doc
    assert seen and set(seen) <= {None, ("engine", "slow_prefill")}, seen
    assert shown.startswith("engine / slow_prefill: "), shown
