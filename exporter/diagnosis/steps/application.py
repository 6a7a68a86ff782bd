"""Step 6: the application: prompts too long for the TTFT SLO (grown past their baseline or
not), 429s, more requests at the same capacity, client timeouts shorter than a normal server
answer."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.causes import (
    CLIENT_CONCURRENCY,
    CLIENT_TIMEOUTS,
    FIRST_TOKEN,
    LONG_PROMPTS,
    PREFIX_CACHE_MISS,
    RATE_LIMITED,
)
from exporter.diagnosis.observations import EngineWindow
from exporter.diagnosis.result import Evidence
from exporter.diagnosis.steps.base import Case, EngineState, Finding, Outcome, ProbeSymptoms
from exporter.diagnosis.steps.words import pct, probe_labels, probe_scope, secs, strength

TIMEOUTS = ("timeout_first_token", "timeout_total")
PROMPT_MEAN = (f"rate({metrics.ENGINE_PROMPT_TOKENS.name}) / "
               f"rate({metrics.ENGINE_REQUESTS_FINISHED.name})")
RATE = f"rate({metrics.ENGINE_REQUESTS_FINISHED.name})"
USERS_PROMPT = f"{PROMPT_MEAN}, the probes' own requests left out"
USERS_RATE = f"{RATE}, the probes' own requests left out"
PREFILL_RATE = (f"rate({metrics.ENGINE_PROMPT_TOKENS.name}) / "
                f"rate({metrics.ENGINE_PREFILL_TIME.name}_sum)")


#: Probe outcomes of requests that never reached the engine: the rest did (a timed-out or
#: reset request was admitted, prefilled and counted finished as aborted).
NOT_SERVED = frozenset((metrics.ProbeOutcome.TIMEOUT_CONNECT.value,
                        metrics.ProbeOutcome.CONNECT_ERROR.value,
                        metrics.ProbeOutcome.RATE_LIMITED.value))


def users_prompt(case: Case, e: EngineWindow) -> float | None:
    """Prompt tokens per request of the engine's users: the engine's mean without the
    requests of the exporter's own probes (short ones would dilute it, a long-context one
    would pass for a user's long prompt). None where what is left is under min_requests or
    within the probes' in-flight requests: the probes are all the engine serves (the
    remainder is the window's edges, where the engine and the probes count a request a
    scrape apart), and there are no users' prompts to blame."""
    if not e.prompt_tokens_mean or e.requests < 1:
        return None
    tokens, requests = e.prompt_tokens_mean * e.requests, e.requests
    linked = 0
    for p in case.obs.probes:
        if e in case.engines_of(p) and p.prompt_tokens_mean is not None:
            served = sum(n for o, n in p.outcomes.items() if o not in NOT_SERVED)
            tokens, requests = tokens - p.prompt_tokens_mean * served, requests - served
            linked += 1
    # A probe runs one request at a time, so at each edge of the window the engine and the
    # probe may disagree by one of its requests: a remainder within that is the probes'.
    if requests < case.thresholds.min_requests or requests <= 2 * linked:
        return None
    return tokens / requests if tokens > 0 else e.prompt_tokens_mean


def users_prompt_baseline(case: Case, e: EngineWindow) -> float | None:
    """The users' prompt tokens per request off-peak: the engine's off-peak mean less the
    linked probes' (each its mean prompt at its off-peak rate), as ``users_prompt`` is the
    window's. None where a linked probe's off-peak numbers are unknown, or where the probes
    were nearly all the engine served off-peak."""
    if not e.prompt_tokens_baseline or not e.request_rate_baseline:
        return None
    tokens = e.prompt_tokens_baseline * e.request_rate_baseline
    rate = e.request_rate_baseline
    for p in case.obs.probes:
        if e not in case.engines_of(p):
            continue
        if p.prompt_tokens_baseline is None or p.ok_rate_baseline is None:
            return None  # prompt_growth() then reads the engine's mean instead
        tokens -= p.prompt_tokens_baseline * p.ok_rate_baseline
        rate -= p.ok_rate_baseline
    # Users under a tenth of the requests: what is left is the counts' edges, not a mean.
    if rate < 0.1 * e.request_rate_baseline or tokens <= 0:
        return None
    return tokens / rate


