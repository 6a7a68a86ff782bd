"""One decision, two renderings: every generated alert and the chain finding it stands for.

An alert and a verdict are two answers to one question, so they must agree: the rule
generator reads each alert's threshold from here (``threshold(config)``), the chain reads
which causes page (``PAGING``) and so must be reported even before any SLO breaks, and the
lab holds the two to each other through ``explains`` (every alert pending or firing is one
of the verdicts' causes and scopes, and every verdict of a paging cause has its alert).

Kinds: ``cause`` (a layer's own numbers over the line: one chain cause, or a deeper cause
that absorbs it, see docs/diagnosis.md), ``symptom`` (what a probe's users feel: any verdict
that took over that probe's symptom explains it), ``verdict`` (the chain's own primary
verdict as a page). Monitoring reads config and metrics only, so the diagnosis package may
import this module without a circle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from exporter.metrics.names import FLEET
from exporter.monitoring.alertmanager import DIAGNOSIS, INHIBITIONS

if TYPE_CHECKING:
    from exporter.config.models import Config

Kind = Literal["cause", "symptom", "verdict"]
Cause = tuple[str, str]  # (layer, cause)


@dataclass(frozen=True)
class Decision:
    alert: str
    kind: Kind
    #: The config fields the alert and the chain compare against ("slo.loss_ratio"), the
    #: deciding one first; none for a yes/no fact (an XID, a series absent).
    source: tuple[str, ...]
    #: Alert label -> the verdict scope key it must equal (engine alerts call it target).
    scope: tuple[tuple[str, str], ...] = ()
    #: The chain causes this alert may stand for: its own first, then deeper ones that
    #: take the finding over (long prompts make the queue; the split stays in evidence).
    causes: tuple[Cause, ...] = ()
    #: Causes whose verdict must have this alert pending or firing (a verdict of a cause
    #: the alert covers only in part, a route change to an equal class, demands none).
    pages: tuple[Cause, ...] = ()

    def thresholds(self, config: Config) -> tuple[Any, ...]:
        out = []
        for path in self.source:
            value: Any = config
            for part in path.split("."):
                value = getattr(value, part)
            out.append(value)
        return tuple(out)


PROBE = (("probe", "probe"),)
ENGINE = (("target", "engine"),)
#: One data-parallel rank of an engine.
RANK = (*ENGINE, ("dp_rank", "dp_rank"))
PATH = (("carrier", "carrier"), ("target", "target"))
GPU = (("gpu", "gpu"),)
#: A carrier's real users: the carrier alone (they ride no chosen target).
CARRIER = (("carrier", "carrier"),)
SPLITS_OVER = (("gpu", "throttling"), ("gpu", "memory_full"), ("gpu", "xid_errors"),
               ("gpu", "underutilized"), ("gpu", "memory_bandwidth"),
               ("application", "long_prompts"))

DECISIONS: tuple[Decision, ...] = (
    Decision("LLMProbeTTFTHigh", "symptom", ("slo.ttft_p95_seconds",), PROBE),
    Decision("LLMProbeTPOTHigh", "symptom", ("slo.tpot_p95_seconds",), PROBE),
    Decision("LLMProbeFailureRatioHigh", "symptom", ("slo.probe_failure_ratio",), PROBE),
    Decision("LLMProbeStreamStalls", "symptom", ("alerting.stall_seconds",), PROBE),
    Decision("LLMProbeErrorBudgetBurn", "symptom", ("slo.objective",), PROBE),
    Decision("LLMProbeTTFTPeakDrift", "symptom", ("alerting.peak_drift_ratio",), PROBE),
    # A probe without data: the chain cannot decide for it, or its engine is down.
    Decision("LLMProbeAbsent", "cause", (), (*PROBE, ("engine_target", "engine")),
             (("exporter", "no_data"), ("engine", "down"))),
    # Metrics that do not answer: down when the probes fail too, else unobservable.
    Decision("LLMEngineDown", "cause", (), (*ENGINE, ("engine_target", "engine")),
             (("engine", "down"), ("exporter", "no_data")), (("engine", "down"),)),
    # A queue that is one rank's is that rank's imbalance (the split stays in evidence).
    Decision("LLMEngineCapacityBound", "cause", ("alerting.queue_share_ratio",), ENGINE,
             (("engine", "queueing"), ("engine", "kv_cache_pressure"), ("engine", "imbalance"),
              ("application", "client_concurrency"), ("application", "long_prompts")),
             (("engine", "queueing"),)),
    Decision("LLMEngineComputeBound", "cause",
             ("slo.ttft_p95_seconds", "slo.tpot_p95_seconds", "alerting.queue_share_ratio"), ENGINE,
             (("engine", "slow_prefill"), ("engine", "slow_decode"), *SPLITS_OVER),
             (("engine", "slow_prefill"), ("engine", "slow_decode"))),
    Decision("LLMEngineKVCacheSaturated", "cause", ("alerting.kv_cache_usage_ratio",), ENGINE,
             (("engine", "kv_cache_pressure"), ("application", "client_concurrency")),
             (("engine", "kv_cache_pressure"),)),
    Decision("LLMEngineImbalance", "cause",
             ("alerting.imbalance_ratio", "alerting.imbalance_min_waiting",
              "alerting.imbalance_kv_gap"), RANK,
             (("engine", "imbalance"),), (("engine", "imbalance"),)),
    # A route moved to a worse class is the deeper cause of loss on that path (premium
    # backbone to 163 with 1-3% loss), and the move itself drops packets in flight.
    Decision("LLMPathPacketLoss", "cause", ("slo.loss_ratio",), PATH,
             (("network", "packet_loss"), ("network", "peak_congestion"),
              ("network", "route_change")),
             (("network", "packet_loss"),)),
    # The probe's own TCP stream (TCP_INFO): loss on its carrier though ICMP may be clean;
    # a loss verdict on the carrier explains it, and a probe-scoped one needs it.
    Decision("LLMProbeStreamPacketLoss", "cause", ("slo.loss_ratio",),
             (*PROBE, ("carrier", "carrier")),
             (("network", "packet_loss"), ("network", "peak_congestion")),
             (("network", "packet_loss"),)),
    Decision("LLMPathJitterHigh", "cause", ("slo.jitter_seconds",), PATH,
             (("network", "jitter"),), (("network", "jitter"),)),
    Decision("LLMPathRouteDegraded", "cause", ("alerting.route_class_order",), PATH,
             (("network", "route_change"),)),
    Decision("LLMPathLossPeakDrift", "cause", ("alerting.peak_drift_ratio",), PATH,
             (("network", "peak_congestion"),)),
    # Real users' retransmissions are loss as TCP saw it: the path loss's line, over at
    # least a minimum of segments; congestion only the peak has takes the finding over.
    Decision("LLMClientsRetransmissionHigh", "cause",
             ("slo.loss_ratio", "alerting.clients_min_segments"), CARRIER,
             (("network", "packet_loss"), ("network", "peak_congestion")),
             (("network", "packet_loss"),)),
    Decision("LLMGPUMemoryNearFull", "cause", ("alerting.gpu_memory_ratio",), GPU,
             (("gpu", "memory_full"),), (("gpu", "memory_full"),)),
    Decision("LLMGPUThrottled", "cause",
             ("alerting.throttle_reasons", "alerting.throttle_share"), GPU,
             (("gpu", "throttling"),), (("gpu", "throttling"),)),
    Decision("LLMGPUXidError", "cause", (), GPU,
             (("gpu", "xid_errors"),), (("gpu", "xid_errors"),)),
    # A check that keeps failing leaves its layer unobserved.
    Decision("LLMExporterCheckFailing", "cause", (), (("carrier", "carrier"),),
             (("exporter", "no_data"),)),
    Decision("LLMLatencyDiagnosis", "verdict", ()),
)
BY_ALERT: dict[str, Decision] = {d.alert: d for d in DECISIONS}
assert len(BY_ALERT) == len(DECISIONS), "one decision per alert name"

#: Causes that page: the chain reports them whenever their own numbers are over the line,
#: whether or not a probe feels it yet (status ``degraded``).
PAGING: frozenset[Cause] = frozenset(c for d in DECISIONS for c in d.pages)
#: Causes some alert stands for: a finding of one of these whose own numbers are over the
#: line (Finding.own) is a verdict even while every probe is inside its SLO.
ALERTED: frozenset[Cause] = frozenset(
    c for d in DECISIONS if d.kind == "cause" for c in d.causes) - {("exporter", "no_data")}


def threshold(alert: str, config: Config, which: int = 0) -> Any:
    """The value ``alert`` compares against in ``config`` (``which``: of several)."""
    return BY_ALERT[alert].thresholds(config)[which]


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
    if d.kind == "verdict":
        return (labels.get("layer"), labels.get("cause")) == (
            verdict.get("layer"), verdict.get("cause"))
    if d.kind == "symptom":
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
    if (verdict.get("layer"), verdict.get("cause")) not in d.causes:
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
        cause = (str(v.get("layer")), str(v.get("cause")))
        if cause not in PAGING:
            continue
        owners = [d.alert for d in DECISIONS if cause in d.pages]
        if not any(a.get("alertname") in owners and explains(v, a) for a in alerts):
            out.append(f"verdict {cause[0]}/{cause[1]} {dict(v.get('scope') or {})} has no "
                       f"{' or '.join(owners)} pending or firing")
    return out


def show(labels: Mapping[str, str]) -> str:
    """An alert as a line of a test failure: its name and labels."""
    keep = {k: v for k, v in labels.items() if k not in ("alertname", "alertstate", "__name__")}
    return f"{labels.get('alertname')}{keep}"
