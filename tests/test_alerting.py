"""The committed rules and Alertmanager template, through the real tools: promtool checks
and unit tests, amtool routing, and inhibition in a running Alertmanager."""

from __future__ import annotations

import datetime as dt
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.monitoring.alertmanager import INHIBITIONS
from tests.support.generated import ALERTS, AM_FILE, RULE_FILES, alerts_by_name, example, groups
from tests.support.procs import Proc, free_port, http_get, wait_until
from tests.support.prometheus import PromCli, require
from tests.support.tiers import needs

TESTS = sorted((ALERTS / "tests").glob("*.yaml"))


def test_promtool_check_rules(prom_cli: PromCli) -> None:
    out = prom_cli("promtool", "check", "rules", *map(str, RULE_FILES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == len(RULE_FILES)


def test_there_are_promtool_unit_tests() -> None:
    assert len(TESTS) >= 10


# One file a test: together they outgrew the tier's timeout on 2 shared cores. One worker
# runs them all, one after another: each promtool run takes a whole CPU for up to a minute,
# and several at once starved the labs' Prometheus servers beside them.
@pytest.mark.xdist_group("promtool-unit")
@pytest.mark.parametrize("path", TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_pass(prom_cli: PromCli, path: Path) -> None:
    out = prom_cli("promtool", "test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == 1


def _alert_cases() -> dict[str, dict[str, int]]:
    """alertname -> how many checks expect it firing and how many expect it quiet."""
    cases: dict[str, dict[str, int]] = {}
    for path in TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                kind = "firing" if check.get("exp_alerts") else "quiet"
                counts = cases.setdefault(check["alertname"], {"firing": 0, "quiet": 0})
                counts[kind] += 1
    return cases


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    names = alerts_by_name(RULE_FILES[1].read_text())
    cases = _alert_cases()
    missing = {n: cases.get(n, {}) for n in names
               if cases.get(n, {}).get("firing", 0) < 1 or cases.get(n, {}).get("quiet", 0) < 1}
    assert not missing, f"alerts without both a firing and a quiet promtool case: {missing}"
    assert set(cases) <= set(names), "tests name alerts the rules do not define"


@pytest.mark.parametrize("path", TESTS, ids=lambda p: p.name)
def test_unit_tests_order_every_group_recording_first(path: Path) -> None:
    # promtool 2.42 sorts a group missing from group_eval_order as if it were listed first,
    # and unstably: an alert group could then read the previous step's recorded values.
    order = yaml.safe_load(path.read_text())["group_eval_order"]
    recording = [g["name"] for g in groups(RULE_FILES[0].read_text())]
    alerting = [g["name"] for g in groups(RULE_FILES[1].read_text())]
    assert sorted(order) == sorted(recording + alerting)
    assert order[: len(recording)] == recording


def test_amtool_accepts_the_template(prom_cli: PromCli) -> None:
    out = prom_cli("amtool", "check-config", str(AM_FILE))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        (["severity=critical", "alertname=LLMEngineDown"], "pager"),
        (["severity=warning", "alertname=LLMPathPacketLoss", "carrier=telecom"], "tickets"),
        (["severity=info", "alertname=LLMSomethingInfo"], "blackhole"),
        (["alertname=Watchdog"], "default"),
    ],
)
def test_routes_by_severity(prom_cli: PromCli, labels: list[str], receiver: str) -> None:
    out = prom_cli("amtool", "config", "routes", "test", f"--config.file={AM_FILE}",
                   f"--verify.receivers={receiver}", *labels)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == receiver


def test_quiet_hours_use_the_peak_windows_timezone() -> None:
    am = yaml.safe_load(AM_FILE.read_text())
    (quiet,) = am["time_intervals"]
    assert quiet["time_intervals"][0]["location"] == example().peak_windows.timezone
    warning = next(r for r in am["route"]["routes"] if r["matchers"] == ['severity="warning"'])
    assert warning["mute_time_intervals"] == [quiet["name"]]


# --- inhibition in a running Alertmanager -----------------------------------------------


def _post(url: str, alerts: list[dict[str, Any]]) -> None:
    req = urllib.request.Request(
        url, data=json.dumps(alerts).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def _alert(**labels: str) -> dict[str, Any]:
    starts = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    return {"labels": labels, "annotations": {"summary": "test"},
            "startsAt": starts.isoformat().replace("+00:00", "Z")}


@pytest.fixture
@needs("prometheus")
def alertmanager(tmp_path: Path, spawn: Callable[..., Proc]) -> str:
    require("prometheus-alertmanager")
    port = free_port()
    spawn([
        "prometheus-alertmanager", f"--config.file={AM_FILE}",
        f"--storage.path={tmp_path}", f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # no gossip: a single instance on loopback
    ])
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(f"{base}/-/ready")[0] == 200, timeout=20, what="alertmanager")
    return base


def test_causes_mute_their_symptoms(alertmanager: str) -> None:
    probe = {"probe": "chat", "target": "api:8000", "profile": "short"}
    alerts = {
        "loss": _alert(alertname="LLMPathPacketLoss", severity="warning", carrier="telecom",
                       target="sh-ct"),
        "slow on telecom": _alert(alertname="LLMProbeTTFTHigh", severity="warning",
                                  carrier="telecom", engine_target="main", **probe),
        "check on telecom": _alert(alertname="LLMExporterCheckFailing", severity="warning",
                                   check="route/telecom/sh-ct", carrier="telecom"),
        "slow on unicom": _alert(alertname="LLMProbeTTFTHigh", severity="warning",
                                 carrier="unicom", **{**probe, "probe": "cu"}),
        "down": _alert(alertname="LLMEngineDown", severity="critical", target="main",
                       engine_target="main"),
        "failing on main": _alert(alertname="LLMProbeFailureRatioHigh", severity="warning",
                                  carrier="telecom", engine_target="main", **probe),
        "burning on main": _alert(alertname="LLMProbeErrorBudgetBurn", severity="critical",
                                  long="1h", short="5m", engine_target="main", **probe),
        "failing elsewhere": _alert(alertname="LLMProbeFailureRatioHigh", severity="warning",
                                    engine_target="other", **{**probe, "probe": "b"}),
        "failing, no engine named": _alert(alertname="LLMProbeFailureRatioHigh",
                                           severity="warning", **{**probe, "probe": "c"}),
    }
    _post(f"{alertmanager}/api/v2/alerts", list(alerts.values()))
    muted = {"slow on telecom", "check on telecom", "failing on main", "burning on main"}

    def states() -> dict[str, str]:
        _, body = http_get(f"{alertmanager}/api/v2/alerts")
        by_labels = {json.dumps(a["labels"], sort_keys=True): a["status"]["state"]
                     for a in json.loads(body or "[]")}
        return {name: by_labels.get(json.dumps(a["labels"], sort_keys=True), "")
                for name, a in alerts.items()}

    # The inhibitor learns of the sources asynchronously.
    wait_until(lambda: {n for n, s in states().items() if s == "suppressed"} == muted,
               timeout=20, what=f"exactly {sorted(muted)} suppressed")
    assert {n for n, s in states().items() if s == "active"} == set(alerts) - muted


def test_inhibition_rules_name_alerts_that_exist() -> None:
    # A renamed alert would silently stop matching its inhibit rule.
    names = set(alerts_by_name(RULE_FILES[1].read_text()))
    for rule in INHIBITIONS:
        assert rule.source in names and set(rule.targets) <= names, rule


def test_a_diagnosis_mutes_what_it_explains_on_its_own_exporter(alertmanager: str) -> None:
    # Exporter a: failing, loss on carrier mobile seen by probe chat-cm. Exporter b:
    # degraded, engine main queueing. Each diagnosis mutes the symptoms of its scope and the
    # per-layer alert of its cause, on its own exporter only; a warning one mutes no page.
    diag = {"alertname": "LLMLatencyDiagnosis"}
    alerts = {
        "diagnosis a": _alert(**diag, severity="critical", instance="a", layer="network",
                              cause="packet_loss", carrier="mobile", probe="chat-cm",
                              engine="main", target="main"),
        "ttft chat-cm on a": _alert(alertname="LLMProbeTTFTHigh", severity="warning",
                                    instance="a", probe="chat-cm", carrier="mobile"),
        "burn chat-cm on a": _alert(alertname="LLMProbeErrorBudgetBurn", severity="critical",
                                    instance="a", probe="chat-cm", long="1h", short="5m"),
        "loss mobile on a": _alert(alertname="LLMPathPacketLoss", severity="warning",
                                   instance="a", carrier="mobile", target="gz"),
        "capacity main on a": _alert(alertname="LLMEngineCapacityBound", severity="warning",
                                     instance="a", target="main", model="m"),
        "ttft chat-ct on a": _alert(alertname="LLMProbeTTFTHigh", severity="warning",
                                    instance="a", probe="chat-ct", carrier="telecom"),
        "loss mobile on b": _alert(alertname="LLMPathPacketLoss", severity="warning",
                                   instance="b", carrier="mobile", target="gz"),
        "diagnosis b": _alert(**diag, severity="warning", instance="b", layer="engine",
                              cause="queueing", probe="chat", engine="main", target="main"),
        "capacity main on b": _alert(alertname="LLMEngineCapacityBound", severity="warning",
                                     instance="b", target="main", model="m"),
        "tpot chat on b": _alert(alertname="LLMProbeTPOTHigh", severity="warning",
                                 instance="b", probe="chat"),
        "burn chat on b": _alert(alertname="LLMProbeErrorBudgetBurn", severity="critical",
                                 instance="b", probe="chat", long="1h", short="5m"),
        "down main on b": _alert(alertname="LLMEngineDown", severity="critical", instance="b",
                                 target="main", engine_target="main"),
    }
    _post(f"{alertmanager}/api/v2/alerts", list(alerts.values()))
    muted = {"ttft chat-cm on a", "burn chat-cm on a", "loss mobile on a",
             "capacity main on b", "tpot chat on b"}

    def states() -> dict[str, str]:
        _, body = http_get(f"{alertmanager}/api/v2/alerts")
        by_labels = {json.dumps(a["labels"], sort_keys=True): a["status"]["state"]
                     for a in json.loads(body or "[]")}
        return {name: by_labels.get(json.dumps(a["labels"], sort_keys=True), "")
                for name, a in alerts.items()}

    wait_until(lambda: {n for n, s in states().items() if s == "suppressed"} == muted,
               timeout=20, what=f"exactly {sorted(muted)} suppressed")
    assert {n for n, s in states().items() if s == "active"} == set(alerts) - muted