def prompt_growth(case: Case, e: EngineWindow) -> tuple[float | None, float | None, str]:
    """(prompt tokens per request now, off-peak, the statistic's name): the users' own,
    probes left out, where every linked probe's off-peak rate is known (None where the
    users were too few then, or are now); else the engine's mean over all it served."""
    linked = [p for p in case.obs.probes if e in case.engines_of(p)]
    if linked and all(p.ok_rate_baseline is not None for p in linked):
        return users_prompt(case, e), users_prompt_baseline(case, e), USERS_PROMPT
    return e.prompt_tokens_mean, e.prompt_tokens_baseline, PROMPT_MEAN


def rate_growth(case: Case, e: EngineWindow) -> tuple[float | None, float | None, str]:
    """(requests per second now, off-peak, the statistic's name): the users' own, the
    linked probes' requests left out, where every linked probe's off-peak rate is known;
    else the engine's rate over all it served. The probes run at a rate of their own, which
    falls as answers slow: counted in, they hide the users' growth that slowed them. Users
    off-peak under a tenth of the engine's requests are counted as that tenth, so growth
    from next to nothing is judged against something."""
    linked = [p for p in case.obs.probes if e in case.engines_of(p)]
    now, base = e.request_rate, e.request_rate_baseline
    if not linked or any(p.ok_rate_baseline is None for p in linked) or now is None \
            or not base:
        return now, base, RATE
    served = sum(n for p in linked for o, n in p.outcomes.items() if o not in NOT_SERVED)
    users = max(0.0, now - served / case.obs.window)
    before = base - sum(p.ok_rate_baseline or 0.0 for p in linked)
    return users, max(before, 0.1 * base), USERS_RATE


def probes_prompt(case: Case, e: EngineWindow) -> float | None:
    """The longest mean prompt of the probes linked to the engine: a prompt the product
    itself sends as an ordinary request, so a users' prompt no longer than it (times
    ``prompt_growth``) is not long, however slow the engine is at it."""
    means = [p.prompt_tokens_mean for p in case.obs.probes
             if p.prompt_tokens_mean and e in case.engines_of(p)]
    return max(means, default=None)


def prompt_cost(case: Case, st: EngineState) -> tuple[float, float, float, float] | None:
    """(the users' mean prompt, the seconds of prefill it alone costs, the prefill rate in
    tokens/s it is costed at, the window's own rate): the engine's fastest measured
    prefill, the window's where no history has one. None without the numbers. A judgement
    needing no baseline: a prompt that takes most of the first-token budget at the engine's
    best speed is too long for the SLO, whatever it was yesterday."""
    e = st.engine
    prompt = users_prompt(case, e)
    if prompt is None or not e.prefill_seconds or not e.prompt_tokens_mean:
        return None
    now = e.prompt_tokens_mean * e.requests / e.prefill_seconds
    rate = max(now, e.prefill_rate_max or 0.0)
    return prompt, prompt / rate, rate, now


def _long_prompts(case: Case, st: EngineState, grown: Finding | None,
                  users: tuple[float | None, float | None, str],
                  cleared: list[Evidence]) -> Finding | None:
    """Prompts too long for the TTFT SLO at the engine's prefill rate; growth over a
    baseline (``grown``) strengthens it, and alone still names it, unless the prefix cache
    stopped sparing prompts that did not grow."""
    e, lab = st.engine, {"engine": st.engine.engine, "target": st.engine.target}
    cost = prompt_cost(case, st)
    if cost is None:
        return grown
    prompt, seconds, rate, now = cost
    budget = case.thresholds.prompt_budget_share * st.slo_ttft
    was, base, _ = users
    ev = case.evidence(USERS_PROMPT, prompt, lab, budget * rate, base)
    # Without a history of a fast prefill, the rate is the window's own: a slow engine makes
    # any prompt cost the budget there. What tells the two apart is the probes' ordinary
    # prompt: the engine is as slow at it (slow_prefill) unless the users' are longer.
    ordinary = probes_prompt(case, e)
    longer = (ordinary is None or prompt > ordinary * case.thresholds.prompt_growth) and \
        prompt >= case.thresholds.long_prompt_tokens
    # A prefill slower than its best is the engine's doing: where the engine's TTFT, less
    # what the slowdown adds to the prompt, is back inside the SLO, the prompt costs budget
    # but the slowdown breaks the SLO (slow_prefill).
    slowed = prompt / now - seconds
    recovers = e.ttft_p95 is not None and e.ttft_p95 - slowed <= st.slo_ttft
    # Prompts as long as they were while the prefix cache spared most of them are not what
    # changed: the cache that stopped hitting is (engine/prefix_cache_miss, found before).
    missed = grown is None and any(f.cause is PREFIX_CACHE_MISS and f.scope.get("engine")
                                   == e.engine for f in case.findings)
    if not (st.slow_first and seconds > budget and longer) or recovers or missed:
        cleared.append(ev)
        return grown
    headline = (f"Engine {e.engine}'s users' prompts average {prompt:.0f} tokens: at "
                f"its prefill rate of {rate:.0f} tokens/s they alone take {secs(seconds)}, "
                f"{pct(seconds / st.slo_ttft)} of the {secs(st.slo_ttft)} TTFT SLO")
    evidence = [ev, case.evidence(PREFILL_RATE, rate, lab)]
    s = strength(seconds, budget)
    if grown is not None:
        grown.headline = f"{headline} ({(was or 0.0) / (base or 1.0):.1f}x the off-peak " \
                         f"{base or 0.0:.0f})"
        grown.evidence[:0] = evidence
        grown.strength = min(0.95, max(grown.strength, s) + 0.05)
        return grown
    return Finding(LONG_PROMPTS, {"engine": e.engine}, headline, evidence, s, st.probes)


