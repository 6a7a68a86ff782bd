"""docs/runbooks.md against the alerts: one section per alert at the anchor its runbook_url
names, checks in the field order, and PromQL that parses and names series that exist."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import ROOT
from tests.support.generated import (
    BUILTIN_SERIES,
    RULE_FILES,
    alerts_by_name,
    promtool_check_exprs,
    rules_of,
    unknown_names,
)
from tests.support.prometheus import PromCli

DOC = ROOT / "docs" / "runbooks.md"
FIELD_ORDER = ("**Network**", "**Engine queue**", "**Compute**", "**Application**")
PROMQL = re.compile(r"```promql\n(.*?)```", re.S)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def sections() -> dict[str, str]:
    parts = re.split(r"^## (.+)$", DOC.read_text(encoding="utf-8"), flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_every_alert_has_its_section_at_its_runbook_anchor() -> None:
    alerts = alerts_by_name(RULE_FILES[1].read_text())
    docs = sections()
    assert sorted(docs) == sorted(alerts), "one section per alert, none for alerts that are gone"
    for name, alert_rules in alerts.items():
        anchors = {r["annotations"]["runbook_url"].rsplit("#", 1)[1] for r in alert_rules}
        assert anchors == {github_anchor(name)}, name


def test_sections_check_in_the_field_order_with_queries() -> None:
    for name, body in sections().items():
        positions = [body.find(label) for label in FIELD_ORDER]
        assert -1 not in positions, f"{name}: lacks one of {FIELD_ORDER}"
        assert positions == sorted(positions), f"{name}: not in the order {FIELD_ORDER}"
        assert PROMQL.search(body), f"{name}: no PromQL to run"


def test_queries_parse_and_name_series_that_exist(tmp_path: Path, prom_cli: PromCli) -> None:
    recorded = {r["record"] for r in rules_of(RULE_FILES[0].read_text())}
    exprs = [line.strip() for block in PROMQL.findall(DOC.read_text(encoding="utf-8"))
             for line in block.splitlines() if line.strip()]
    assert len(exprs) > 50
    out = promtool_check_exprs(exprs, tmp_path, prom_cli)
    assert out.returncode == 0, out.stdout + out.stderr
    unknown = {e: names for e in exprs if (names := unknown_names(e, recorded))}
    assert not unknown
    bare = {m for e in exprs for m in re.findall(r"^([a-z_]+)\{", e)} - BUILTIN_SERIES
    assert all(n.startswith("llm_") for n in bare), bare


def test_github_anchor() -> None:
    assert github_anchor("LLMProbeTTFTHigh") == "llmprobettfthigh"
    assert github_anchor("Day vs. evening (P95)") == "day-vs-evening-p95"
