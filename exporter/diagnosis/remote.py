"""The exporter as a diagnosis source: ``GET /api/v1/diagnosis`` of a running exporter, and
its JSON read back into a :class:`Diagnosis` so the CLI renders both sources the same way.
"""

from __future__ import annotations

import datetime as dt
import urllib.request
from typing import Any, cast, get_args

from exporter.diagnosis.parts import BudgetPart, StreamPart
from exporter.diagnosis.promapi import SourceError, fetch_json
from exporter.diagnosis.result import (
    SCHEMA_ID,
    Budget,
    Diagnosis,
    Evidence,
    Pending,
    Status,
    Step,
    StepResult,
    Verdict,
)

PATH = "/api/v1/diagnosis"


def fetch(base_url: str, timeout: float) -> dict[str, Any]:
    """The exporter's latest diagnosis document; SourceError with one line when it cannot
    be had."""
    base = base_url.rstrip("/")
    req = urllib.request.Request(f"{base}{PATH}", headers={"Accept": "application/json"})
    doc = fetch_json(req, base, timeout)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_ID:
        raise SourceError(f"{base}{PATH} did not answer with an {SCHEMA_ID} document")
    return doc


def _bucket(doc: Any) -> tuple[float, float] | None:
    if not isinstance(doc, dict):
        return None
    return float(doc["lower"]), float(doc["upper"])


def _evidence(items: Any) -> tuple[Evidence, ...]:
    return tuple(
        Evidence(metric=e["metric"], value=float(e["value"]), labels=dict(e.get("labels", {})),
                 threshold=e.get("threshold"), baseline=e.get("baseline"),
                 window=e.get("window", ""), bucket=_bucket(e.get("bucket")))
        for e in items or ()
    )


def _verdict(v: dict[str, Any]) -> Verdict:
    return Verdict(layer=v["layer"], cause=v["cause"], scope=dict(v.get("scope", {})),
                   symptoms=tuple(v.get("symptoms", ())), confidence=float(v["confidence"]),
                   summary=v["summary"], evidence=_evidence(v.get("evidence")),
                   actions=tuple(v.get("actions", ())))


def _status(status: Any) -> Status:
    if status not in get_args(Status):
        raise ValueError(f"status {status!r}")
    return cast(Status, status)


def _pending(p: dict[str, Any] | None) -> Pending | None:
    if p is None:
        return None
    verdict = _verdict(p["verdict"]) if p["verdict"] is not None else None
    return Pending(_status(p["status"]), verdict, dt.datetime.fromisoformat(p["since"]),
                   int(p["evaluations"]), int(p["confirm"]))


def _budget(b: dict[str, Any]) -> Budget:
    parts = {p: _seconds(b["parts"].get(p)) for p in BudgetPart}
    # An exporter before the stream's budget sends no tpot: the stream is then unknown.
    stream = {p: _seconds((b.get("stream") or {}).get(p)) for p in StreamPart}
    tpot = _seconds(b.get("tpot"))
    return Budget(str(b["probe"]), str(b["carrier"]), str(b["engine"]), float(b["ttft"]),
                  parts, tpot, stream if tpot is not None else {})


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)


def from_json(doc: dict[str, Any], where: str = "the exporter") -> Diagnosis:
    """A Diagnosis from its v1 JSON; a document outside the contract (a field missing, a
    cause outside the vocabulary) is a SourceError naming ``where``."""
    try:
        status = _status(doc["status"])
        verdicts = tuple(_verdict(v) for v in doc["verdicts"])
        steps = tuple(Step(step=s["step"], result=StepResult(s["result"]),
                           evidence=_evidence(s.get("evidence")))
                      for s in doc["steps"])
        at = dt.datetime.fromisoformat(doc["at"])
        return Diagnosis(at=at, window=doc["window"], source=doc["source"], status=status,
                         verdicts=verdicts, steps=steps, pending=_pending(doc.get("pending")),
                         budget=tuple(_budget(b) for b in doc.get("budget", ())))
    except (KeyError, TypeError, ValueError, AssertionError) as exc:
        raise SourceError(f"{where}: not a valid {SCHEMA_ID} document ({exc})") from None