def _engine_causes(case: Case, st: EngineState, cleared: list[Evidence]) -> list[Finding]:
    lines, e = case.thresholds, st.engine
    lab = {"engine": e.engine, "target": e.target}
    out: list[Finding] = []
    # The users' prompts, not the engine's mean: a mean over the probes' short requests
    # too moves with how many of each it served, and a shared prompt that stopped being
    # cached did not grow.
    users = prompt_growth(case, e)
    prompt, before, prompt_metric = users
    rate, rate_before, rate_metric = rate_growth(case, e)
    growths = (
        (LONG_PROMPTS, prompt, before, lines.prompt_growth, prompt_metric,
         "'s prompts average {v:.0f} tokens, {r:.1f}x the off-peak {b:.0f}"),
        (CLIENT_CONCURRENCY, rate, rate_before, lines.request_rate_growth, rate_metric,
         "'s users send {v:.3g} requests/s, {r:.1f}x the off-peak {b:.3g}/s at the same "
         "capacity"),
    )
    grown: Finding | None = None
    for cause, value, base, growth, metric, text in growths:
        if value is None or not base:
            continue
        ev = case.evidence(metric, value, lab, base * growth, base)
        if st.slow and value > base * growth:
            headline = f"Engine {e.engine}" + text.format(v=value, r=value / base, b=base)
            f = Finding(cause, {"engine": e.engine}, headline, [ev],
                        strength(value, base * growth), st.probes)
            if cause is LONG_PROMPTS:
                grown = f
            else:
                out.append(f)
        else:
            cleared.append(ev)
    long = _long_prompts(case, st, grown, users, cleared)
    return [long, *out] if long is not None else out


