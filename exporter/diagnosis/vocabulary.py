"""What is generated from the cause table (``causes.py``): the layer and cause enums of
``schema.json`` (its steps, and its budget's parts) and the vocabulary table of
docs/diagnosis.md.

``python -m exporter.diagnosis.vocabulary`` rewrites both from the repository root;
tests/test_vocabulary.py fails while either is stale, so the contract a consumer validates
against and the table an SRE reads cannot drift from what the chain concludes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from exporter.diagnosis.causes import CAUSES, LAYERS, NAMES, Cause
from exporter.diagnosis.parts import BudgetPart, StreamPart
from exporter.diagnosis.result import STEPS, StepResult
from exporter.docblock import DocBlock

SCHEMA_FILE = Path(__file__).with_name("schema.json")


def schema(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (the v1 schema) with its verdict's layer enum and its per-layer cause enums
    taken from the table, and the budget's parts."""
    verdict = doc["$defs"]["verdict"]
    verdict["properties"]["layer"]["enum"] = list(LAYERS)
    verdict["oneOf"] = [{"properties": {"layer": {"const": layer},
                                        "cause": {"enum": list(NAMES[layer])}}}
                        for layer in LAYERS]
    doc["$defs"]["step"]["properties"]["result"]["enum"] = [str(r) for r in StepResult]
    doc["$defs"]["step"]["properties"]["step"]["enum"] = list(STEPS)
    steps = doc["properties"]["steps"]
    steps["minItems"] = steps["maxItems"] = len(STEPS)
    steps["description"] = f"One per step, in chain order: {', '.join(STEPS)}."
    budget = doc["$defs"]["budget"]["properties"]
    for key, enum in (("parts", BudgetPart), ("stream", StreamPart)):
        budget[key]["properties"] = {str(p): {"type": ["number", "null"]} for p in enum}
        budget[key]["required"] = [str(p) for p in enum]
    return doc


def schema_text() -> str:
    return json.dumps(schema(json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))),
                      indent=2, ensure_ascii=False) + "\n"


def _alerts(c: Cause) -> str:
    return ", ".join(f"`{a}`" for a in c.pages) or "—"


def _parts(c: Cause) -> str:
    return ", ".join(f"`{p}`" for p in c.parts) or "—"


def markdown() -> str:
    """One row per cause, one fact per cell; the actions are each verdict's own and
    docs/runbooks.md's, not a column here."""
    lines = ["| Layer | Cause | Meaning | Its time in the budget | Paged by |",
             "|---|---|---|---|---|"]
    lines += [f"| {c.layer} | `{c.name}` | {c.meaning} | {_parts(c)} | {_alerts(c)} |"
              for c in CAUSES]
    return "\n".join(lines) + "\n"


DOC = DocBlock("cause-table", "exporter.diagnosis.vocabulary", markdown, "docs/diagnosis.md")


def main() -> None:
    SCHEMA_FILE.write_text(schema_text(), encoding="utf-8")
    DOC.main([DOC.doc])


if __name__ == "__main__":
    main()
