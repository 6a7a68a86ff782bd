"""Rule objects: a recording rule, an alert with its annotation contract, a group."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("critical", "warning", "info")

Rule = dict[str, Any]


def record(name: str, expr: str, labels: dict[str, str] | None = None) -> Rule:
    rule: Rule = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


@dataclass(frozen=True)
class Alert:
    """One alerting rule. Several rules may share a name (one per threshold or window)."""

    name: str
    expr: str
    severity: str
    summary: str
    description: str
    for_: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    def rule(self, runbook_base_url: str) -> Rule:
        assert self.severity in SEVERITIES, self.severity
        assert self.summary.endswith("."), f"{self.name}: a summary is a sentence"
        rule: Rule = {"alert": self.name, "expr": self.expr}
        if self.for_:
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity, **self.labels}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": runbook_url(runbook_base_url, self.name),
        }
        return rule


def runbook_url(base: str, alert: str) -> str:
    # GitHub renders "## LLMProbeTTFTHigh" with the anchor #llmprobettfthigh.
    return f"{base}#{alert.lower()}"


def group(name: str, rules: Sequence[Rule]) -> dict[str, Any]:
    return {"name": name, "rules": list(rules)}