def _probe_causes(case: Case, ps: ProbeSymptoms, states: dict[str, EngineState],
                  cleared: list[Evidence]) -> list[Finding]:
    lines, p = case.thresholds, ps.probe
    lab = probe_labels(p)
    out: list[Finding] = []
    if p.prompt_tokens_mean is not None and p.prompt_tokens_baseline:
        base, grown = p.prompt_tokens_baseline, p.prompt_tokens_baseline * lines.prompt_growth
        e = case.evidence(metrics.PROBE_PROMPT_TOKENS.name, p.prompt_tokens_mean, lab, grown, base)
        if p.prompt_tokens_mean > grown and ps.open & FIRST_TOKEN:
            # The probe's own prompt grew (its config or template changed): its first token
            # pays for the extra prefill.
            out.append(Finding(
                LONG_PROMPTS, probe_scope(p),
                f"The {p.probe} probe's prompts average {p.prompt_tokens_mean:.0f} tokens, "
                f"{p.prompt_tokens_mean / base:.1f}x the off-peak {base:.0f}", [e],
                strength(p.prompt_tokens_mean, grown), (ps,), narrower=FIRST_TOKEN))
        else:
            cleared.append(e)
    refused = metrics.ProbeOutcome.RATE_LIMITED.value
    limited = p.outcomes.get(refused, 0)
    if limited:
        e = case.evidence(metrics.PROBE_REQUESTS.name, limited / p.requests,
                          {**lab, "outcome": refused}, lines.failure_ratio)
        if ps.failure in RATE_LIMITED.fails or limited / p.requests > lines.failure_ratio:
            out.append(Finding(
                RATE_LIMITED, probe_scope(p),
                f"The {p.probe} probe is rate limited: {pct(limited / p.requests)} of its "
                f"requests get 429", [e], strength(limited / p.requests, lines.failure_ratio, 0.75),
                (ps,)))
        else:
            cleared.append(e)
    timeouts = sum(p.outcomes.get(o, 0) for o in TIMEOUTS)
    engines = [states[e.engine] for e in case.engines_of(p) if e.engine in states]
    if timeouts and "failures" in ps.open and engines and not any(s.slow for s in engines):
        # The server answers within its SLO, yet the client gives up: its timeout is short.
        st = engines[0]
        ev = [case.evidence(metrics.PROBE_REQUESTS.name, timeouts / p.requests,
                            {**lab, "outcome": "timeout"}, lines.failure_ratio)]
        if st.engine.ttft_p95 is not None:
            ev.append(case.evidence(metrics.ENGINE_TTFT.name, st.engine.ttft_p95,
                                    {"engine": st.engine.engine}, st.slo_ttft,
                                    grid=st.engine.ttft_buckets))
        limit = f" (timeout {secs(p.timeout_total)})" if p.timeout_total else ""
        out.append(Finding(
            CLIENT_TIMEOUTS, probe_scope(p),
            f"The {p.probe} probe times out on {pct(timeouts / p.requests)} of requests"
            f"{limit} while engine {st.engine.engine} answers within its SLO", ev,
            strength(timeouts / p.requests, lines.failure_ratio), (ps,)))
    return out


def _one_limiter(case: Case, found: list[Finding]) -> list[Finding]:
    """429s come from in front of the engine, upstream of every probe: one finding per
    engine the limited probes reach (one for unlinked probes), the probes its evidence."""
    by_engine: dict[str, list[Finding]] = {}
    for f in found:
        engines = case.engines_of(f.probes[0].probe)
        by_engine.setdefault(engines[0].engine if engines else "", []).append(f)
    out = []
    for engine, group in by_engine.items():
        if len(group) == 1 and not engine:
            out.append(group[0])
            continue
        probes = tuple(p for f in group for p in f.probes)
        ratios = [e.value for f in group for e in f.evidence]
        who = f"engine {engine}'s" if engine else "the"
        headline = (f"Requests to {who} API are rate limited: {len(probes)} probe(s) get 429 "
                    f"on {pct(min(ratios))} to {pct(max(ratios))} of their requests"
                    if len(group) > 1 else group[0].headline)
        out.append(Finding(
            RATE_LIMITED, {"engine": engine} if engine else {}, headline,
            [e for f in group for e in f.evidence], max(f.strength for f in group), probes))
    return out


def evaluate(case: Case) -> Outcome:
    """A finding takes over the time splits of its engine it explains (``Cause.absorbs``),
    as a GPU finding does; both may take the same split over."""
    findings: list[Finding] = []
    cleared: list[Evidence] = []
    taken: list[Finding] = []
    engine_findings = [f for f in case.findings if f.cause.layer == "engine"]
    by_name = {st.engine.engine: st for st in case.engines}
    for st in case.engines:
        for f in _engine_causes(case, st, cleared):
            for ef in engine_findings:
                if ef.scope.get("engine") == st.engine.engine and \
                        ef.cause in f.cause.absorbs and ef not in taken:
                    f.absorb(ef)
                    taken.append(ef)
            findings.append(f)
    per_probe: list[Finding] = []
    for ps in case.sick:
        per_probe.extend(_probe_causes(case, ps, by_name, cleared))
    findings.extend(f for f in per_probe if f.cause is not RATE_LIMITED)
    findings.extend(_one_limiter(case, [f for f in per_probe if f.cause is RATE_LIMITED]))
    # Decided when there was anything to judge: a symptom's outcomes or an engine baseline.
    decided = bool(cleared) or bool(findings) or bool(case.sick)
    return Outcome.of("application", findings, cleared, decided)
