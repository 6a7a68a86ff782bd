"""The decision chain: symptom, network, engine, GPU, host, application, in that fixed order.

Pure: it reads one ``Observations`` and ``Thresholds`` and returns a ``Diagnosis``; no I/O and
no clock (the time is ``obs.at``), so both sources and the tests get the same answer from the
same numbers. The order is the field guides': tuning batch sizes while a carrier drops
packets is wasted work, so the network floor is measured before the engine is believed.

Every step is one shape: it reads the ``Case`` (the window, and what the steps before it
left) and returns an ``Outcome`` (its record, and the causes it implicates). Attribution:
after each step its findings take over the symptoms of the probes they can explain, in chain
order, so a mobile probe's TTFT explained by mobile loss is not reported again under the
engine. An engine time split (queueing, slow prefill, slow decode) says where the time goes,
not why: when the GPU or application step finds the why for that engine, it takes the split
over (``Cause.absorbs``), its numbers kept as evidence. A symptom nothing explains becomes
``exporter/no_data``: never a guess.

One answer with the alerts: a finding whose own numbers are over the line of an alert that
stands for its cause (``Cause.alerted``) is a verdict whether or not a probe feels it yet
(status ``degraded``), and a layer that cannot be observed is ``exporter/no_data`` scoped to
it. No finding is dropped because an earlier layer explains the same symptom: the primary is
the one that explains most of what users feel, the others follow in chain order.
"""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.causes import (
    COMPUTE,
    DOWN,
    FIRST_TOKEN,
    LAYERS,
    NO_DATA,
    SYMPTOMS,
    Cause,
    Symptom,
)
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.parts import BudgetPart, StreamPart
from exporter.diagnosis.result import (
    SCOPE_KEYS,
    Budget,
    Diagnosis,
    Evidence,
    Status,
    Step,
    StepResult,
    Verdict,
)
from exporter.diagnosis.steps import application, engine, gpu, host, network, symptom
from exporter.diagnosis.steps.base import Case, Finding, ProbeSymptoms, Standing
from exporter.diagnosis.steps.budget import ledger
from exporter.diagnosis.steps.words import probe_scope, secs
from exporter.diagnosis.thresholds import Thresholds

#: The steps in the field guides' order.
STEPS = (symptom, network, engine, gpu, host, application)


def diagnose(obs: Observations, thresholds: Thresholds | None = None) -> Diagnosis:
    """Run the chain over one window of observations."""
    case = Case.of(obs, thresholds or Thresholds())
    steps: list[Step] = []
    for s in STEPS:
        outcome = s.evaluate(case)
        for f in outcome.findings:
            # One its own step took over claims nothing: what it would is its taker's.
            if not f.taken_over:
                f.claim()
        case.findings.extend(outcome.findings)
        steps.append(outcome.step)
    healthy = steps[0].result is StepResult.RULED_OUT
    kept = [f for f in case.findings if not f.taken_over and _reportable(f, healthy)]
    verdicts = [_verdict(case, f) for f in _ordered(kept)]
    verdicts += _unobserved(case)
    budget = ledger(case)
    verdicts += _no_data(case, steps, {b.probe: b for b in budget})
    return Diagnosis(obs.at, case.window, obs.source, _status(case.sick, verdicts, steps),
                     tuple(verdicts), tuple(steps), budget=budget)


def _reportable(f: Finding, healthy: bool) -> bool:
    """A finding is a verdict when it explains a symptom, is a fault on its own, or its own
    numbers are over an alert's line; one no probe could show counts only when something is
    wrong."""
    if f.standing is Standing.FAULT or f.took or (
            f.standing is Standing.OVER_LINE and f.cause.alerted):
        return True
    if healthy:
        return False
    return f.standing is Standing.OVER_LINE or f.unseen


def _felt(f: Finding) -> int:
    """How much of what users feel a finding explains: the probe symptoms it took over."""
    return sum(len(t) for t in f.took.values())


def _ordered(findings: list[Finding]) -> list[Finding]:
    # The primary explains most of what users feel (of equals, a fault on its own, then the
    # first in chain order); the others follow in chain order, those users feel first, the
    # strongest first within a layer.
    def key(f: Finding) -> tuple[int, int, float]:
        felt = Standing.FAULT if f.took else f.standing
        return (felt, LAYERS.index(f.cause.layer), -f.strength)

    ordered = sorted(findings, key=key)
    if ordered:
        first = max(ordered, key=lambda f: (_felt(f), f.standing is Standing.FAULT,
                                            -ordered.index(f)))
        ordered.remove(first)
        ordered.insert(0, first)
    return ordered


def _phrase(ps: ProbeSymptoms, taken: set[Symptom]) -> str:
    parts = [ps.phrases[s] for s in SYMPTOMS if s in taken and s in ps.phrases]
    return f"the {ps.probe.probe} probe's " + " and ".join(parts)


