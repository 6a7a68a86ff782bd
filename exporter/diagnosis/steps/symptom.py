"""Step 1: classify the symptom of every probe (per carrier and vantage point) against its
SLO and its own off-peak baseline. Nothing found here and nothing drifting: healthy."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.causes import Failure, Symptom
from exporter.diagnosis.observations import ProbeWindow
from exporter.diagnosis.result import Evidence, Step, StepResult
from exporter.diagnosis.steps.base import Case, Outcome, ProbeSymptoms
from exporter.diagnosis.steps.words import pct, probe_labels, secs

OK = metrics.ProbeOutcome.OK.value
_O = metrics.ProbeOutcome
#: Probe outcome -> how it failed, so that only a cause that can produce it claims a probe's
#: failures (a 429 is rate limiting, never a slow engine).
FAILURE_KINDS: dict[str, Failure] = {
    _O.RATE_LIMITED: "limited",
    # A connection that times out is one that could not be set up: the network's or a dead
    # engine's, never a slow answer's.
    _O.TIMEOUT_CONNECT: "connect", _O.CONNECT_ERROR: "connect",
    _O.TIMEOUT_FIRST_TOKEN: "timeout", _O.TIMEOUT_TOTAL: "timeout",
    _O.HTTP_4XX: "server", _O.HTTP_5XX: "server",
    _O.STREAM_RESET: "stream", _O.STREAM_ERROR: "stream", _O.PROTOCOL_ERROR: "stream",
    _O.EMPTY: "stream",
}


def failures(p: ProbeWindow) -> int:
    return sum(n for outcome, n in p.outcomes.items() if outcome != OK)


def _latency(case: Case, p: ProbeWindow, kind: Symptom, name: str, metric: str,
             value: float | None, slo: float, baseline: float | None,
             found: dict[Symptom, str], evidence: list[Evidence], cleared: list[Evidence]
             ) -> bool:
    """One latency statistic against the SLO and the drift line; True when breached."""
    if value is None:
        return False
    e = case.evidence(metric, value, probe_labels(p), slo, baseline)
    if value > slo:
        found[kind] = f"{name} {secs(value)} over its {secs(slo)} SLO"
        evidence.append(e)
        return True
    if baseline is not None and baseline > 0 and value > baseline * case.thresholds.drift_ratio:
        # Under the SLO but drifting: worth a look before it breaches, never a page.
        found[kind] = (f"{name} {secs(value)} is {value / baseline:.1f}x its off-peak "
                       f"{secs(baseline)}")
        evidence.append(e)
        return False
    cleared.append(e)
    return False


def probe_symptoms(case: Case, p: ProbeWindow, cleared: list[Evidence],
                   failures_only: bool = False) -> ProbeSymptoms | None:
    """``failures_only``: the probe's check failed, so its latencies are not the window's;
    the outcomes of the requests it finished are, and are judged."""
    lines = case.thresholds
    found: dict[Symptom, str] = {}
    evidence: list[Evidence] = []
    breached = False
    if not failures_only:
        breached = _latencies(case, p, found, evidence, cleared)
    ratio = failures(p) / p.requests
    for outcome, n in sorted(p.outcomes.items()):
        if outcome != OK and n:
            e = case.evidence(metrics.PROBE_REQUESTS.name, n / p.requests,
                              {**probe_labels(p), "outcome": outcome}, lines.failure_ratio)
            (evidence if ratio > lines.failure_ratio else cleared).append(e)
    how: Failure | None = None
    if ratio > lines.failure_ratio:
        worst = max((o for o in p.outcomes if o != OK), key=lambda o: p.outcomes[o])
        found["failures"] = f"failure ratio {pct(ratio)} (mostly {worst})"
        how = FAILURE_KINDS.get(worst, "server")
        breached = True
    if not found:
        return None
    return ProbeSymptoms(p, tuple(found), breached, tuple(evidence), found, how)


def _latencies(case: Case, p: ProbeWindow, found: dict[Symptom, str],
               evidence: list[Evidence], cleared: list[Evidence]) -> bool:
    """TTFT, TPOT and stalls against their lines; True when one is breached."""
    lines = case.thresholds
    # A long-context probe's slow first token is its own symptom (slow long-context loads):
    # it points at prefill and prompt size before the network.
    first: Symptom = "long_context" if p.profile == "long_context" else "ttft"
    ttft_name = "long-context TTFT P95" if first == "long_context" else "TTFT P95"
    breached = _latency(case, p, first, ttft_name, metrics.PROBE_TTFT.name, p.ttft_p95,
                        p.slo_ttft, p.ttft_p95_baseline, found, evidence, cleared)
    breached |= _latency(case, p, "tpot", "TPOT P95", metrics.PROBE_TPOT.name, p.tpot_p95,
                         p.slo_tpot, p.tpot_p95_baseline, found, evidence, cleared)
    # Choppy output: a P99 gap or counted stalls past the stall line, whatever the mean says.
    if p.itl_p99 is not None:
        e = case.evidence(metrics.PROBE_ITL.name, p.itl_p99, probe_labels(p),
                          lines.stall_seconds)
        if p.itl_p99 > lines.stall_seconds or p.stalls > 0:
            found.setdefault("tpot", f"inter-token P99 {secs(p.itl_p99)} with {p.stalls} "
                             f"stall(s) over {secs(lines.stall_seconds)}")
            evidence.append(e)
            breached = True
        else:
            cleared.append(e)
    elif p.stalls > 0:
        found.setdefault("tpot", f"{p.stalls} stall(s) over {secs(lines.stall_seconds)}")
        evidence.append(case.evidence(metrics.PROBE_STALL.name, p.stalls, probe_labels(p), 0))
        breached = True
    return breached


def evaluate(case: Case) -> Outcome:
    """Leaves the symptomatic probes (``case.sick``) and whether any probe had enough data
    to be judged (``case.judged``)."""
    cleared: list[Evidence] = []
    for p in case.obs.probes:
        # Too few requests make a P95 a guess.
        if p.requests < case.thresholds.min_requests:
            continue
        case.judged = True
        # A probe check fails when its requests do: then its latencies are not the window's,
        # but the outcomes it counted are, and failures are never healthy.
        ps = probe_symptoms(case, p, cleared, failures_only=case.failing("probe", p.probe))
        if ps is not None:
            case.sick.append(ps)
    if case.sick:
        # Symptoms are no cause's findings: the step is implicated by their evidence.
        return Outcome(Step("symptom", StepResult.IMPLICATED,
                            tuple(e for s in case.sick for e in s.evidence)), [])
    return Outcome.of("symptom", [], cleared, case.judged)
