"""End to end with the real Prometheus: the exporter scrapes the engine simulator, probes
it, measures a TCP path to it and reads a scripted NVML; Prometheus scrapes the exporter
every second and evaluates the rules `generate` wrote for the same config; the clients
check watches the simulator's port, so the probe's own connections are real users. Then every
recording rule and every dashboard query, as Grafana would send it, must return data, and
overloading the simulator must put the capacity-bound (queue-time) alert in pending.

Rate windows in the rules are fixed ([5m] and up); with a 1 s scrape interval two samples
are enough for rate(), so a run of about a minute fills every window.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter import metrics
from exporter.config.load import load_config
from exporter.config.models import Config
from exporter.diagnosis.promapi import PromClient
from exporter.monitoring import generate
from exporter.monitoring.dashboards import kit
from exporter.report.checklist import checklist
from tests.support.e2e_exporter import loopback_clients, loopback_config
from tests.support.generated import queries, rules_of, substitute
from tests.support.procs import Proc, free_port, http_get, wait_until
from tests.support.prometheus import Prometheus, api, scrape_config
from tests.support.simulator import StartSimulator
from tests.support.tiers import sleep_until

#: Seconds after the start when the peak window opens, and when the engine is overloaded.
PEAK_AFTER = 35.0
OVERLOAD_AFTER = 40.0
#: What the test sends for $__rate_interval (Grafana: four scrape intervals at least) and
#: for the week-ago comparison: a week of history does not fit in a test.
RATE_INTERVAL = "10s"
COMPARE = "20s"
LOAD_THREADS = 6


def load(sim: str, stop: threading.Event) -> None:
    """One client in a loop: long answers, back to back."""
    body = json.dumps({
        "model": "simulated-model", "stream": True, "max_tokens": 48, "ignore_eos": True,
        "messages": [{"role": "user", "content": "tell me a long story"}],
    }).encode()
    while not stop.is_set():
        req = urllib.request.Request(f"{sim}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                resp.read()
        except OSError:
            time.sleep(0.2)  # the run is ending; the simulator may be gone


def capacity_alerts(prom: str) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = api(prom, "alerts")["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] == "LLMEngineCapacityBound"]


def has_data(prom: str, expr: str, start: float, end: float) -> str | None:
    """None if ``expr`` returns at least one finite value over the run, else why not."""
    try:
        data = api(prom, "query_range", query=expr, start=start, end=end, step=2)
    except urllib.error.HTTPError as exc:
        return f"error {exc.code}: {exc.read().decode()[:300]}"
    values = [float(v) for series in data["result"] for _, v in series["values"]]
    if not values:
        return "no data"
    if not any(math.isfinite(v) for v in values):
        return "only NaN or Inf"
    return None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rules_and_dashboards_on_real_prometheus(
    tmp_path: Path, spawn: Callable[..., Proc], simulator: StartSimulator,
    prometheus: Callable[..., Prometheus],
) -> None:
    exporter_port = free_port()
    # Timing each request (vLLM --enable-per-request-metrics) feeds the first token's parts.
    sim_port = simulator(fmt="vllm", seed=7, enable_per_request_metrics=True).port
    sim = f"http://127.0.0.1:{sim_port}"
    exporter = f"http://127.0.0.1:{exporter_port}"

    start = time.time()
    config_path = tmp_path / "config.yaml"
    # The real users' panels: the probe's and the load's connections to the simulator,
    # seen server-side by the clients check, are carrier lab's.
    config_path.write_text(loopback_config(exporter_port, sim_port,
                                           clients=loopback_clients(sim_port, tmp_path)))
    spawn([sys.executable, "-m", "tests.support.e2e_exporter", str(config_path),
           str(start + PEAK_AFTER)])
    wait_until(lambda: http_get(f"{exporter}/metrics")[0] == 200, timeout=20, what="exporter")

    generated = tmp_path / "generated"
    generate.write(load_config(config_path), generated)
    prom = prometheus(scrape_config(exporter_port, generated / "rules")).url

    # Every rule loaded and evaluates without error (a bad join shows here, not as no data).
    sleep_until(start + OVERLOAD_AFTER)
    groups = api(prom, "rules")["groups"]
    assert {g["file"] for g in groups} == {str(generated / "rules" / f)
                                           for f in ("recording.yaml", "alerts.yaml")}
    broken = {r.get("name"): r["lastError"] for g in groups for r in g["rules"]
              if r["health"] != "ok"}
    assert not broken
    assert capacity_alerts(prom) == [], "queue-bound before any overload"

    # Overload: one batch slot, several clients streaming long answers back to back.
    req = urllib.request.Request(f"{sim}/admin/config", data=b'{"max_num_seqs": 1}',
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200
    stop = threading.Event()
    clients = [threading.Thread(target=load, args=(sim, stop), daemon=True)
               for _ in range(LOAD_THREADS)]
    for client in clients:
        client.start()
    try:
        wait_until(lambda: any(a["state"] == "pending" for a in capacity_alerts(prom)),
                   timeout=90, what="LLMEngineCapacityBound pending")
    finally:
        stop.set()
    (alert,) = capacity_alerts(prom)
    assert alert["labels"]["target"] == "sim" and alert["labels"]["severity"] == "warning"
    assert float(alert["value"]) > load_config(config_path).alerting.queue_share_ratio

    end = time.time()
    problems: dict[str, str] = {}
    recorded = list(dict.fromkeys(
        r["record"] for r in rules_of((generated / "rules" / "recording.yaml").read_text())))
    assert len(recorded) > 40
    for name in recorded:
        if (why := has_data(prom, name, start, end)) is not None:
            problems[f"rule {name}"] = why
    with_dashboards = {n.removeprefix("dashboards/"): json.loads(t)
                       for n, t in generate.render(load_config(config_path)).items()
                       if n.startswith("dashboards/")}
    panel_queries = queries(with_dashboards)
    assert len(panel_queries) > 60
    for q in panel_queries:
        expr = substitute(q.expr, RATE_INTERVAL, {kit.COMPARE: COMPARE})
        if (why := has_data(prom, expr, start, end)) is not None:
            problems[f"panel {q}"] = why
    assert not problems, json.dumps(problems, indent=1)
    # The run spanned off-peak and peak time, so both kinds of gated series were fed.
    peak = api(prom, "query", query=f"max({metrics.EXPORTER_PEAK_WINDOW.name})", time=end)
    assert float(peak["result"][0]["value"][1]) == 1
    gpu_checklist(prom, load_config(config_path), start, end)


def gpu_checklist(prom: str, config: Config, start: float, end: float) -> None:
    """The report's checklist of the fake H200: its link at its widest and fastest, no
    replay, no XID (a GPU without an XID series has had none), and its memory against the
    machine's."""
    rows = {(c.item, c.scope.get("gpu", "")): c
            for c in checklist(PromClient(prom, 30.0), config, start, end)}
    for item in ("PCIe lanes at their narrowest, less the maximum",
                 "PCIe generation at its fastest, less the maximum", "PCIe replays",
                 "XID errors"):
        assert (rows[(item, "0")].value, rows[(item, "0")].ok) == (0, True), item
    span = f"[{round(end - start)}s]"
    host = api(prom, "query", query=f"max(max_over_time(llm_host_memory_total_bytes{span}))",
               time=end)["result"]
    gpu = api(prom, "query", query=f"sum(max_over_time(llm_gpu_memory_total_bytes{span}))",
              time=end)["result"]
    ratio = float(host[0]["value"][1]) / float(gpu[0]["value"][1])
    memory = rows[("system memory over the GPUs' memory", "")]
    assert memory.value == pytest.approx(ratio) and memory.ok is (ratio >= 2)
