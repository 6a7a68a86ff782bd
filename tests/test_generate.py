"""`generate`: the committed output is fresh, the config drives it, and no metric name is
typed in the generators."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exporter.config.load import parse_config
from exporter.monitoring import generate
from exporter.monitoring.rule import SEVERITIES
from tests.support import ROOT
from tests.support.generated import (
    EXAMPLE,
    alerts_by_name,
    committed,
    example,
    rules_of,
    unknown_names,
)

MONITORING = ROOT / "exporter" / "monitoring"
GENERATORS = sorted(MONITORING.rglob("*.py"))
#: The one module that writes recorded names out (tests/test_recorded_names.py checks them).
NAMES = MONITORING / "names.py"
RECORDED_NAME = re.compile(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+")


def variant(old: str, new: str) -> dict[str, str]:
    """generate's output for config.example.yaml with one line changed."""
    text = EXAMPLE.read_text(encoding="utf-8")
    changed = re.sub(old, new, text, count=1, flags=re.MULTILINE)
    assert changed != text, f"{old!r} is not in config.example.yaml"
    return generate.render(parse_config(changed, str(EXAMPLE), resolve_secrets=False))


def test_committed_output_is_what_the_example_config_generates() -> None:
    want = generate.render(example())
    have = committed()
    assert sorted(have) == sorted(want), "alerts/ or dashboards/ hold other files than generate writes"
    stale = sorted(name for name in want if want[name] != have[name])
    assert not stale, f"stale generated files {stale}: run `make generate`"