def _of(cause: Cause, scope: dict[str, str], symptoms: tuple[Symptom, ...],
        confidence: float, summary: str, evidence: tuple[Evidence, ...]) -> Verdict:
    return Verdict(cause.layer, cause.name, scope, symptoms, confidence, summary, evidence,
                   cause.actions)


def _verdict(case: Case, f: Finding) -> Verdict:
    by_name = {ps.probe.probe: ps for ps in case.sick}
    claimed = [(by_name[n], t) for n, t in f.took.items() if n in by_name]
    symptoms = tuple(s for s in SYMPTOMS if any(s in t for _, t in claimed))
    summary = f.headline
    if not claimed and f.standing is Standing.OVER_LINE:
        if not case.judged:
            # Requests slower than the window is long (timeouts in a short window) leave
            # every probe under min_requests: that users feel nothing is not known.
            summary += (f"; no probe finished {case.thresholds.min_requests} requests in the "
                        "window, so whether users feel it is not known")
        elif not any(ps.breached for ps in case.sick):
            # Over the window, not "yet": the alerts' longer span may already hold a breach.
            summary += f"; no probe is past its SLO over the last {case.window}"
    if claimed:
        first = _phrase(*claimed[0])
        if len(claimed) > 1:
            others = len(claimed) - 1
            whose = "probe's" if others == 1 else "probes'"
            summary += f"; {first} (and {others} other {whose}) follow from it"
        else:
            summary += f"; {first} follows from it"
    evidence = list(f.evidence)
    for ps, _ in claimed:
        evidence.extend(e for e in ps.evidence if e not in evidence)
    confidence = min(0.99, f.strength + (0.05 if claimed else 0.0))
    if f.unseen and not claimed and f.standing is not Standing.FAULT:
        confidence *= 0.8  # no probe confirms users feel it
    # The scope is the cause's own (an engine's verdict names the engine, whichever probes
    # it slows), so the verdict's labels stay put while the slowed probes change.
    scope = {k: f.scope[k] for k in SCOPE_KEYS if f.scope.get(k)}
    return _of(f.cause, scope, symptoms, round(confidence, 3), summary + ".", tuple(evidence))


def _check_scope(check: str) -> dict[str, str] | None:
    """The scope of what a failing check leaves unobserved; None for probe and engine checks
    (a probe's own symptoms and alerts say it, an engine's verdict is _unobserved's)."""
    kind, _, rest = check.partition("/")
    if kind in ("probe", "engine"):
        return None
    if kind in ("path", "route"):
        carrier, _, target = rest.partition("/")
        return {"carrier": carrier, "target": target}
    return {}


def _unobserved(case: Case) -> list[Verdict]:
    """A layer that cannot be observed is no_data scoped to it, never healthy: an engine
    without metrics (LLMEngineDown pages for it while the API serves) takes over the open
    symptoms of its probes, and each other failing check is one verdict."""
    out: list[Verdict] = []
    by_engine = {e.engine: e for e in case.obs.engines}
    for name in case.unobservable:
        e = by_engine[name]
        if e.up is True and not case.failing("engine", name):
            continue  # metrics answer, some families are missing: the step says no_data
        mine = [ps for ps in case.sick if e in case.engines_of(ps.probe) and ps.open]
        symptoms = tuple(s for s in SYMPTOMS if any(s in ps.open for ps in mine))
        how = {None: "it has no metrics in the window",
               False: "its metrics endpoint does not answer while its API serves",
               True: "its metrics lack what the step needs"}[e.up]
        if case.failing("engine", name):
            how += f" (check engine/{name} fails)"
        summary = f"Engine {name} cannot be observed: {how}"
        if mine:
            summary += f"; {_phrase(mine[0], mine[0].open)} cannot be explained"
        evidence = [case.evidence(metrics.ENGINE_UP.name, 0 if e.up is False else 1,
                                  {"engine": name, "target": e.target}, 1)
                    ] if e.up is not None else []
        for ps in mine:
            evidence.extend(x for x in ps.evidence if x not in evidence)
            ps.open.clear()
        scope = {"engine": name, **({"site": e.site} if e.site else {})}
        out.append(_of(NO_DATA, scope, symptoms, 0.5, summary + ".", tuple(evidence)))
    for check in case.obs.failing_checks:
        where = _check_scope(check)
        if where is None:
            continue
        out.append(_of(NO_DATA, where, (), 0.5,
                       f"Check {check} fails: what it measures cannot be judged.", ()))
    return out


