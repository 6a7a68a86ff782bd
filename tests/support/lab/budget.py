"""What the chain should conclude from the knobs of the first token's budget and the
stream's drafts (``expect.py``'s model, for the causes beyond queue and prefill), decided
only where nothing else is turned, as a full KV cache or a pinned rank is:

* ``frontend_delay``: every request spends it in the API server before the engine queues
  it, in the engine's TTFT and end to end, in neither queue nor prefill: ``engine/frontend``
  once the delay is over ``frontend_share`` of the TTFT SLO;
* ``--pd`` with ``kv_transfer_delay``: each request waits for its prompt's KV (the prefill
  instance's prefill, the transfer at ``kv_transfer_tps``, the delay): ``engine/kv_transfer``
  likewise over ``kv_transfer_share``;
* a shared system prompt in the baseline, a unique one after: the prefix cache's hit ratio
  falls from the system prompt's share to 0 and prefill grows by the ratio of the prompts:
  ``engine/prefix_cache_miss``;
* ``--speculative-tokens`` with ``spec_acceptance`` falling after a baseline: each step
  yields fewer tokens, so the probes' TPOT grows while a step's gap does not:
  ``engine/spec_decode``.

Each part is a verdict once over its own line, whether or not a probe is slow yet, as the
chain and its alert have it (status ``degraded``): a healthy run has every part under its
line, and a first token surely under its SLO.

Each returns the expected verdicts, None when its knob is not turned, or raises Ambiguous.
"""

from __future__ import annotations

import math

from exporter.simulator.faults import Faults
from tests.support.lab.expect import Ambiguous, Lab, Range, alone, need, over, slo
from tests.support.lab.scenario import DEFAULT_DELAY

Expect = list[dict[str, object]]


def _first_token(lab: Lab, part: Range, share: float, cause: str) -> Expect:
    """A part of the engine's first token: its cause once over share x the TTFT SLO,
    whether or not the first token is slow yet; healthy where the part and the whole first
    token (the part, then at most three steps) are under their lines."""
    slo_ttft, _ = slo(lab)
    if need(over(part, share * slo_ttft)):
        return _cause(lab, cause)
    lo, hi = _step(lab)
    if need(over((part[0] + lo, part[1] + 3 * hi), slo_ttft)) is False:
        return []
    raise Ambiguous  # a slow first token with its part under the line: not modelled


def _cause(lab: Lab, cause: str) -> Expect:
    return [{"layer": "engine", "cause": cause, "scope": {"engine": lab.config.engines[0].name}}]


def _step(lab: Lab) -> tuple[float, float]:
    """One engine step under the lab's light load: the fixed part, and at most a handful of
    sequences and a prefill chunk more."""
    cfg = lab.engine
    return (cfg.decode_step + cfg.decode_step_per_seq,
            cfg.decode_step + cfg.decode_step_per_seq * 8 + 0.02)


def frontend(lab: Lab) -> Expect | None:
    delay = lab.faults.frontend_delay
    if not delay:
        return None
    if not alone(lab, Faults(frontend_delay=delay)) or lab.scenario.simulator.config:
        raise Ambiguous
    return _first_token(lab, (delay, delay), lab.th.frontend_share, "frontend")


def kv_transfer(lab: Lab) -> Expect | None:
    if not lab.scenario.simulator.flags.get("pd"):
        return None
    delay = lab.faults.kv_transfer_delay
    if not alone(lab, Faults(kv_transfer_delay=delay)) or lab.scenario.simulator.config:
        raise Ambiguous
    cfg, load = lab.engine, lab.scenario.load
    # The users' prompts are most of the requests; a probe's is tens of tokens.
    per_token = 1 / cfg.prefill_tps + 1 / cfg.kv_transfer_tps
    part = (delay + 16 * per_token, delay + (load.tokens + 40) * per_token)
    return _first_token(lab, part, lab.th.kv_transfer_share, "kv_transfer")


def prefix_cache_miss(lab: Lab) -> Expect | None:
    s = lab.scenario
    base = s.baseline_load
    if base is None or not base.system_prompt_tokens:
        return None
    if not alone(lab, Faults()) or s.simulator.config or not (
            base.system_prompt == "shared" and s.load.system_prompt == "unique"
            and base.system_prompt_tokens == s.load.system_prompt_tokens
            and base.prompt_tokens == s.load.prompt_tokens):
        raise Ambiguous
    cfg, load = lab.engine, s.load
    shared = load.system_prompt_tokens / (load.tokens + 8)
    grew = (load.tokens + 8) / (load.prompt_tokens + 8 + cfg.block_size)
    if over((shared, shared), lab.th.prefix_hit_min) is not True or \
            over((grew, grew), lab.th.drift_ratio) is not True:
        raise Ambiguous
    # Every prompt now computed whole: the engine must keep up with it, and its cache hold
    # what runs (the users' requests in flight, Little's law, thrice over, and the probes),
    # or the queue and preemptions are verdicts of their own.
    hi = _step(lab)[1]
    busy = load.rate * load.tokens / cfg.prefill_tps
    flight = load.rate * (load.tokens / cfg.prefill_tps + load.max_tokens * hi)
    seqs = 3 * flight + 2 + len(lab.config.probes)
    blocks = math.ceil((load.tokens + load.max_tokens + 1) / cfg.block_size)
    if over((busy, busy), 0.5) is not False or over((seqs * blocks,) * 2, cfg.kv_blocks) \
            is not False:
        raise Ambiguous
    return _cause(lab, "prefix_cache_miss")


def spec_decode(lab: Lab) -> Expect | None:
    s = lab.scenario
    k = int(s.simulator.flags.get("speculative_tokens", 0))
    if not k:
        return None
    if not alone(lab, Faults()) or set(s.simulator.config) - {"spec_acceptance"} \
            or s.baseline <= 0:
        raise Ambiguous
    before = (s.baseline_simulator.config.get("spec_acceptance", 0.7)
              if s.baseline_simulator else 0.7)
    now = lab.engine.spec_acceptance
    _, slo_tpot = slo(lab)
    lo, hi = _step(lab)
    cfg = lab.engine
    verify = (cfg.decode_step_per_seq * k, cfg.decode_step_per_seq * 8 * k)
    tokens = 1 + sum(now**i for i in range(1, k + 1))
    # Per token of a probe's answer: a step and its drafts' check over the tokens it yields,
    # give or take a third for how the drafts fall within one answer.
    tpot = ((lo + verify[0]) / tokens / 1.3, (hi + verify[1]) / tokens * 1.3)
    fell = over((before, before), now * lab.th.drift_ratio) if now else True
    # The first token is a step and its drafts' check after a probe's short prefill; a slow
    # one would be slow_prefill's as well.
    if need(over((lo, 3 * (hi + verify[1])), slo(lab)[0])):
        raise Ambiguous
    if need(fell):
        return _cause(lab, "spec_decode")
    if need(over(tpot, slo_tpot)) is False:
        return []
    raise Ambiguous


def expected(lab: Lab) -> Expect | None:
    """The verdicts of the first knob of the budget turned, None where none is."""
    for rule in (frontend, kv_transfer, prefix_cache_miss, spec_decode):
        got = rule(lab)
        if got is not None:
            if DEFAULT_DELAY * 3 * lab.th.rtt_round_trips > lab.th.rtt_budget_share * slo(lab)[0]:
                raise Ambiguous  # the default paths' floor near the TTFT budget
            return got
    return None
