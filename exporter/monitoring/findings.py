"""One decision, two renderings: every generated alert and the verdicts it stands for.

An alert and a verdict are two answers to one question, so they must agree. Which causes an
alert stands for is a column of the cause table (``exporter/diagnosis/causes.py``: the
alerts a cause pages or answers, the causes it takes over); what is the alert's own is here:
its role, and which of its labels name the verdict's scope. The lab holds the two answers to
each other through ``explains`` (every alert pending or firing is one of the verdicts' causes
and scopes, and every verdict of a paging cause has its alert).

Roles: ``cause`` (a layer's own numbers over the line: a cause of the table, or a deeper
one that takes it over), ``symptom`` (what a probe's users feel: any verdict that took over
that probe's symptom explains it), ``verdict`` (the chain's own primary verdict as a page).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from exporter.diagnosis.causes import BY_KEY, CAUSES, Cause
from exporter.metrics.names import FLEET
from exporter.monitoring.alertmanager import DIAGNOSIS, INHIBITIONS

Role = Literal["cause", "symptom", "verdict"]


@dataclass(frozen=True)
class Decision:
    alert: str
    role: Role
    #: Alert label -> the verdict scope key it must equal (engine alerts call it target).
    scope: tuple[tuple[str, str], ...] = ()
    #: A symptom alert's config fields (a cause alert's lines are its causes').
    source: tuple[str, ...] = ()


PROBE = (("probe", "probe"),)
ENGINE = (("target", "engine"),)
#: One data-parallel rank of an engine.
RANK = (*ENGINE, ("dp_rank", "dp_rank"))
PATH = (("carrier", "carrier"), ("target", "target"))
GPU = (("gpu", "gpu"),)
#: The host under a site's engines.
HOST = (("site", "site"),)
#: A carrier's real users: the carrier alone (they ride no chosen target).
CARRIER = (("carrier", "carrier"),)

DECISIONS: tuple[Decision, ...] = (
    Decision("LLMProbeTTFTHigh", "symptom", PROBE, ("slo.ttft_p95_seconds",)),
    Decision("LLMProbeTPOTHigh", "symptom", PROBE, ("slo.tpot_p95_seconds",)),
    Decision("LLMProbeFailureRatioHigh", "symptom", PROBE, ("slo.probe_failure_ratio",)),
    Decision("LLMProbeStreamStalls", "symptom", PROBE, ("alerting.stall_seconds",)),
    Decision("LLMProbeErrorBudgetBurn", "symptom", PROBE, ("slo.objective",)),
    Decision("LLMProbeTTFTPeakDrift", "symptom", PROBE, ("alerting.peak_drift_ratio",)),
    # A probe without data: the chain cannot decide for it, or its engine is down.
    Decision("LLMProbeAbsent", "cause", (*PROBE, ("engine_target", "engine"))),
    # Metrics that do not answer: down when the probes fail too, else unobservable.
    Decision("LLMEngineDown", "cause", (*ENGINE, ("engine_target", "engine"))),
    Decision("LLMEngineCapacityBound", "cause", ENGINE),
    Decision("LLMEngineComputeBound", "cause", ENGINE),
    Decision("LLMEngineKVCacheSaturated", "cause", ENGINE),
    Decision("LLMEngineImbalance", "cause", RANK),
    Decision("LLMEngineFrontendBound", "cause", ENGINE),
    Decision("LLMEngineKVTransferSlow", "cause", ENGINE),
    Decision("LLMEnginePrefixCacheMiss", "cause", ENGINE),
    Decision("LLMEngineSpecDecodeAcceptance", "cause", ENGINE),
    Decision("LLMPathPacketLoss", "cause", PATH),
    # The probe's own TCP stream (TCP_INFO): loss on its carrier though ICMP may be clean;
    # a loss verdict on the carrier explains it, and a probe-scoped one needs it.
    Decision("LLMProbeStreamPacketLoss", "cause", (*PROBE, ("carrier", "carrier"))),
    Decision("LLMProbeConnectionSetupSlow", "cause", PROBE),
    Decision("LLMPathJitterHigh", "cause", PATH),
    Decision("LLMPathRouteDegraded", "cause", PATH),
    Decision("LLMPathLossPeakDrift", "cause", PATH),
    Decision("LLMClientsRetransmissionHigh", "cause", CARRIER),
    Decision("LLMGPUMemoryNearFull", "cause", GPU),
    Decision("LLMGPUThrottled", "cause", GPU),
    Decision("LLMGPUXidError", "cause", GPU),
    Decision("LLMHostCPUPressure", "cause", HOST),
    Decision("LLMHostMemoryPressure", "cause", HOST),
    Decision("LLMHostIOPressure", "cause", HOST),
    # A check that keeps failing leaves its layer unobserved.
    Decision("LLMExporterCheckFailing", "cause", (("carrier", "carrier"),)),
    Decision("LLMLatencyDiagnosis", "verdict"),
)
BY_ALERT: dict[str, Decision] = {d.alert: d for d in DECISIONS}
assert len(BY_ALERT) == len(DECISIONS), "one decision per alert name"
assert {a for c in CAUSES for a in (*c.pages, *c.answers)} <= {
    d.alert for d in DECISIONS if d.role == "cause"}, "every alert of the cause table is here"


def _takes_over(c: Cause, causes: Sequence[Cause]) -> bool:
    return any(a in causes or _takes_over(a, causes) for a in c.absorbs)


def _causes_of(alert: str) -> tuple[Cause, ...]:
    """The causes that page or answer ``alert``, then the deeper ones that take them over
    (long prompts make the queue; the split stays in evidence)."""
    own = tuple(c for c in CAUSES if alert in (*c.pages, *c.answers))
    return own + tuple(c for c in CAUSES if c not in own and _takes_over(c, own))


#: Alert -> the causes whose verdict answers it.
CAUSES_OF: dict[str, tuple[Cause, ...]] = {d.alert: _causes_of(d.alert) for d in DECISIONS}
#: Causes that page: a verdict of one must have one of its alerts pending or firing.
PAGING: frozenset[Cause] = frozenset(c for c in CAUSES if c.pages)


def _scope_fits(d: Decision, labels: Mapping[str, str], scope: Mapping[str, str]) -> bool:
    for label, key in d.scope:
        want = labels.get(label)
        if not want or key not in scope:
            continue  # the alert or the verdict does not narrow it: any fits
        if want not in scope[key].split(","):  # a GPU verdict names "0,1"
            return False
    return True


def explains(verdict: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether one verdict (its JSON) is the decision behind one alert (its labels)."""
    d = BY_ALERT.get(labels.get("alertname", ""))
    if d is None:
        return False
    scope = verdict.get("scope") or {}
    if d.role == "verdict":
        return (labels.get("layer"), labels.get("cause")) == (
            verdict.get("layer"), verdict.get("cause"))
    if d.role == "symptom":
        probe = labels.get("probe", "")
        engine = labels.get("engine_target", "")
        felt = bool(verdict.get("symptoms"))
        # An engine's cause is every probe's through that engine (its engine_target), felt
        # in the chain's window or not: the alert reads its own span (RATE), which is not
        # the chain's window, so a probe just under the line in one can be just over it in
        # the other, or have too few requests in the shorter one to be judged at all. The
        # verdict names the cause and the scope; which span felt it is the only difference.
        if engine and scope.get("engine") == engine:
            return True
        # Likewise the verdict that took over this probe's symptoms is its answer, whichever
        # of them it saw.
        return felt and any(
            (e.get("labels") or {}).get("probe") == probe
            for e in verdict.get("evidence") or ())
    if _cause(verdict) not in CAUSES_OF[d.alert]:
        return False
    return _scope_fits(d, labels, scope)