def _delivered_late(ps: ProbeSymptoms, b: Budget | None) -> str | None:
    """Why a slow stream is not the engine's: most of the probe's time per token is spent
    after the engine made the token (the stream's budget), whatever a deeper layer says."""
    if "tpot" not in ps.open or b is None or b.tpot is None:
        return None
    delivery, engine = b.stream.get(StreamPart.DELIVERY), b.stream.get(StreamPart.ENGINE)
    if delivery is None or engine is None or delivery <= engine:
        return None
    return (f"{secs(delivery)} of its {secs(b.tpot)} mean per output token is spent after the "
            f"engine made the token ({secs(engine)} a token on the engine's clock): the "
            "return path, the API server's streaming or a proxy, yet no path check names a "
            "network cause" + (f" on {ps.probe.carrier}" if ps.probe.carrier else ""))


def _where_it_sits(ps: ProbeSymptoms, b: Budget | None) -> list[str]:
    """Where an unexplained slow first token's or stream's time sits in the probe's budget:
    the part holding most of it, every measured part under its own line."""
    if b is None:
        return []
    first = _first_token_sits(ps, b)
    out = [first] if first else []
    engine = b.stream.get(StreamPart.ENGINE)
    if "tpot" in ps.open and b.tpot is not None and engine is not None:
        out.append(f"the engine makes each token in {secs(engine)} of its {secs(b.tpot)} mean "
                   "per output token, under the engine's inter-token line")
    return out


def _first_token_sits(ps: ProbeSymptoms, b: Budget) -> str | None:
    if not FIRST_TOKEN & set(ps.open):
        return None
    measured = [(str(k), v) for k, v in b.parts.items()
                if v is not None and k is not BudgetPart.REMAINDER]
    rest = b.parts.get(BudgetPart.REMAINDER) or 0.0
    listed = ", ".join(f"{k} {secs(v)}" for k, v in measured) or "no part measured"
    top, held = max(measured, key=lambda kv: kv[1], default=("", 0.0))
    if rest >= held:
        return (f"{secs(rest)} of its {secs(b.ttft)} mean first token lies outside every "
                f"measured part ({listed}): between the client and the engine's own clock "
                "(a proxy or gateway, the API server before the engine timed the request)")
    return (f"the {top} holds {secs(held)} of its {secs(b.ttft)} mean first token ({listed}, "
            f"{secs(rest)} unaccounted for), under that part's own line")


def _no_data(case: Case, steps: list[Step], budgets: dict[str, Budget]) -> list[Verdict]:
    """A verdict for each symptom no step explained: the data to decide is missing, or the
    time sits where no cause's line is crossed (the budget says where)."""
    out: list[Verdict] = []
    unconfigured = [s.step for s in steps if s.result is StepResult.NOT_CONFIGURED]
    blind = [s.step for s in steps[1:] if s.result is StepResult.NO_DATA]
    for ps in case.sick:
        if not ps.open:
            continue
        p = ps.probe
        why: list[str] = []
        gone = [e.engine for e in case.engines_of(p) if e.engine in case.unobservable]
        if gone:
            why.append(f"engine {', '.join(gone)} has no metrics in the window")
        failing = [c for c in case.obs.failing_checks if not c.startswith("probe/")]
        if failing:
            why.append(f"failing checks: {', '.join(sorted(failing))}")
        split = [e for e in case.splits if e.labels.get("probe") == p.probe]
        if split and not why:
            how = ("the engine's own timing of its requests" if "split" in split[0].labels
                   else "its mean TTFT less the engine's"
                   if split[0].metric == network.MEAN_SPLIT else "its TTFT P95 less the engine's")
            why.append(f"{split[0].value:.3g} s of its TTFT is spent between client and "
                       "engine (network or gateway), yet no path check names a network "
                       "cause" + (f" on {p.carrier}" if p.carrier else "") + f" ({how})")
        late = _delivered_late(ps, budgets.get(p.probe))
        if late:
            why.append(late)
        if blind and not why:
            why.append(f"no data for the {', '.join(blind)} step(s)")
        if not why:
            why += _where_it_sits(ps, budgets.get(p.probe))
        if not why:
            why.append("no step's data explains it")
        if unconfigured and COMPUTE & set(ps.open):
            why.append(f"no {' or '.join(unconfigured)} section is configured, so that layer "
                       "is not read")
        symptoms = tuple(s for s in SYMPTOMS if s in ps.open)
        what = _phrase(ps, ps.open)
        out.append(_of(NO_DATA, probe_scope(p), symptoms, 0.5,
                       f"{what[0].upper()}{what[1:]}, but the chain cannot name the cause: "
                       f"{'; '.join(why)}.", (*ps.evidence, *split)))
    return out


def _status(sick: list[ProbeSymptoms], verdicts: list[Verdict], steps: list[Step]) -> Status:
    causes = [(v.layer, v.cause) for v in verdicts]
    if all(s.result in (StepResult.NO_DATA, StepResult.NOT_CONFIGURED) for s in steps) and all(
            c == (NO_DATA.layer, NO_DATA.name) for c in causes):
        return "unknown"
    if not verdicts:
        return "healthy"
    if any(ps.breached for ps in sick) or (DOWN.layer, DOWN.name) in causes:
        return "failing"
    return "degraded"