def test_cli_writes_every_file_without_reading_secrets(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin"}  # no ENGINE_TOKEN / LLM_API_KEY: generate needs none
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "generate", "--config", str(EXAMPLE),
         "--out", str(tmp_path / "m"), "--dashboards", str(tmp_path / "d")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    want = generate.render(example())
    for name, text in want.items():
        path = tmp_path / "d" / name.removeprefix("dashboards/") if name.startswith(
            "dashboards/") else tmp_path / "m" / name
        assert path.read_text(encoding="utf-8") == text, name
    assert sorted(out.stdout.split()) == sorted(
        str(p) for p in [*(tmp_path / "m").rglob("*.yaml"), *(tmp_path / "d").glob("*.json")]
    )


def test_cli_refuses_a_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("slo: {ttft_p95_seconds: -1}\n")
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "generate", "--config", str(bad),
         "--out", str(tmp_path / "m")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2
    assert "error: " in out.stderr and "slo.ttft_p95_seconds" in out.stderr
    assert not (tmp_path / "m").exists()


def test_timezone_shows_in_descriptions_and_quiet_hours_but_not_in_rule_logic() -> None:
    base = generate.render(example())
    berlin = variant(r"^  timezone: Asia/Shanghai", "  timezone: Europe/Berlin")
    # Gating is on llm_exporter_peak_window: the exporter converts the timezone, not PromQL.
    assert berlin["rules/recording.yaml"] == base["rules/recording.yaml"]
    drift = alerts_by_name(berlin["rules/alerts.yaml"])["LLMProbeTTFTPeakDrift"]
    assert [r["annotations"]["description"].count("(20:00-23:00 Europe/Berlin)")
            for r in drift] == [1]
    assert "Asia/Shanghai" not in berlin["rules/alerts.yaml"]
    am = yaml.safe_load(berlin["alertmanager.yaml"])
    assert [t["location"] for i in am["time_intervals"] for t in i["time_intervals"]] == [
        "Europe/Berlin"
    ]
    assert "Europe/Berlin" in berlin["dashboards/llm-day-evening.json"]
    assert "Asia/Shanghai" not in berlin["dashboards/llm-day-evening.json"]


def test_a_second_peak_window_gets_its_own_gated_rules_and_drift_alerts() -> None:
    out = variant(r'^    evening: \{start: "20:00", end: "23:00"\}',
                  '    evening: {start: "20:00", end: "23:00"}\n'
                  '    lunch: {start: "12:00", end: "13:30"}')
    peak = [r for r in rules_of(out["rules/recording.yaml"]) if r["record"].endswith("_peak")]
    assert sorted({r["labels"]["window"] for r in peak}) == ["evening", "lunch"]
    assert all(f'llm_exporter_peak_window{{window="{r["labels"]["window"]}"}} == 1' in r["expr"]
               for r in peak)
    drift = alerts_by_name(out["rules/alerts.yaml"])["LLMPathLossPeakDrift"]
    assert sorted(r["labels"]["window"] for r in drift) == ["evening", "lunch"]
    assert any("lunch window (12:00-13:30 Asia/Shanghai)" in r["annotations"]["description"]
               for r in drift)


def test_slo_thresholds_drive_expressions_descriptions_and_dashboards() -> None:
    base = alerts_by_name(generate.render(example())["rules/alerts.yaml"])
    out = variant(r"^  ttft_p95_seconds: 1.0", "  ttft_p95_seconds: 0.8")
    changed = alerts_by_name(out["rules/alerts.yaml"])
    ttft = {r["labels"]["slo"]: r for r in changed["LLMProbeTTFTHigh"]}
    # chat keeps its own 2s; every other probe gets the new global 800ms
    assert sorted(ttft) == ["2s", "800ms"]
    assert ttft["800ms"]["expr"].endswith('{probe!~"chat"} > 0.8')
    assert "over the 800ms SLO" in ttft["800ms"]["annotations"]["description"]
    assert ttft["2s"]["expr"] == base["LLMProbeTTFTHigh"][0]["expr"]
    assert "> 0.8\n" in changed["LLMEngineComputeBound"][0]["expr"]
    overview = out["dashboards/llm-overview.json"]
    assert '"value": 0.8' in overview and "800ms SLO" in overview

    burn = alerts_by_name(variant(r"^  objective: 0.99", "  objective: 0.995")
                          ["rules/alerts.yaml"])["LLMProbeErrorBudgetBurn"]
    assert [r["expr"].count(limit) for r, limit in zip(burn, ("> 0.072", "> 0.03"), strict=True)
            ] == [2, 2]
    loss = alerts_by_name(variant(r"^  loss_ratio: 0.02", "  loss_ratio: 0.05")
                          ["rules/alerts.yaml"])["LLMPathPacketLoss"]
    assert loss[0]["expr"].endswith("> 0.05") and "(threshold 5%)" in loss[0]["annotations"][
        "description"]


def test_alerting_policy_drives_rules_alertmanager_and_dashboards() -> None:
    out = variant(
        r"^  quiet_hours:",
        "  burn_windows: [{long: 3d, short: 6h, factor: 1, hold: 1h, severity: warning}]\n"
        "  throttle_reasons: [hw_slowdown]\n  throttle_share: 0.25\n  route_lookback: 1d\n"
        "  receivers: {critical: oncall, warning: chat, info: nowhere}\n"
        "  default_receiver: fallback\n  quiet_hours:",
    )
    goodput = [r["record"] for r in rules_of(out["rules/recording.yaml"])
               if ":llm_probe_slo_good_per_requests:" in r["record"]]
    assert [g.rsplit("_rate", 1)[1] for g in goodput] == ["6h", "3d"]
    alerts = alerts_by_name(out["rules/alerts.yaml"])
    [burn] = alerts["LLMProbeErrorBudgetBurn"]
    assert (burn["for"], burn["labels"]) == (
        "1h", {"severity": "warning", "long": "3d", "short": "6h"})
    assert '{reason=~"hw_slowdown"}[10m]) > 0.25' in alerts["LLMGPUThrottled"][0]["expr"]
    assert "[1d])" in alerts["LLMPathRouteDegraded"][0]["expr"]
    am = yaml.safe_load(out["alertmanager.yaml"])
    assert am["route"]["receiver"] == "fallback"
    assert [r["receiver"] for r in am["route"]["routes"]] == ["oncall", "chat", "nowhere"]
    assert [r["name"] for r in am["receivers"]] == ["fallback", "oncall", "chat", "nowhere"]
    overview = out["dashboards/llm-overview.json"]
    assert "Goodput (3d)" in overview and "alerts at 1x (with 6h)" in overview
    assert "hw_slowdown alert." in out["dashboards/llm-gpu.json"]
    recorded = {r["record"] for r in rules_of(out["rules/recording.yaml"])}
    for name, text in out.items():
        if name != "alertmanager.yaml":
            assert not unknown_names(text, recorded), name


@pytest.mark.parametrize(("carrier", "labels"), [
    ("", {}),  # the example's probe runs beside its engine: it crosses no carrier
    ("    carrier: telecom\n", {"carrier": "telecom"}),  # as a vantage point's does
])
def test_probe_labels_for_inhibition_come_from_the_config(
        carrier: str, labels: dict[str, str]) -> None:
    text = EXAMPLE.read_text(encoding="utf-8").replace(
        "    engine: main               # an engines[].name\n",
        f"{carrier}    engine: main\n")
    assert "    engine: main\n" in text, "config.example.yaml's probe moved"
    config = parse_config(text, str(EXAMPLE), resolve_secrets=False)
    absent = [r for r in alerts_by_name(generate.render(config)["rules/alerts.yaml"])[
        "LLMProbeAbsent"] if r["expr"].startswith("absent(")]
    assert [r["labels"] for r in absent] == [
        {"severity": "warning", "probe": "chat", **labels, "engine_target": "main"}]


def _string_literals(path: Path) -> list[tuple[int, str]]:
    """String constants in code, docstrings left out (they may name what they describe)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


@pytest.mark.parametrize("path", GENERATORS, ids=lambda p: str(p.relative_to(MONITORING)))
def test_no_metric_name_is_typed_in_the_generators(path: Path) -> None:
    typed = [(line, text) for line, text in _string_literals(path)
             if re.search(r"\bllm_[a-z]", text)
             and not (path == NAMES and RECORDED_NAME.fullmatch(text))]
    assert not typed, f"{path.name}: metric names typed instead of read from exporter/metrics/: {typed}"


def test_every_name_in_the_output_exists() -> None:
    files = generate.render(example())
    recorded = {r["record"] for r in rules_of(files["rules/recording.yaml"])}
    for name, text in files.items():
        if name != "alertmanager.yaml":
            assert not unknown_names(text, recorded), name


def test_every_recorded_series_is_used_by_an_alert_or_a_dashboard() -> None:
    files = generate.render(example())
    recorded = [r["record"] for r in rules_of(files["rules/recording.yaml"])]
    consumers = files["rules/alerts.yaml"] + "".join(
        text for name, text in files.items() if name.startswith("dashboards/"))
    # Recording rules that only feed other recording rules are still read there.
    feeds = "".join(r["expr"] for r in rules_of(files["rules/recording.yaml"]))
    unused = [n for n in dict.fromkeys(recorded) if n not in consumers and n not in feeds]
    assert not unused


def test_alert_annotation_contract() -> None:
    config = example()
    for name, alert_rules in alerts_by_name(generate.render(config)["rules/alerts.yaml"]).items():
        assert re.fullmatch(r"LLM[A-Za-z0-9]+", name)
        for rule in alert_rules:
            labels, notes = rule["labels"], rule["annotations"]
            assert labels["severity"] in SEVERITIES, name
            assert notes["summary"].endswith("."), name
            assert notes["runbook_url"] == (
                f"{config.alerting.runbook_base_url}#{name.lower()}"), name
            # A verdict's values and thresholds are its evidence (diagnose prints them), not
            # the series' value, which only says primary.
            facts = rule["expr"].startswith("absent(") or name in ("LLMEngineDown",
                                                                   "LLMLatencyDiagnosis")
            if not facts:
                # the value and the threshold it crossed
                assert "$value" in notes["description"], name
            # These compare with a past state (a new XID, an earlier route, a success), not a
            # configured number.
            if not facts and name not in ("LLMGPUXidError", "LLMPathRouteDegraded",
                                          "LLMExporterCheckFailing"):
                assert re.search(r"threshold|SLO", notes["description"]), name


CLAUSE = re.compile(r"\b(by|on|without|ignoring)\s*\(([^)]*)\)")
BARE_AGGREGATION = re.compile(r"\b(sum|min|max|avg|count|group|stddev|stdvar)\s*\(")


def test_every_grouping_and_join_keeps_the_fleet_labels() -> None:
    # Evaluated centrally on remote-written series (docs/scaling.md), a rule that dropped
    # site or vantage would merge vantage points; at the edge the labels are absent and the
    # clause keeps nothing more.
    problems = []
    for path in (ROOT / "alerts/rules").glob("*.yaml"):
        for rule in rules_of(path.read_text()):
            name = rule.get("record") or rule["alert"]
            for kind, labels in CLAUSE.findall(rule["expr"]):
                kept = {x.strip() for x in labels.split(",")}
                if kind in ("without", "ignoring") or not {"site", "vantage"} <= kept:
                    problems.append(f"{name}: {kind} ({labels})")
            problems += [f"{name}: {m}(... without by" for m in
                         BARE_AGGREGATION.findall(rule["expr"])]
    assert not problems
