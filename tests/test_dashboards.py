"""Lint of the committed dashboards: the dashboard-linter rules that matter here (it is a
Go binary we cannot build), plus PromQL that parses and names that exist."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any

import pytest

from exporter.metrics import names
from exporter.monitoring import dashboards as grafana
from exporter.monitoring.dashboards.kit import COMPARE, RESOLUTION
from tests.support import ROOT
from tests.support.generated import (
    RULE_FILES,
    dashboards,
    example,
    panels,
    promtool_check_exprs,
    queries,
    rules_of,
    substitute,
    unknown_names,
)
from tests.support.prometheus import PromCli

BOARDS = dashboards()
DS = "${datasource}"
RANGE_FUNC = re.compile(r"\b(rate|irate|increase)\((?P<arg>[^\[]*)\[(?P<window>[^\]]+)\]")
COUNTER = re.compile(r"\bllm_[a-z0-9_]+_total\b")
VARIABLE = re.compile(r"\$\{?([a-z_]+)\}?")


def test_the_five_dashboards_with_stable_uids() -> None:
    assert {d["uid"] for d in BOARDS.values()} == {
        "llm-overview", "llm-engine", "llm-gpu", "llm-paths", "llm-day-evening"}
    assert sorted(BOARDS) == sorted(f"llm-{n}.json" for n in grafana.DASHBOARDS)


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_variables(name: str) -> None:
    board = BOARDS[name]
    variables = board["templating"]["list"]
    ds = variables[0]
    assert (ds["name"], ds["type"], ds["query"]) == ("datasource", "datasource", "prometheus")
    names = {v["name"] for v in variables}
    # A fleet's external labels first (docs/scaling.md), All by default, then the rest.
    assert [v["name"] for v in variables[1:4]] == ["site", "vantage", "instance"]
    for var in variables[1:3]:
        assert var["current"]["value"] == "$__all" and var["includeAll"] is True
    for var in variables:
        if var["type"] == "query":
            assert var["datasource"]["uid"] == DS, var["name"]
            assert var["refresh"] == 2, f"{var['name']}: refresh on time-range change"
            assert var["allValue"] == ".*", var["name"]
            assert re.fullmatch(rf"label_values\(llm_[a-z_]+(\{{[^}}]*\}})?, {var['name']}\)",
                                var["query"]), var["query"]
    # Every variable a query uses is defined; Grafana's own ($__...) are not listed.
    used = {m for q in queries({name: board}) for m in VARIABLE.findall(q.expr)}
    assert used - {"__rate_interval"} <= names


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_panels(name: str) -> None:
    board = BOARDS[name]
    assert board["editable"] is False
    assert board["title"] and board["description"]
    titles = [p["title"] for p in panels(board)]
    assert len(titles) == len(set(titles)), "panel titles repeat"
    for panel in panels(board):
        where = f"{name} / {panel['title']}"
        assert panel["description"], where
        assert panel["datasource"]["uid"] == DS, where
        assert panel["fieldConfig"]["defaults"].get("unit"), where
        assert panel["targets"], where
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DS, where
            assert target["expr"] and target["refId"], where
            assert "legendFormat" in target, where
        # A quantile read from buckets says how fine it is.
        if any("histogram_quantile(" in t["expr"] or any(n in t["expr"] for n in QUANTILE_NAMES)
               for t in panel["targets"]):
            assert RESOLUTION in panel["description"], where


#: Every recorded quantile series.
QUANTILE_NAMES = tuple(name for q in vars(names).values() if isinstance(q, names.Quantiles)
                       for _, name in q.by_quantile())


SELECTOR = re.compile(r"\b((?:llm_|[a-z_]+:)[a-zA-Z0-9_:]*)(\{[^}]*\})?")


def test_every_series_is_scoped_to_the_selected_sites_and_vantage_points() -> None:
    problems = []
    for q in queries():
        for m in SELECTOR.finditer(q.expr):
            if not m[2] or 'site=~"$site"' not in m[2] or 'vantage=~"$vantage"' not in m[2]:
                problems.append(f"{q}: {m[0]}")
    assert not problems


def test_overview_compares_vantage_points_side_by_side() -> None:
    overview = BOARDS["llm-overview.json"]
    side = [p for p in panels(overview) if p["title"].endswith("per vantage point")]
    assert len(side) == 4
    for panel in side:
        expr = panel["targets"][0]["expr"]
        assert re.match(r"max by \(site, vantage, ", expr), expr
        assert "{{vantage}}{{site}}" in panel["targets"][0]["legendFormat"]


def _range_problems(expr: str) -> list[str]:
    problems = []
    for m in RANGE_FUNC.finditer(expr):
        if m["window"] != "$__rate_interval":
            problems.append(f"{m[0]}: use [$__rate_interval]")
    for m in COUNTER.finditer(expr):
        before = expr[: m.start()]
        if not re.search(r"\b(rate|irate|increase)\(\s*$", before):
            problems.append(f"{m[0]} is a counter: wrap it in rate() or increase()")
    return problems


def test_rates_use_the_rate_interval_and_counters_are_rated() -> None:
    problems = {str(q): p for q in queries() if (p := _range_problems(q.expr))}
    assert not problems


def test_the_lint_catches_what_it_should() -> None:
    assert _range_problems("rate(llm_x_total[5m])") == ["rate(llm_x_total[5m]: use [$__rate_interval]"]
    assert _range_problems("sum(llm_x_total)") == [
        "llm_x_total is a counter: wrap it in rate() or increase()"]
    assert _range_problems("increase(llm_x_total{a=~\"$a\"}[$__rate_interval])") == []


def test_queries_parse_and_name_only_what_exists(tmp_path: Path, prom_cli: PromCli) -> None:
    all_queries = queries()
    exprs = [substitute(q.expr, "1m", {COMPARE: "1w"}) for q in all_queries]
    out = promtool_check_exprs(exprs, tmp_path, prom_cli)
    assert out.returncode == 0, out.stdout + out.stderr
    recorded = {r["record"] for r in rules_of(RULE_FILES[0].read_text())}
    unknown = {str(q): names for q in all_queries if (names := unknown_names(q.expr, recorded))}
    assert not unknown


def test_sdk_build_matches_the_grafana_image() -> None:
    # The SDK's builds are per Grafana minor; the JSON it emits targets that version.
    sdk = importlib.metadata.version("grafana-foundation-sdk")
    compose = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
    (image,) = re.findall(r"image:\s*grafana/grafana:(\d+\.\d+)\.", compose)
    assert sdk.split("!")[1].startswith(image + "."), (sdk, image)


def test_slo_lines_come_from_the_config() -> None:
    overview = BOARDS["llm-overview.json"]
    stat: dict[str, Any] = next(p for p in panels(overview) if p["title"] == "P95 TTFT")
    steps = stat["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, 1.0]


def test_the_probe_streams_per_carrier_on_the_paths_and_day_vs_evening_boards() -> None:
    """The probes' own TCP streams (TCP_INFO) beside the ICMP path numbers: retransmission
    and out-of-order shares with the loss SLO's line, and the kernel's smoothed RTT."""
    by_title = {p["title"]: p for p in panels(BOARDS["llm-paths.json"])}
    loss = example().slo.loss_ratio
    for title, series in (("Probe stream retransmission", names.PROBE_STREAM_RETRANSMISSION),
                          ("Probe stream out of order", names.PROBE_STREAM_OUT_OF_ORDER)):
        panel = by_title[title]
        [target] = panel["targets"]
        assert target["expr"].startswith(series + "{") and target["legendFormat"] == "{{carrier}}"
        assert panel["fieldConfig"]["defaults"]["unit"] == "percentunit"
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [s["value"] for s in steps][-1] == loss, steps
    rtt = by_title["Probe kernel smoothed RTT"]
    assert [t["expr"].split("{")[0] for t in rtt["targets"]] == [
        n for _, n in names.PROBE_TCP_RTT.by_quantile()]
    week = {p["title"]: p for p in panels(BOARDS["llm-day-evening.json"])}
    exprs = [t["expr"] for t in week[f"Probe stream retransmission: now vs ${COMPARE} ago"]["targets"]]
    assert all(e.startswith(names.PROBE_STREAM_RETRANSMISSION + "{") for e in exprs)
    assert exprs[1].endswith(f"offset ${COMPARE}")