def muted(verdict: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether the generated Alertmanager config mutes this alert by another that the verdict
    is the decision behind: the user is paged once, with the verdict's cause (loss on a
    carrier mutes its probes' TTFT, whose 5m span may cross the SLO where the chain's window
    does not; a down engine mutes the capacity alert its last minutes' rates still raise)."""
    name = labels.get("alertname")
    return any(
        explains(verdict, {**{k: labels[k] for k in rule.equal if k in labels},
                           "alertname": rule.source})
        for rule in INHIBITIONS
        # The diagnosis's own alert mutes everything it names: no second opinion.
        if rule.source != DIAGNOSIS and name in rule.targets
        and all(k in labels for k in rule.equal if k not in FLEET))


def unmatched(alerts: Sequence[Mapping[str, str]], verdicts: Sequence[Mapping[str, Any]]
              ) -> list[str]:
    """Why the alerts pending or firing and the verdicts are not one answer ([] when they
    are): an alert no verdict explains, or a verdict of a paging cause without its alert."""
    out = []
    for a in alerts:
        if a.get("alertname") not in BY_ALERT:
            out.append(f"alert {a.get('alertname')} has no decision in the table")
        elif not any(explains(v, a) or muted(v, a) for v in verdicts):
            out.append(f"alert {show(a)} is explained by no verdict")
    for v in verdicts:
        cause = _cause(v)
        if cause is None or not cause.pages:
            continue
        # A cause named under its own line, because it is the part that grew where the
        # cause it takes over could not account for the time, pages as that cause.
        pages = (*cause.pages, *(p for c in cause.absorbs for p in c.pages))
        if not any(a.get("alertname") in pages and explains(v, a) for a in alerts):
            out.append(f"verdict {cause} {dict(v.get('scope') or {})} has no "
                       f"{' or '.join(pages)} pending or firing")
    return out


def _cause(verdict: Mapping[str, Any]) -> Cause | None:
    return BY_KEY.get((str(verdict.get("layer")), str(verdict.get("cause"))))


def show(labels: Mapping[str, str]) -> str:
    """An alert as a line of a test failure: its name and labels."""
    keep = {k: v for k, v in labels.items() if k not in ("alertname", "alertstate", "__name__")}
    return f"{labels.get('alertname')}{keep}"
