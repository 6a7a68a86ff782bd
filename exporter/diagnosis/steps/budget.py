"""The engine's share of the first token and of the stream, part by part: what a slow engine's
verdict accounts with. Where the time an engine adds before its first token goes (its API
server before it queues, a KV handover from a prefill instance, a prefill the prefix cache
no longer spares), and why its stream slowed (drafts accepted less); each part judged on its
own line and said against the excess over the SLO it is to explain."""

from __future__ import annotations

from dataclasses import dataclass, replace

from exporter import metrics
from exporter.diagnosis.causes import (
    FRONTEND,
    KV_TRANSFER,
    PREFIX_CACHE_MISS,
    SPEC_DECODE,
    Cause,
)
from exporter.diagnosis.observations import EngineWindow, ProbeWindow
from exporter.diagnosis.parts import BudgetPart, StreamPart
from exporter.diagnosis.result import Budget, Evidence
from exporter.diagnosis.steps.base import Case, EngineState
from exporter.diagnosis.steps.words import pct, secs, strength

#: Evidence names: the families read and the arithmetic done on them.
FRONTEND_PART = (f"({metrics.ENGINE_E2E.name} - queue - prefill - decode) per request, "
                 "before the engine queued it")
PROCESS_CPU = f"rate({metrics.ENGINE_PROCESS_CPU.name})"
KV_PART = f"{metrics.ENGINE_KV_TRANSFER_TIME.name} mean"
DEFERRED = f"{metrics.ENGINE_REQUESTS_WAITING_BY_REASON.name}{{reason=\"deferred\"}} mean"
EXTERNAL = (f"{metrics.ENGINE_PROMPT_TOKENS_BY_SOURCE.name}{{source=\"external_kv_transfer\"}}"
            " share")
PREFIX_HITS = (f"{metrics.ENGINE_PREFIX_CACHE_HITS.name} / "
               f"{metrics.ENGINE_PREFIX_CACHE_QUERIES.name}")
PREFILL_MEAN = f"{metrics.ENGINE_PREFILL_TIME.name} mean"
ACCEPTANCE = (f"{metrics.ENGINE_SPEC_ACCEPTED_TOKENS.name} / "
              f"{metrics.ENGINE_SPEC_DRAFT_TOKENS.name}")


@dataclass(frozen=True)
class Why:
    """A deeper cause of an engine's slow first token or stream: the clause that names it,
    its evidence, how far past its line it is, and the seconds of the first token its part
    holds (what tells which of two parts over their lines is the one that grew)."""

    cause: Cause
    headline: str
    evidence: list[Evidence]
    strength: float
    seconds: float = 0.0


def over_first(st: EngineState) -> float | None:
    """How far the engine's own TTFT P95 is over its SLO: the excess a verdict accounts for."""
    e = st.engine
    return None if e.ttft_p95 is None else max(0.0, e.ttft_p95 - st.slo_ttft)


def accounts(part: float, over: float | None) -> str:
    """The clause that says how much of the excess a part covers."""
    if not over:
        return ""
    return f"; that is {secs(part)} of the {secs(over)} the TTFT P95 is over its SLO"


def first_token(case: Case, st: EngineState, lab: dict[str, str]) -> list[Why]:
    """The parts of the engine's first token over their own lines, each a cause: a prefill
    the prefix cache no longer spares, and the larger of the API server and a KV handover.
    The prefix cache's takes the API server's over where it holds more seconds (the longer
    prefill and the queue that forms behind it): a request waits out the longer prefill
    steps before the engine queues it, which reads as API-server time (its number joins
    the miss's evidence). The most seconds first; []
    when no part is over its line."""
    e, lines, slo = st.engine, case.thresholds, st.slo_ttft
    over = over_first(st)
    found: list[Why] = []
    front = e.frontend_mean
    if front is not None and front > lines.frontend_share * slo:
        found.append(_frontend(case, st, lab, front))
    kv = e.kv_transfer_mean
    if kv is not None and kv > lines.kv_transfer_share * slo:
        line = lines.kv_transfer_share * slo
        ev = [case.evidence(KV_PART, kv, lab, line)]
        if e.deferred is not None:
            ev.append(case.evidence(DEFERRED, e.deferred, lab))
        if e.external_kv_share is not None:
            ev.append(case.evidence(EXTERNAL, e.external_kv_share, lab))
        found.append(Why(KV_TRANSFER, f"Engine {e.engine} waits {secs(kv)} per request for "
                         f"its KV from the prefill instance ({e.deferred or 0:.3g} requests "
                         f"deferred on average){accounts(kv, over)}", ev, strength(kv, line), kv))
    most = max(found, key=lambda w: w.seconds, default=None)
    prefix = _prefix(case, st, lab, over)
    if prefix is not None and most is not None and most.cause is FRONTEND \
            and most.seconds <= prefix.seconds:
        return [replace(prefix, evidence=[*prefix.evidence, most.evidence[0]])]
    return sorted((w for w in (most, prefix) if w is not None), key=lambda w: -w.seconds)


def _frontend(case: Case, st: EngineState, lab: dict[str, str], front: float) -> Why:
    e, line = st.engine, case.thresholds.frontend_share * st.slo_ttft
    ev = [case.evidence(FRONTEND_PART, front, lab, line)]
    cpu = ""
    if e.process_cpu is not None:
        ev.append(case.evidence(PROCESS_CPU, e.process_cpu, lab, 1.0))
        cpu = f", its process at {e.process_cpu:.2f} of a core"
    return Why(FRONTEND, f"Engine {e.engine}'s API server holds each request {secs(front)} "
               f"before queueing it{cpu}{accounts(front, over_first(st))}", ev,
               strength(front, line), front)


