"""docs/metrics.md against the code: every family in metrics.SCHEMA, and the engine table."""

from __future__ import annotations

import re

from exporter import metrics
from exporter.checks.engine import table, unmapped
from tests.support import ROOT

DOC = ROOT / "docs" / "metrics.md"
# A reference row: | `llm_name` | type | labels | definition |
ROW = re.compile(r"^\|\s*`(llm_[a-z0-9_]+)`\s*\|\s*([a-z]+)\s*\|\s*([^|]*?)\s*\|")
BACKTICKED = re.compile(r"`(llm_[a-z0-9_]+)`")


def _outside_generated(doc: str) -> str:
    head, _, rest = doc.partition(table.DOC_BEGIN)
    _, _, tail = rest.partition(table.DOC_END)
    return head + tail


def reference_rows() -> list[tuple[str, str, tuple[str, ...]]]:
    rows = []
    for line in _outside_generated(DOC.read_text(encoding="utf-8")).splitlines():
        m = ROW.match(line)
        if m:
            name, kind, labels = m.groups()
            names = () if labels in ("", "—", "-") else tuple(
                x.strip() for x in labels.split(",")
            )
            rows.append((name, kind, names))
    return rows


def test_every_family_has_one_row_with_its_type_and_labels() -> None:
    rows = reference_rows()
    names = [name for name, _, _ in rows]
    assert sorted({n for n in names if names.count(n) > 1}) == [], "documented twice"
    missing = sorted(set(metrics.SCHEMA) - set(names))
    unknown = sorted(set(names) - set(metrics.SCHEMA))
    assert not missing, f"families without a row in docs/metrics.md: {missing}"
    assert not unknown, f"rows for families exporter/metrics/ does not define: {unknown}"
    for name, kind, labels in rows:
        family = metrics.SCHEMA[name]
        assert kind == family.kind.value, f"{name}: documented as {kind}, is {family.kind}"
        assert labels == family.labels, f"{name}: documented labels {labels}, are {family.labels}"


def test_backticked_names_exist() -> None:
    """A family name in backticks anywhere in the prose is one the exporter serves (or one of
    its histogram sample names)."""
    text = _outside_generated(DOC.read_text(encoding="utf-8"))
    known = set(metrics.SCHEMA)
    for name in BACKTICKED.findall(text):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in known or base in known, f"docs/metrics.md names unknown family {name}"


def test_engine_mapping_table_mirrors_the_code() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert table.DOC_BEGIN in doc and table.DOC_END in doc
    assert table.replace_doc_block(doc) == doc, (
        "docs/metrics.md engine table differs from exporter/checks/engine/table.py; "
        "regenerate with: .venv/bin/python -m exporter.checks.engine.table docs/metrics.md"
    )
    # Every row of the table made it into the generated block, one line each.
    block = doc.partition(table.DOC_BEGIN)[2].partition(table.DOC_END)[0]
    assert len([line for line in block.splitlines() if line.startswith("| `")]) == len(
        table.SOURCES
    )


def test_unmapped_list_mirrors_the_code() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert unmapped.DOC_BEGIN in doc and unmapped.DOC_END in doc
    assert unmapped.replace_doc_block(doc) == doc, (
        "docs/metrics.md 'Deliberately not mapped' list differs from "
        "exporter/checks/engine/unmapped.py; regenerate with: "
        ".venv/bin/python -m exporter.checks.engine.unmapped docs/metrics.md"
    )


def test_no_family_is_both_mapped_and_unmapped() -> None:
    mapped = {(s.engine, s.name) for s in table.SOURCES}
    listed = {(u.engine, u.name) for u in unmapped.UNMAPPED}
    assert mapped & listed == set()
