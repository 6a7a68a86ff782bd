"""The decision chain's own families.

Written by the exporter's embedded evaluation of the decision chain (exporter/diagnosis/).
"""

from __future__ import annotations

from exporter.metrics.schema import Kind, define

#: Bounded values of ``status`` on DIAGNOSIS_STATUS.
DIAGNOSIS_STATUSES = ("healthy", "degraded", "failing", "unknown")
#: ``layer`` and ``cause`` take the vocabulary of exporter/diagnosis/causes.py.
DIAGNOSIS_VERDICT_LABELS = ("layer", "cause", "carrier", "probe", "engine")

DIAGNOSIS_VERDICT = define(
    "llm_diagnosis_verdict",
    Kind.GAUGE,
    "1 while the decision chain names this cause, 2 while it is the primary verdict; absent "
    "otherwise. Scope labels are empty where the verdict has no such scope.",
    DIAGNOSIS_VERDICT_LABELS,
    section="diagnosis",
)
DIAGNOSIS_STATUS = define(
    "llm_diagnosis_status",
    Kind.GAUGE,
    "1 for the current status of the last evaluation (" + ", ".join(DIAGNOSIS_STATUSES)
    + "), 0 for the others.",
    ("status",),
    section="diagnosis",
)
DIAGNOSIS_EVALUATIONS = define(
    "llm_diagnosis_evaluations_total",
    Kind.COUNTER,
    "Evaluations of the decision chain over the embedded windows.",
    section="diagnosis",
)
DIAGNOSIS_EVALUATION_ERRORS = define(
    "llm_diagnosis_evaluation_errors_total",
    Kind.COUNTER,
    "Embedded evaluations that raised and were skipped (the error is logged once until one "
    "succeeds again); the last good diagnosis stays served.",
    section="diagnosis",
)
