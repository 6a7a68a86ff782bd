"""Step 5: the application: prompts grown past their baseline, 429s, more requests at the
same capacity, client timeouts shorter than a normal server answer."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.result import Evidence, Step, Symptom
from exporter.diagnosis.steps.base import (
    Context,
    Finding,
    ProbeSymptoms,
    conclude,
    pct,
    probe_labels,
    probe_scope,
    secs,
    strength,
)
from exporter.diagnosis.steps.engine import EngineState

FIRST: frozenset[Symptom] = frozenset(("ttft", "long_context"))
#: The engine split each application cause explains: long prompts make prefill slow and the
#: queue long; more clients at the same capacity make the queue long.
ABSORBS: dict[str, frozenset[str]] = {
    "long_prompts": frozenset(("slow_prefill", "queueing")),
    "client_concurrency": frozenset(("queueing", "kv_cache_pressure")),
}
TIMEOUTS = ("timeout_first_token", "timeout_total")
PROMPT_MEAN = (f"rate({metrics.ENGINE_PROMPT_TOKENS.name}) / "
               f"rate({metrics.ENGINE_REQUESTS_FINISHED.name})")
RATE = f"rate({metrics.ENGINE_REQUESTS_FINISHED.name})"


def _engine_causes(ctx: Context, st: EngineState, cleared: list[Evidence]) -> list[Finding]:
    th, e = ctx.th, st.engine
    lab = {"engine": e.engine, "target": e.target}
    out: list[Finding] = []
    growths = (
        ("long_prompts", e.prompt_tokens_mean, e.prompt_tokens_baseline, th.prompt_growth,
         PROMPT_MEAN, "'s prompts average {v:.0f} tokens, {r:.1f}x the "
         "off-peak {b:.0f}"),
        ("client_concurrency", e.request_rate, e.request_rate_baseline, th.request_rate_growth,
         RATE, " gets {v:.3g} requests/s, {r:.1f}x the "
         "off-peak {b:.3g}/s at the same capacity"),
    )
    for cause, value, base, growth, metric, text in growths:
        if value is None or not base:
            continue
        ev = ctx.ev(metric, value, lab, base * growth, base)
        if st.slow and value > base * growth:
            headline = f"Engine {e.engine}" + text.format(v=value, r=value / base, b=base)
            out.append(Finding("application", cause, {"engine": e.engine}, headline, [ev],
                               strength(value, base * growth), FIRST | {"tpot"}, st.probes,
                               unobserved=not st.probes, fails=frozenset(("timeout",))))
        else:
            cleared.append(ev)
    return out


def _probe_causes(ctx: Context, ps: ProbeSymptoms, states: dict[str, EngineState],
                  cleared: list[Evidence]) -> list[Finding]:
    th, p = ctx.th, ps.probe
    lab = probe_labels(p)
    out: list[Finding] = []
    if p.prompt_tokens_mean is not None and p.prompt_tokens_baseline:
        base, grown = p.prompt_tokens_baseline, p.prompt_tokens_baseline * th.prompt_growth
        e = ctx.ev(metrics.PROBE_PROMPT_TOKENS.name, p.prompt_tokens_mean, lab, grown, base)
        if p.prompt_tokens_mean > grown and ps.open & FIRST:
            # The probe's own prompt grew (its config or template changed): its first token
            # pays for the extra prefill.
            out.append(Finding(
                "application", "long_prompts", probe_scope(p),
                f"The {p.probe} probe's prompts average {p.prompt_tokens_mean:.0f} tokens, "
                f"{p.prompt_tokens_mean / base:.1f}x the off-peak {base:.0f}", [e],
                strength(p.prompt_tokens_mean, grown), FIRST, (ps,),
                fails=frozenset(("timeout",))))
        else:
            cleared.append(e)
    limited = p.outcomes.get(metrics.ProbeOutcome.RATE_LIMITED.value, 0)
    if limited:
        e = ctx.ev(metrics.PROBE_REQUESTS.name, limited / p.requests,
                   {**lab, "outcome": "rate_limited"}, th.failure_ratio)
        if ps.failure_kind == "rate_limited" or limited / p.requests > th.failure_ratio:
            out.append(Finding(
                "application", "rate_limited", probe_scope(p),
                f"The {p.probe} probe is rate limited: {pct(limited / p.requests)} of its "
                f"requests get 429", [e], strength(limited / p.requests, th.failure_ratio, 0.75),
                frozenset(("failures",)), (ps,), fails=frozenset(("rate_limited",))))
        else:
            cleared.append(e)
    timeouts = sum(p.outcomes.get(o, 0) for o in TIMEOUTS)
    engines = [states[e.engine] for e in ctx.engines_of(p) if e.engine in states]
    if timeouts and "failures" in ps.open and engines and not any(s.slow for s in engines):
        # The server answers within its SLO, yet the client gives up: its timeout is short.
        st = engines[0]
        ev = [ctx.ev(metrics.PROBE_REQUESTS.name, timeouts / p.requests,
                     {**lab, "outcome": "timeout"}, th.failure_ratio)]
        if st.engine.ttft_p95 is not None:
            ev.append(ctx.ev(metrics.ENGINE_TTFT.name, st.engine.ttft_p95,
                             {"engine": st.engine.engine}, st.slo_ttft))
        limit = f" (timeout {secs(p.timeout_total)})" if p.timeout_total else ""
        out.append(Finding(
            "application", "client_timeouts", probe_scope(p),
            f"The {p.probe} probe times out on {pct(timeouts / p.requests)} of requests"
            f"{limit} while engine {st.engine.engine} answers within its SLO", ev,
            strength(timeouts / p.requests, th.failure_ratio), frozenset(("failures",)),
            (ps,), fails=frozenset(("timeout",))))
    return out


def evaluate(ctx: Context, sick: list[ProbeSymptoms], states: list[EngineState],
             engine_findings: list[Finding]) -> tuple[Step, list[Finding], list[Finding]]:
    """The step, its findings, and the engine findings they absorbed (to drop)."""
    findings: list[Finding] = []
    cleared: list[Evidence] = []
    absorbed: list[Finding] = []
    by_name = {st.engine.engine: st for st in states}
    for st in states:
        for f in _engine_causes(ctx, st, cleared):
            for ef in engine_findings:
                if ef.scope.get("engine") == st.engine.engine and \
                        ef.cause in ABSORBS[f.cause] and ef not in absorbed:
                    f.absorb(ef)
                    f.own = f.own or ef.own
                    absorbed.append(ef)
            findings.append(f)
    for ps in sick:
        findings.extend(_probe_causes(ctx, ps, by_name, cleared))
    # Decided when there was anything to judge: a symptom's outcomes or an engine baseline.
    decided = bool(cleared) or bool(findings) or bool(sick)
    return conclude("application", findings, cleared, decided), findings, absorbed
