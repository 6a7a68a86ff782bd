"""End to end: a fault in the engine reaches the pager through the real pipeline, and so
does its resolution.

simulator (metrics_error_rate=1) -> exporter engine check (llm_engine_up 0) -> Prometheus
scrape and the generated LLMEngineDown rule -> Alertmanager with the generated routing ->
webhook sink. The waits are derived from the committed rules and Alertmanager config, not
guessed, so the test tracks what production would do: it is as slow as a real page.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.stack import supervisor as stack
from exporter.stack.state import Ports
from tests.support import ROOT
from tests.support.procs import http_get

ALERT = "LLMEngineDown"
ENGINE = "main"  # the engine name in deploy/stack/exporter.yaml
#: Slack on top of the configured waits: the exporter's 5 s engine interval, a 15 s scrape,
#: two 15 s rule evaluations (the one that sees it, the one after `for`), and CI's two
#: busy cores.
MARGIN = 120.0


def seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration))


def engine_down_rule() -> dict[str, Any]:
    """The LLMEngineDown variant that reacts to llm_engine_up == 0 (not the absent one)."""
    groups = yaml.safe_load((ROOT / "alerts/rules/alerts.yaml").read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]
             if r.get("alert") == ALERT and "== 0" in r["expr"]]
    assert len(rules) == 1, rules
    rule: dict[str, Any] = rules[0]
    return rule


def route_for(labels: dict[str, str]) -> tuple[str, float, float]:
    """(receiver, group_wait, group_interval) Alertmanager applies to these labels: the
    first child route whose matchers all hold, with the root's timers as defaults."""
    root = yaml.safe_load((ROOT / "alerts/alertmanager.yaml").read_text())["route"]
    route = root
    for child in root.get("routes", []):
        matchers = [m.split("=", 1) for m in child.get("matchers", [])]
        if all(labels.get(k) == v.strip('"') for k, v in matchers):
            route = child
            break
    return (
        route["receiver"],
        seconds(route.get("group_wait", root["group_wait"])),
        seconds(route.get("group_interval", root["group_interval"])),
    )


def post_json(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.load(resp)


def notifications(sink: int) -> list[dict[str, Any]]:
    status, text = http_get(f"http://127.0.0.1:{sink}/notifications")
    assert status == 200
    result: list[dict[str, Any]] = json.loads(text)
    return result


def engine_alerts(sink: int, receiver: str, status: str) -> list[dict[str, Any]]:
    return [
        alert
        for entry in notifications(sink)
        if entry["path"] == f"/{receiver}"
        for alert in entry["payload"]["alerts"]
        if alert["labels"].get("alertname") == ALERT
        and alert["labels"].get("target") == ENGINE
        and alert["status"] == status
    ]


def poll(pred: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds it took ``pred`` to hold; checks once a second (these waits are minutes)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if pred():
            return time.monotonic() - start
        time.sleep(1.0)
    raise AssertionError(f"no {what} within {timeout:.0f}s")


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_engine_fault_pages_and_resolves_through_alertmanager(tmp_path: Path,
                                                              stack_ports: Ports) -> None:
    rule = engine_down_rule()
    receiver, group_wait, group_interval = route_for({**rule["labels"], "alertname": ALERT})
    ports = stack_ports
    state = tmp_path / "state.json"
    running = stack.up(ROOT, ports, state)
    try:
        sim = f"http://127.0.0.1:{ports.simulator}"
        exporter = f"http://127.0.0.1:{ports.exporter}/metrics"
        poll(lambda: f'llm_engine_up{{target="{ENGINE}"}} 1.0' in http_get(exporter)[1],
             30, "healthy engine")

        post_json(f"{sim}/admin/faults", {"metrics_error_rate": 1})
        fired_after = poll(lambda: bool(engine_alerts(ports.sink, receiver, "firing")),
                           seconds(rule["for"]) + group_wait + MARGIN, f"{ALERT} page")
        # Not before its `for`: the page comes from the rule, not from something faster.
        assert fired_after >= seconds(rule["for"])
        alert = engine_alerts(ports.sink, receiver, "firing")[0]
        assert alert["labels"]["severity"] == rule["labels"]["severity"] == "critical"
        assert alert["labels"]["engine_target"] == ENGINE
        for key in ("summary", "description", "runbook_url"):
            assert alert["annotations"][key], key
        assert f"Engine {ENGINE} on 127.0.0.1:{ports.exporter}" in alert["annotations"][
            "description"]
        anchor = alert["annotations"]["runbook_url"].rpartition("#")[2]
        assert anchor == ALERT.lower()
        runbooks = (ROOT / "docs/runbooks.md").read_text()
        assert re.search(rf"^#+ {ALERT}\s*$", runbooks, re.M), "docs/runbooks.md has no section"

        post_json(f"{sim}/admin/faults", {"metrics_error_rate": 0})
        poll(lambda: bool(engine_alerts(ports.sink, receiver, "resolved")),
             group_interval + MARGIN, f"{ALERT} resolved notification")
    finally:
        stopped = stack.down(ROOT, state)
    assert {s.name for s in stopped} == {s.name for s in running.services}
    for service in running.services:
        assert not stack.is_running(service), service