def instead_of_prefill(case: Case, st: EngineState, lab: dict[str, str], prefill: float
                       ) -> Why | None:
    """The API server, where it holds requests longer than their prefill takes: a slow
    first token whose prefill cannot account for it is the part that grew, under its line
    or not."""
    front = st.engine.frontend_mean
    return None if front is None or front <= prefill else _frontend(case, st, lab, front)


def _prefix(case: Case, st: EngineState, lab: dict[str, str], over: float | None
            ) -> Why | None:
    e, drift = st.engine, case.thresholds.drift_ratio
    hit, hit_base = e.prefix_hit_ratio, e.prefix_hit_ratio_baseline
    prefill, prefill_base = e.prefill_mean, e.prefill_mean_baseline
    if hit is None or hit_base is None or prefill is None or not prefill_base:
        return None
    fell = hit_base >= case.thresholds.prefix_hit_min and hit * drift < hit_base
    if not fell or prefill <= prefill_base * drift:
        return None
    ev = [case.evidence(PREFIX_HITS, hit, lab, hit_base / drift, hit_base),
          case.evidence(PREFILL_MEAN, prefill, lab, prefill_base * drift, prefill_base)]
    # Each request holds the engine longer, so a queue forms behind it (the cause takes
    # the queue over): its seconds are the miss's too.
    share = e.queue_share
    queued = (e.queue_mean or 0.0) if share is not None and \
        share > case.thresholds.queue_share else 0.0
    behind = f", and requests queue {secs(queued)} behind it" if queued else ""
    grown = prefill - prefill_base + queued
    return Why(PREFIX_CACHE_MISS, f"Engine {e.engine}'s prefix cache hits {pct(hit)} of "
               f"prompt tokens (off-peak {pct(hit_base)}), so prefill takes {secs(prefill)} "
               f"per request, {prefill / prefill_base:.1f}x its off-peak{behind}"
               f"{accounts(grown, over)}", ev,
               strength(hit_base, max(hit, 0.01) * drift), grown)


def stream(case: Case, st: EngineState, lab: dict[str, str]) -> Why | None:
    """Speculative decoding's drafts accepted drift_ratio times less than off-peak: each step
    yields fewer tokens, whatever the engine's per-step gaps say."""
    e, drift = st.engine, case.thresholds.drift_ratio
    now, base = e.spec_acceptance, e.spec_acceptance_baseline
    if now is None or base is None or base < case.thresholds.spec_acceptance_min \
            or now * drift >= base:
        return None
    ev = [case.evidence(ACCEPTANCE, now, lab, base / drift, base)]
    return Why(SPEC_DECODE, f"Engine {e.engine}'s draft tokens are accepted {pct(now)} of the "
               f"time (off-peak {pct(base)}): fewer tokens per decode step", ev,
               strength(base, max(now, 0.01) * drift))


def _engine_parts(p: ProbeWindow, e: EngineWindow | None
                  ) -> dict[BudgetPart, float | None]:
    """The engine's parts of one probe's first token: the probe's own requests where the
    engine timed them (the exact split), the engine's means over all its requests else."""
    exact = p.exact_splits > 0
    queue = p.split_queue_mean if exact else (e.queue_mean if e else None)
    prefill = p.split_prefill_mean if exact else (e.prefill_mean if e else None)
    kv = e.kv_transfer_mean if e else None
    if kv is not None and prefill is not None:
        # A decode instance counts the wait for its KV inside scheduled-to-first-token.
        kv = min(kv, prefill)
        prefill -= kv
    return {BudgetPart.FRONTEND: e.frontend_mean if e else None, BudgetPart.QUEUE: queue,
            BudgetPart.KV_TRANSFER: kv, BudgetPart.PREFILL: prefill}


def _engine_per_token(p: ProbeWindow, e: EngineWindow | None) -> float | None:
    """The engine's own time per output token of one probe's requests: their decode on its
    clock over the gaps between their tokens where it timed them, its mean inter-token gap
    over all its requests else."""
    tokens = p.output_tokens_mean
    if p.exact_splits > 0 and p.split_decode_mean is not None and tokens and tokens > 1:
        return p.split_decode_mean / (tokens - 1)
    return e.itl_mean if e else None


def _stream(p: ProbeWindow, e: EngineWindow | None
            ) -> tuple[float | None, dict[StreamPart, float | None]]:
    """One probe's mean TPOT as the engine's time per token and the delivery of it."""
    engine = _engine_per_token(p, e)
    if p.tpot_mean is None or engine is None:
        return None, {}
    return p.tpot_mean, {StreamPart.ENGINE: engine, StreamPart.DELIVERY: p.tpot_mean - engine}


def ledger(case: Case) -> tuple[Budget, ...]:
    """Each probe's mean first token, part by part (means add up where quantiles do not):
    the network's round trip from its connections' TCP_INFO, the engine's parts, and the
    remainder that none of them accounts for; and its mean time per output token, the
    engine's and the delivery's."""
    out: list[Budget] = []
    for p in case.obs.probes:
        if p.ttft_mean is None:
            continue
        engines = case.engines_of(p)
        e = engines[0] if len(engines) == 1 else None
        parts: dict[BudgetPart, float | None] = {BudgetPart.NETWORK: p.tcp_rtt_mean,
                                                 **_engine_parts(p, e)}
        known = sum(v for v in parts.values() if v is not None)
        parts[BudgetPart.REMAINDER] = p.ttft_mean - known
        tpot, stream = _stream(p, e)
        out.append(Budget(p.probe, p.carrier, e.engine if e else "", p.ttft_mean, parts,
                          tpot, stream))
    return tuple(out)
