"""The chain's output and its JSON contract (``schema.json`` beside this file, version v1).

Layers and causes are the fixed vocabulary of ``causes.py``; the chain may only conclude one
of those.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, get_args

from exporter import metrics
from exporter.diagnosis.causes import NAMES, Symptom
from exporter.diagnosis.parts import BudgetPart, StreamPart

SCHEMA_ID = "llm-latency-diagnosis/v1"

Status = Literal["healthy", "degraded", "failing", "unknown"]
assert get_args(Status) == metrics.DIAGNOSIS_STATUSES
StepName = Literal["symptom", "network", "engine", "gpu", "host", "application"]


class StepResult(StrEnum):
    IMPLICATED = "implicated"
    RULED_OUT = "ruled_out"
    NO_DATA = "no_data"
    #: The config leaves the layer out (no ``gpu`` section): nothing to read, and nothing
    #: missing either.
    NOT_CONFIGURED = "not_configured"


#: The chain's steps, in the order the field guides fix.
STEPS: tuple[StepName, ...] = ("symptom", "network", "engine", "gpu", "host", "application")

#: Keys of a verdict's scope, in the order the text and the metric labels use. ``site`` and
#: ``vantage`` are a fleet's edge labels (docs/scaling.md), set only through the Prometheus
#: source; the exporter's own verdict metric has no labels for them. ``dp_rank`` narrows an
#: engine to one data-parallel rank (engine/imbalance); the verdict metric names the engine.
SCOPE_KEYS = ("carrier", "target", "probe", "engine", "dp_rank", "gpu", "site", "vantage")


@dataclass(frozen=True)
class Evidence:
    metric: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)
    threshold: float | None = None
    baseline: float | None = None
    window: str = ""
    #: A histogram quantile's resolution: the bucket bounds it lies between (it is
    #: interpolated inside them), None for a value that is no quantile.
    bucket: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "metric": self.metric,
            "labels": dict(self.labels),
            "value": self.value,
            "threshold": self.threshold,
            "baseline": self.baseline,
            "window": self.window,
        }
        if self.bucket is not None:
            doc["bucket"] = {"lower": self.bucket[0], "upper": self.bucket[1]}
        return doc


@dataclass(frozen=True)
class Verdict:
    layer: str
    cause: str
    scope: Mapping[str, str]
    symptoms: tuple[Symptom, ...]
    confidence: float
    summary: str
    evidence: tuple[Evidence, ...] = ()
    actions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        assert self.cause in NAMES.get(self.layer, ()), (self.layer, self.cause)
        assert set(self.scope) <= set(SCOPE_KEYS), self.scope

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "cause": self.cause,
            "scope": {k: self.scope[k] for k in SCOPE_KEYS if self.scope.get(k)},
            "symptoms": list(self.symptoms),
            "confidence": round(self.confidence, 3),
            "summary": self.summary,
            "evidence": [e.to_json() for e in self.evidence],
            "actions": list(self.actions),
        }


@dataclass(frozen=True)
class Budget:
    """One probe's mean TTFT over the window, part by part: the parts sum to ``ttft``, a
    part no metric measured (None) is in the remainder. The same for its mean TPOT when it
    has one: ``stream`` sums to ``tpot`` (both None without the engine's time per token)."""

    probe: str
    carrier: str
    engine: str
    ttft: float
    parts: Mapping[BudgetPart, float | None]
    tpot: float | None = None
    stream: Mapping[StreamPart, float | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"probe": self.probe, "carrier": self.carrier, "engine": self.engine,
                "ttft": self.ttft, "parts": {str(p): self.parts.get(p) for p in BudgetPart},
                "tpot": self.tpot, "stream": {str(p): self.stream.get(p) for p in StreamPart}}


@dataclass(frozen=True)
class Step:
    step: StepName
    result: StepResult
    evidence: tuple[Evidence, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "result": str(self.result),
            "evidence": [e.to_json() for e in self.evidence],
        }


def _utc(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Pending:
    """A new primary verdict the chain has concluded but not yet for ``diagnosis.confirm``
    evaluations in a row (``stability.py``): what is shown until then is the previous one."""

    status: Status
    verdict: Verdict | None  # the candidate primary; None for a verdict-less status
    since: dt.datetime  # the first evaluation in a row that concluded it
    evaluations: int  # how many in a row have
    confirm: int  # how many it needs

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "verdict": self.verdict.to_json() if self.verdict is not None else None,
            "since": _utc(self.since),
            "evaluations": self.evaluations,
            "confirm": self.confirm,
        }


@dataclass(frozen=True)
class Diagnosis:
    at: dt.datetime
    window: str
    source: str
    status: Status
    #: Primary first, then the secondary ones in chain order; empty when healthy.
    verdicts: tuple[Verdict, ...]
    steps: tuple[Step, ...]
    #: Set on the shown diagnosis while a different primary waits for confirmation.
    pending: Pending | None = None
    #: Each probe's first token, part by part, where its TTFT is known.
    budget: tuple[Budget, ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": SCHEMA_ID,
            "at": _utc(self.at),
            "window": self.window,
            "source": self.source,
            "status": self.status,
            "verdicts": [v.to_json() for v in self.verdicts],
            "steps": [s.to_json() for s in self.steps],
            "budget": [b.to_json() for b in self.budget],
        }
        if self.pending is not None:
            doc["pending"] = self.pending.to_json()
        return doc
