"""The decision chain: symptom, network, engine, GPU, application, in that fixed order.

Pure: it reads one ``Observations`` and ``Thresholds`` and returns a ``Diagnosis``; no I/O and
no clock (the time is ``obs.at``), so both sources and the tests get the same answer from the
same numbers. The order is the field guides': tuning batch sizes while a carrier drops
packets is wasted work, so the network floor is measured before the engine is believed.

Attribution: each step's findings take over the symptoms of the probes they can explain, in
chain order, so a mobile probe's TTFT explained by mobile loss is not reported again under
the engine. An engine time split (queueing, slow prefill, slow decode) says where the time
goes, not why: when the GPU or application step finds the why for that engine, the verdict
is that cause, with the split as its evidence. A symptom nothing explains becomes
``exporter/no_data``: never a guess.

One answer with the alerts: a finding whose own numbers are over the line of an alert
(``exporter/monitoring/findings.py``, the table the rule generator reads too) is a verdict
whether or not a probe feels it yet (status ``degraded``), and a layer that cannot be
observed is ``exporter/no_data`` scoped to it. No finding is dropped because an earlier
layer explains the same symptom: the primary is the one that explains most of what users
feel, the others follow in chain order.
"""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.actions import ACTIONS
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.result import (
    LAYERS,
    SCOPE_KEYS,
    Diagnosis,
    Evidence,
    Status,
    Step,
    Symptom,
    Verdict,
)
from exporter.diagnosis.steps import application, engine, gpu, network, symptom
from exporter.diagnosis.steps.base import Context, Finding, ProbeSymptoms, probe_scope
from exporter.diagnosis.thresholds import Thresholds
from exporter.monitoring.findings import ALERTED

SYMPTOM_ORDER: tuple[Symptom, ...] = ("ttft", "long_context", "tpot", "failures")


def diagnose(obs: Observations, thresholds: Thresholds | None = None) -> Diagnosis:
    """Run the chain over one window of observations."""
    ctx = Context.of(obs, thresholds or Thresholds())
    sym_step, sick, _ = symptom.evaluate(ctx)
    net_step, net_found, splits = network.evaluate(ctx, sick)
    for f in net_found:
        f.claim()
    eng_step, eng_found, states, missing = engine.evaluate(ctx, sick)
    for f in eng_found:
        f.claim()
    gpu_step, gpu_found, gpu_took = gpu.evaluate(ctx, states, eng_found)
    for f in gpu_found:
        f.claim()
    app_step, app_found, app_took = application.evaluate(ctx, sick, states, eng_found)
    for f in app_found:
        f.claim()
    eng_kept = [f for f in eng_found if f not in gpu_took and f not in app_took]
    steps = (sym_step, net_step, eng_step, gpu_step, app_step)
    findings = [*net_found, *eng_kept, *gpu_found, *app_found]
    healthy = sym_step.result == "ruled_out"
    kept = [f for f in findings if _reportable(f, healthy)]
    judged = sym_step.result != "no_data"
    verdicts = [_verdict(ctx, f, sick, judged) for f in _ordered(kept)]
    verdicts += _unobserved(ctx, sick, missing)
    verdicts += _no_data(ctx, sick, steps, missing, splits)
    return Diagnosis(obs.at, ctx.window, obs.source, _status(sick, verdicts, steps),
                     tuple(verdicts), steps)


def _reportable(f: Finding, healthy: bool) -> bool:
    """A finding is a verdict when it explains a symptom, is a fault on its own, or its own
    numbers are over the line; one no probe could show counts only when something is wrong."""
    if f.hard or f.claimed or (f.own and (f.layer, f.cause) in ALERTED):
        return True
    if healthy:
        return False
    return f.own or f.unobserved


def _felt(f: Finding) -> int:
    """How much of what users feel a finding explains: the probe symptoms it took over."""
    return sum(len(t) for t in f.claimed.values())


def _ordered(findings: list[Finding]) -> list[Finding]:
    # The primary explains most of what users feel (of equals, a fault on its own, then the
    # first in chain order); the others follow in chain order, those users feel first, the
    # strongest first within a layer.
    def key(f: Finding) -> tuple[int, int, float]:
        felt = 0 if (f.claimed or f.hard) else 1 if f.own else 2
        return (felt, LAYERS.index(f.layer), -f.strength)

    ordered = sorted(findings, key=key)
    if ordered:
        first = max(ordered, key=lambda f: (_felt(f), f.hard, -ordered.index(f)))
        ordered.remove(first)
        ordered.insert(0, first)
    return ordered


def _phrase(ps: ProbeSymptoms, taken: set[Symptom]) -> str:
    parts = [ps.phrases[s] for s in SYMPTOM_ORDER if s in taken and s in ps.phrases]
    return f"the {ps.probe.probe} probe's " + " and ".join(parts)


