"""The cause table is the vocabulary (exporter/diagnosis/causes.py): what is generated from it
is up to date, every alert it names exists, and a cause's name is written in one place."""

from __future__ import annotations

import ast
from pathlib import Path

from exporter.diagnosis import vocabulary
from exporter.diagnosis.causes import CAUSES, Cause
from exporter.monitoring.alerts import alert_groups
from tests.support.generated import example

ROOT = Path(__file__).resolve().parent.parent
#: Where a cause is named: the chain, the alert mapping and the metric schema.
NAMED_IN = ("exporter/diagnosis", "exporter/monitoring", "exporter/metrics")


def test_the_schema_enums_are_the_tables() -> None:
    assert vocabulary.SCHEMA_FILE.read_text(encoding="utf-8") == vocabulary.schema_text(), (
        "stale: run python -m exporter.diagnosis.vocabulary")


def test_the_docs_vocabulary_is_the_tables() -> None:
    doc = (ROOT / vocabulary.DOC.doc).read_text(encoding="utf-8")
    assert vocabulary.DOC.replace(doc) == doc, "stale: run python -m exporter.diagnosis.vocabulary"


def _literals(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_a_cause_name_is_a_string_in_at_most_two_files() -> None:
    """The table and at most one rule: a step names its cause by the row's constant."""
    files = {p: _literals(p) for folder in NAMED_IN for p in sorted((ROOT / folder).rglob("*.py"))}
    table = ROOT / "exporter/diagnosis/causes.py"
    for c in CAUSES:
        where = sorted(str(p.relative_to(ROOT)) for p, found in files.items() if c.name in found)
        assert str(table.relative_to(ROOT)) in where, c
        assert len(where) <= 2, (str(c), where)


def test_every_alert_the_table_names_is_generated() -> None:
    generated = {r["alert"] for g in alert_groups(example()) for r in g["rules"]}
    for c in CAUSES:
        assert set(c.pages) | set(c.answers) <= generated, c


def _deeper(c: Cause) -> set[Cause]:
    return {x for a in c.absorbs for x in (a, *_deeper(a))}


def test_a_cause_takes_over_only_other_causes_and_never_in_a_circle() -> None:
    for c in CAUSES:
        assert c not in _deeper(c), c
        assert all(a in CAUSES for a in c.absorbs), c
