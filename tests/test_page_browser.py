"""The live `/` page in headless Chromium (tests/support/browser.py): the real exporter (with
the scripted NVML library, tests/support/e2e_exporter.py) probes the simulator; a fault
injected into the simulator must turn the verdict from healthy to the engine's, and the
tiles with it, without a reload. The page must agree with /api/v1/diagnosis and /metrics,
draw every sparkline, log no console error and fit a phone's width. Screenshots land in
artifacts/screenshots/ (tests/support/browser.py)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter import metrics
from tests.support.browser import DESKTOP, PHONE, BrowserSession, Tab
from tests.support.procs import Proc, free_port, http_get, wait_until
from tests.support.samples import value
from tests.support.simulator import StartSimulator

pytestmark = pytest.mark.timeout(240)

#: The probe's TTFT SLO, and the first-token delay the fault adds (well over it).
SLO_TTFT, SLOW_FIRST_TOKEN = 0.5, 0.8
WINDOW = 20  # seconds: the start-up XID of the scripted GPU leaves the window this soon


def _config(path: Path, port: int, sim_base: str, sim_port: int) -> None:
    path.write_text(
        f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
        # A peak window keeps the scripted exporter's clock happy; the run stays off-peak.
        "peak_windows: {timezone: UTC, windows: {evening: {start: '20:00', end: '23:00'}}}\n"
        f"slo: {{ttft_p95_seconds: {SLO_TTFT}, tpot_p95_seconds: 0.1}}\n"
        f"diagnosis: {{interval: 2s, window: {WINDOW}s, history: 10m}}\n"
        f"engines: [{{name: sim, url: '{sim_base}/metrics', type: vllm, interval: 1s}}]\n"
        "gpu: {interval: 1s}\n"
        f"probes: [{{name: chat, url: '{sim_base}/v1/chat/completions', model: simulated-model,"
        " interval: 500ms, max_tokens: 16, carrier: loopback, engine: sim}]\n"
        "paths: {interval: 2s, burst: 3, spacing: 50ms, timeout: 1s, route_interval: 30s,"
        " carriers: {loopback: [{name: simulator, host: 127.0.0.1, region: local,"
        f" protocol: tcp, port: {sim_port}}}]}}}}\n"
    )


def _diagnosis(url: str) -> dict[str, Any]:
    status, body = http_get(f"{url}/api/v1/diagnosis")
    return json.loads(body) if status == 200 else {}


def _tile_values(tab: Tab) -> dict[tuple[str, str, str], str]:
    """(tile kind, tile name, metric) -> data-value, as the browser has them now."""
    rows = tab.page.eval_on_selector_all(
        ".tile .v", "els => els.map(e => [e.closest('.tile').dataset.kind,"
        " e.closest('.tile').dataset.name, e.dataset.metric, e.dataset.value])")
    return {(k, n, m): v for k, n, m, v in rows}


def _agree_with_the_api(tab: Tab, url: str) -> dict[str, Any]:
    """After a refresh of the page, the diagnosis of the same moment from the API (the
    evaluation runs every 2 s and the page refreshes every 5 s: retry until they meet)."""
    for _ in range(12):
        shown = tab.page.get_attribute("#diagnosis", "data-at")
        tab.page.wait_for_function(
            "at => document.querySelector('#diagnosis').dataset.at !== at", arg=shown,
            timeout=15_000)
        doc = tab.page.evaluate(
            "fetch('api/v1/diagnosis', {cache: 'no-store'}).then(r => r.json())")
        if doc.get("at") == tab.page.get_attribute("#diagnosis", "data-at"):
            return dict(doc)
    raise AssertionError(f"the page and {url}/api/v1/diagnosis never showed the same moment")


def test_live_page_in_chromium(
    tmp_path: Path, spawn: Callable[..., Proc], simulator: StartSimulator,
    browser: BrowserSession,
) -> None:
    sim = simulator(fast=True)
    port = free_port()
    cfg = tmp_path / "config.yaml"
    _config(cfg, port, sim.base, sim.port)
    proc = spawn([sys.executable, "-m", "tests.support.e2e_exporter", str(cfg),
                  str(time.time() + 3600)])
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _diagnosis(url).get("status") == "healthy", timeout=WINDOW * 4,
               what=f"a healthy diagnosis\n{proc.output()}")

    with browser.open(f"{url}/", width=DESKTOP) as tab:
        page = tab.page
        assert page.text_content("#diagnosis h2") == "Diagnosis: healthy"
        assert "healthy: no verdict" in (page.text_content("#diagnosis") or "")
        page.evaluate("window.notReloaded = true")
        before = _tile_values(tab)
        assert float(before[("probe", "chat", "ttft_p95")]) < SLO_TTFT

        sim.faults(slow_first_token=SLOW_FIRST_TOKEN)
        page.wait_for_selector("#verdict", timeout=60_000)
        assert page.evaluate("window.notReloaded") is True, "the page reloaded itself"

        doc = _agree_with_the_api(tab, url)
        primary = doc["verdicts"][0]
        assert (primary["layer"], primary["cause"]) == ("engine", "slow_prefill"), primary
        assert page.text_content("#verdict") == (
            f"{primary['layer']} / {primary['cause']}: {primary['summary']}")
        assert page.text_content("#diagnosis h2") == f"Diagnosis: {doc['status']}"
        tiles = _tile_values(tab)
        # The evidence and the tiles come from one evaluation: the same numbers.
        (ttft,) = [e for e in primary["evidence"]
                   if e["metric"] == metrics.PROBE_TTFT.name and e["labels"]["probe"] == "chat"]
        assert float(tiles[("probe", "chat", "ttft_p95")]) == ttft["value"] > SLO_TTFT
        assert page.get_attribute(
            ".tile[data-name=chat] [data-metric=ttft_p95]", "class") == "v bad"
        # Numbers that hold still are the ones /metrics shows now (the scripted H200).
        text = http_get(f"{url}/metrics")[1]
        for metric, family in (("utilization", metrics.GPU_UTILIZATION),
                               ("dram_bandwidth", metrics.GPU_DRAM_BANDWIDTH_UTILIZATION)):
            assert float(tiles[("gpu", "GPU 0", metric)]) == pytest.approx(
                value(text, family.name, gpu="0"))
        assert tiles[("path", "loopback → simulator", "loss")] == "0.0"
        # The probe's own stream on the carrier beside the path's ICMP: the chain's figures
        # (retransmitted / sent, out of order / received), and loopback loses nothing.
        for metric in ("stream_retransmission", "stream_out_of_order"):
            assert float(tiles[("path", "loopback → simulator", metric)]) == 0.0, metric
        assert page.text_content(".tile[data-kind=engine] .sub") == "up"
        # The first token by part: the slow prefill is the widest part of the chat probe's
        # bar, and the drawn parts never overflow it.
        (row,) = [b for b in doc["budget"] if b["probe"] == "chat"]
        widths = dict(page.eval_on_selector_all(
            "#budget [data-probe=chat] .budget[data-bar=BudgetPart] span",
            "els => els.map(e => [e.dataset.part, e.getBoundingClientRect().width])"))
        bar = page.eval_on_selector("#budget [data-probe=chat] .budget[data-bar=BudgetPart]",
                                    "e => e.getBoundingClientRect().width")
        assert max(widths, key=widths.__getitem__) == "prefill", (widths, row)
        assert sum(widths.values()) <= bar + 1, (widths, bar)
        # Each part's share of the TTFT, or of the parts' sum where the engine's means add up
        # to more than the probe waited (a remainder below zero: CI drew prefill at 104%).
        whole = max(row["ttft"], sum(v for v in row["parts"].values() if v and v > 0))
        assert widths["prefill"] / bar == pytest.approx(row["parts"]["prefill"] / whole,
                                                        abs=0.02)

        # Every tile row has its sparkline, drawn (a line or a dot) and laid out.
        sparks = page.eval_on_selector_all("svg.spark", """els => els.map(e => {
            const r = e.getBoundingClientRect();
            return [e.closest('.row').querySelector('.v').dataset.metric,
                    Number(e.dataset.points), e.querySelectorAll('path.line, path.dot').length,
                    r.width, r.height]; })""")
        assert len(sparks) == page.locator(".tile .row").count() == len(tiles) >= 14
        for metric, points, drawn, width, height in sparks:
            assert points >= 1 and drawn >= 1 and width > 50 and height > 20, (metric, points)
        rows = page.eval_on_selector_all(
            "table.checks tr[data-check]", "els => els.map(e => [e.dataset.check,"
            " e.querySelector('.o').textContent, e.querySelector('.o').className])")
        assert {r[0] for r in rows} == {"engine/sim", "probe/chat", "path/loopback/simulator",
                                        "route/loopback/simulator", "gpu/nvml", "host/local"}
        for check, outcome, css in rows:
            assert outcome == metrics.CHECK_SUCCESS and css == "o o-success", (check, outcome)
        tab.screenshot("live-page-1280")
        assert not tab.problems, tab.problems

    with browser.open(f"{url}/", width=PHONE) as tab:
        tab.page.wait_for_selector("#verdict")
        assert tab.page.locator("svg.spark").count() == len(sparks)
        assert tab.horizontal_overflow() == 0
        narrowest = tab.page.evaluate(
            "Math.min(...[...document.querySelectorAll('svg.spark')].map("
            "e => e.getBoundingClientRect().width))")
        assert narrowest > 120  # legible: about half the tile
        tab.screenshot("live-page-390")
        assert not tab.problems, tab.problems