def _verdict(ctx: Context, f: Finding, sick: list[ProbeSymptoms], judged: bool) -> Verdict:
    """``judged``: some probe finished enough requests in the window to be held to its SLO."""
    by_name = {ps.probe.probe: ps for ps in sick}
    claimed = [(by_name[n], t) for n, t in f.claimed.items() if n in by_name]
    symptoms = tuple(s for s in SYMPTOM_ORDER if any(s in t for _, t in claimed))
    summary = f.headline
    if not claimed and f.own and not f.hard:
        if not judged:
            # Requests slower than the window is long (timeouts in a short window) leave
            # every probe under min_requests: that users feel nothing is not known.
            summary += (f"; no probe finished {ctx.th.min_requests} requests in the window, "
                        "so whether users feel it is not known")
        elif not any(ps.breached for ps in sick):
            # Over the window, not "yet": the alerts' longer span may already hold a breach.
            summary += f"; no probe is past its SLO over the last {ctx.window}"
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
    if f.unobserved and not claimed and not f.hard:
        confidence *= 0.8  # no probe confirms users feel it
    # The scope is the cause's own (an engine's verdict names the engine, whichever probes
    # it slows), so the verdict's labels stay put while the slowed probes change.
    scope = {k: f.scope[k] for k in SCOPE_KEYS if f.scope.get(k)}
    return Verdict(f.layer, f.cause, scope, symptoms, round(confidence, 3),
                   summary + ".", tuple(evidence), ACTIONS[f.layer][f.cause])


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


def _unobserved(ctx: Context, sick: list[ProbeSymptoms], missing: list[str]) -> list[Verdict]:
    """A layer that cannot be observed is no_data scoped to it, never healthy: an engine
    without metrics (LLMEngineDown pages for it while the API serves) takes over the open
    symptoms of its probes, and each other failing check is one verdict."""
    out: list[Verdict] = []
    by_engine = {e.engine: e for e in ctx.obs.engines}
    for name in missing:
        e = by_engine[name]
        if e.up is True and not ctx.failing("engine", name):
            continue  # metrics answer, some families are missing: the step says no_data
        mine = [ps for ps in sick if e in ctx.engines_of(ps.probe) and ps.open]
        symptoms = tuple(s for s in SYMPTOM_ORDER if any(s in ps.open for ps in mine))
        how = {None: "it has no metrics in the window",
               False: "its metrics endpoint does not answer while its API serves",
               True: "its metrics lack what the step needs"}[e.up]
        if ctx.failing("engine", name):
            how += f" (check engine/{name} fails)"
        summary = f"Engine {name} cannot be observed: {how}"
        if mine:
            summary += f"; {_phrase(mine[0], mine[0].open)} cannot be explained"
        evidence = [ctx.ev(metrics.ENGINE_UP.name, 0 if e.up is False else 1,
                           {"engine": name, "target": e.target}, 1)] if e.up is not None else []
        for ps in mine:
            evidence.extend(x for x in ps.evidence if x not in evidence)
            ps.open.clear()
        scope = {"engine": name, **({"site": e.site} if e.site else {})}
        out.append(Verdict("exporter", "no_data", scope, symptoms, 0.5, summary + ".",
                           tuple(evidence), ACTIONS["exporter"]["no_data"]))
    for check in ctx.obs.failing_checks:
        where = _check_scope(check)
        if where is None:
            continue
        out.append(Verdict("exporter", "no_data", where, (), 0.5,
                           f"Check {check} fails: what it measures cannot be judged.", (),
                           ACTIONS["exporter"]["no_data"]))
    return out


def _no_data(ctx: Context, sick: list[ProbeSymptoms], steps: tuple[Step, ...],
             missing: list[str], splits: list[Evidence]) -> list[Verdict]:
    """A verdict for each symptom no step explained: the data to decide is missing."""
    out: list[Verdict] = []
    blind = [s.step for s in steps[1:] if s.result == "no_data"]
    for ps in sick:
        if not ps.open:
            continue
        p = ps.probe
        scope = probe_scope(p)
        why: list[str] = []
        gone = [e.engine for e in ctx.engines_of(p) if e.engine in missing]
        if gone:
            why.append(f"engine {', '.join(gone)} has no metrics in the window")
        failing = [c for c in ctx.obs.failing_checks if not c.startswith("probe/")]
        if failing:
            why.append(f"failing checks: {', '.join(sorted(failing))}")
        split = [e for e in splits if e.labels.get("probe") == p.probe]
        if split and not why:
            how = ("the engine's own timing of its requests" if "split" in split[0].labels
                   else "its mean TTFT less the engine's" if split[0].metric == network.MEAN_SPLIT
                   else "its TTFT P95 less the engine's")
            why.append(f"{split[0].value:.3g} s of its TTFT is spent between client and "
                       "engine (network or gateway), yet no path check names a network "
                       "cause" + (f" on {p.carrier}" if p.carrier else "") + f" ({how})")
        if blind and not why:
            why.append(f"no data for the {', '.join(blind)} step(s)")
        if not why:
            why.append("no step's data explains it")
        symptoms = tuple(s for s in SYMPTOM_ORDER if s in ps.open)
        out.append(Verdict(
            "exporter", "no_data", scope, symptoms, 0.5,
            f"{_phrase(ps, ps.open)[0].upper()}{_phrase(ps, ps.open)[1:]}, but the chain "
            f"cannot name the cause: {'; '.join(why)}.",
            (*ps.evidence, *split), ACTIONS["exporter"]["no_data"]))
    return out


def _status(sick: list[ProbeSymptoms], verdicts: list[Verdict], steps: tuple[Step, ...]
            ) -> Status:
    if all(s.result == "no_data" for s in steps) and all(
            v.cause == "no_data" for v in verdicts):
        return "unknown"
    if not verdicts:
        return "healthy"
    if any(ps.breached for ps in sick) or any(v.cause == "down" for v in verdicts):
        return "failing"
    return "degraded"
