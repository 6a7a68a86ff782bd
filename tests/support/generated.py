"""Helpers over the generated monitoring files: the committed copies, their rules and the
queries of every dashboard panel, with Grafana's variables replaced the way Grafana does
before it sends a query to Prometheus."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from exporter import metrics
from exporter.config.load import load_config
from exporter.config.models import Config
from tests.support import ROOT
from tests.support.prometheus import PromCli

EXAMPLE = ROOT / "config.example.yaml"
ALERTS = ROOT / "alerts"
DASHBOARDS = ROOT / "dashboards"
RULE_FILES = (ALERTS / "rules" / "recording.yaml", ALERTS / "rules" / "alerts.yaml")
AM_FILE = ALERTS / "alertmanager.yaml"

# Names PromQL or Prometheus provide, not the exporter: allowed in queries.
BUILTIN_SERIES = {"up"}
_SUFFIXES = ("_bucket", "_sum", "_count")


def example() -> Config:
    return load_config(EXAMPLE, resolve_secrets=False)


def committed() -> dict[str, str]:
    """The committed files, keyed like exporter.monitoring.generate.render()."""
    files = {
        f"rules/{p.name}": p.read_text(encoding="utf-8")
        for p in (ALERTS / "rules").glob("*.yaml")
    }
    files["alertmanager.yaml"] = AM_FILE.read_text(encoding="utf-8")
    for p in DASHBOARDS.glob("*.json"):
        files[f"dashboards/{p.name}"] = p.read_text(encoding="utf-8")
    return files


def groups(text: str) -> list[dict[str, Any]]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    found: list[dict[str, Any]] = data["groups"]
    return found


def rules_of(text: str) -> list[dict[str, Any]]:
    return [rule for group in groups(text) for rule in group["rules"]]


def alerts_by_name(text: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for rule in rules_of(text):
        out.setdefault(rule["alert"], []).append(rule)
    return out


def schema_series() -> set[str]:
    """Every series name the exporter can expose (histograms: their three sample names)."""
    names = set(metrics.SCHEMA)
    for fam in metrics.SCHEMA.values():
        if fam.kind is metrics.Kind.HISTOGRAM:
            names.update(fam.name + s for s in _SUFFIXES)
    return names


RECORDED = re.compile(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b")
EXPORTED = re.compile(r"\bllm_[a-z0-9_]+\b")


def unknown_names(text: str, recorded: set[str]) -> set[str]:
    """Metric names in ``text`` that neither the exporter nor a recording rule provides."""
    names = set(RECORDED.findall(text)) - recorded
    names |= set(EXPORTED.findall(RECORDED.sub(" ", text))) - schema_series()
    return names


# --- dashboards ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref: str
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} / {self.ref}"


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in DASHBOARDS.glob("*.json")}


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def queries(board: dict[str, dict[str, Any]] | None = None) -> list[PanelQuery]:
    found = []
    for name, dash in sorted((board or dashboards()).items()):
        for panel in panels(dash):
            for target in panel.get("targets", []):
                found.append(PanelQuery(name, panel["title"], target["refId"], target["expr"]))
    return found


def substitute(expr: str, rate_interval: str, values: dict[str, str] | None = None) -> str:
    """What Grafana sends: $__rate_interval and dashboard variables replaced. Multi-value
    variables set to All send their allValue (".*")."""
    out = expr.replace("$__rate_interval", rate_interval)
    for name, value in (values or {}).items():
        out = out.replace(f"${{{name}}}", value).replace(f"${name}", value)
    return re.sub(r"\$\{?[a-z_]+\}?", ".*", out)


def promtool_check_exprs(exprs: list[str], tmp: Path, prom_cli: PromCli
                         ) -> subprocess.CompletedProcess[str]:
    """Parse every expression with promtool (as recording rules, its only offline parser);
    ``prom_cli`` is the fixture of that name."""
    rules = [{"record": f"check:query:{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}))
    return prom_cli("promtool", "check", "rules", "--lint=none", str(path))
