"""Step 1: classify the symptom of every probe (per carrier and vantage point) against its
SLO and its own off-peak baseline. Nothing found here and nothing drifting: healthy."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.observations import ProbeWindow
from exporter.diagnosis.result import Evidence, Step, Symptom
from exporter.diagnosis.steps.base import (
    FAILURE_KINDS,
    Context,
    ProbeSymptoms,
    pct,
    probe_labels,
    secs,
    step,
)

OK = metrics.ProbeOutcome.OK.value


def failures(p: ProbeWindow) -> int:
    return sum(n for outcome, n in p.outcomes.items() if outcome != OK)


def _latency(ctx: Context, p: ProbeWindow, kind: Symptom, name: str, metric: str,
             value: float | None, slo: float, baseline: float | None,
             found: dict[Symptom, str], evidence: list[Evidence], cleared: list[Evidence]
             ) -> bool:
    """One latency statistic against the SLO and the drift line; True when breached."""
    if value is None:
        return False
    e = ctx.ev(metric, value, probe_labels(p), slo, baseline)
    if value > slo:
        found[kind] = f"{name} {secs(value)} over its {secs(slo)} SLO"
        evidence.append(e)
        return True
    if baseline is not None and baseline > 0 and value > baseline * ctx.th.drift_ratio:
        # Under the SLO but drifting: worth a look before it breaches, never a page.
        found[kind] = (f"{name} {secs(value)} is {value / baseline:.1f}x its off-peak "
                       f"{secs(baseline)}")
        evidence.append(e)
        return False
    cleared.append(e)
    return False


def probe_symptoms(ctx: Context, p: ProbeWindow, cleared: list[Evidence]
                   ) -> ProbeSymptoms | None:
    th = ctx.th
    found: dict[Symptom, str] = {}
    evidence: list[Evidence] = []
    # A long-context probe's slow first token is its own symptom (slow long-context loads):
    # it points at prefill and prompt size before the network.
    first: Symptom = "long_context" if p.profile == "long_context" else "ttft"
    ttft_name = "long-context TTFT P95" if first == "long_context" else "TTFT P95"
    breached = _latency(ctx, p, first, ttft_name, metrics.PROBE_TTFT.name, p.ttft_p95,
                        p.slo_ttft, p.ttft_p95_baseline, found, evidence, cleared)
    breached |= _latency(ctx, p, "tpot", "TPOT P95", metrics.PROBE_TPOT.name, p.tpot_p95,
                         p.slo_tpot, p.tpot_p95_baseline, found, evidence, cleared)
    # Choppy output: a P99 gap or counted stalls past the stall line, whatever the mean says.
    if p.itl_p99 is not None:
        e = ctx.ev(metrics.PROBE_ITL.name, p.itl_p99, probe_labels(p), th.stall_seconds)
        if p.itl_p99 > th.stall_seconds or p.stalls > 0:
            found.setdefault("tpot", f"inter-token P99 {secs(p.itl_p99)} with {p.stalls} "
                             f"stall(s) over {secs(th.stall_seconds)}")
            evidence.append(e)
            breached = True
        else:
            cleared.append(e)
    elif p.stalls > 0:
        found.setdefault("tpot", f"{p.stalls} stall(s) over {secs(th.stall_seconds)}")
        evidence.append(ctx.ev(metrics.PROBE_STALL.name, p.stalls, probe_labels(p), 0))
        breached = True
    bad = failures(p)
    kind = ""
    ratio = bad / p.requests
    for outcome, n in sorted(p.outcomes.items()):
        if outcome != OK and n:
            e = ctx.ev(metrics.PROBE_REQUESTS.name, n / p.requests,
                       {**probe_labels(p), "outcome": outcome}, th.failure_ratio)
            (evidence if ratio > th.failure_ratio else cleared).append(e)
    if ratio > th.failure_ratio:
        worst = max((o for o in p.outcomes if o != OK), key=lambda o: p.outcomes[o])
        found["failures"] = f"failure ratio {pct(ratio)} (mostly {worst})"
        kind = FAILURE_KINDS.get(worst, "server")
        breached = True
    if not found:
        return None
    return ProbeSymptoms(p, tuple(found), breached, tuple(evidence), found, kind)


def evaluate(ctx: Context) -> tuple[Step, list[ProbeSymptoms], bool]:
    """The step, the symptomatic probes, and whether any probe had enough data."""
    sick: list[ProbeSymptoms] = []
    cleared: list[Evidence] = []
    decided = False
    for p in ctx.obs.probes:
        # Too few requests make a P95 a guess; a failing probe check means what we have
        # is not the window's.
        if p.requests < ctx.th.min_requests or ctx.failing("probe", p.probe):
            continue
        decided = True
        ps = probe_symptoms(ctx, p, cleared)
        if ps is not None:
            sick.append(ps)
    if sick:
        return step("symptom", "implicated", (e for s in sick for e in s.evidence)), sick, True
    return step("symptom", "ruled_out" if decided else "no_data", cleared), sick, decided
