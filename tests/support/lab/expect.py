"""What the decision chain should conclude from a scenario's knobs, derived from the knob
values, a bounded model of the lab and the run's thresholds, never by running the chain.

The model bounds each statistic the chain reads (a probe's TTFT and TPOT, the engine's TTFT,
inter-token P95 and queue share, a path's loss, RTT and jitter) between a lower and an upper
value computed from the knobs (network delay and jitter, the simulator's step times and
capacity, the load), then applies the documented rules of docs/dev/diagnosis.md (symptom per
probe, attribution in chain order, an engine split replaced by its GPU why or by long users'
prompts (step 5's rule without a baseline), an XID a verdict of its own, a full KV cache
or a pinned data-parallel rank decided only alone, a layer over an
alert line a verdict whether or not a probe feels it, the primary the cause that explains most
of what the probes feel). A decision is taken only with a margin:

* a bounded quantity decides when its lower bound is over ``MARGIN`` x the threshold, or its
  upper bound under the threshold / ``MARGIN``;
* a drawn one (packet loss on the path, the share of a probe's requests that lose their
  request segment, 429 shares) decides when the binomial model puts the outcome at
  ``CERTAIN`` probability or more either way.

Anything in between is ``Ambiguous``: the generator draws the scenario again, so every
scenario it keeps has one right answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from exporter.config.models import Config
from exporter.diagnosis.thresholds import Thresholds
from exporter.probing.client import KEEPALIVE as PROBE_KEEPALIVE
from exporter.probing.prompts import probe_prompt
from exporter.simulator.engine_config import EngineConfig
from exporter.simulator.faults import Faults
from exporter.simulator.openai import chat_prompt
from exporter.simulator.stats import VLLM_ITL, VLLM_TTFT
from exporter.simulator.tokens import count_tokens
from tests.support.lab.runner import BASELINE_LOAD
from tests.support.lab.scenario import (
    CARRIERS,
    DEFAULT_DELAY,
    DEFAULT_HOPS,
    CarrierPath,
    Gpu,
    Load,
    Scenario,
    Simulator,
)

MARGIN = 1.3
CERTAIN = 0.98
#: Linux's minimum retransmission timeout (TCP_RTO_MIN): a lost request segment, alone in
#: flight, costs the probe at least this before its first token.
TCP_RTO_MIN = 0.2
#: The short probe profile's prompt is one sentence and a nonce: under this many tokens.
PROBE_PROMPT_MAX = 64
#: Seconds between the scenario's apply and its window's start (generate.py's settle is the
#: window plus this).
SETTLE_LEAD = 10.0
#: The probes' own prompt as the simulator counts it (its chat template around the short
#: profile's text; the nonce is a fixed 16 hex digits), a token either way.
_PROBE_PROMPT = count_tokens(chat_prompt([{"role": "user", "content": probe_prompt(
    "short", 1, "0" * 16)}]))
PROBE_PROMPT = (_PROBE_PROMPT - 1.0, _PROBE_PROMPT + 1.0)

Range = tuple[float, float]
Tri = bool | None  # None: within the margin, undecided


class Ambiguous(Exception):
    """The knobs leave the expected answer within a margin of a threshold."""


def over(value: Range, threshold: float) -> Tri:
    lo, hi = value
    if lo > threshold * MARGIN:
        return True
    if hi < threshold / MARGIN:
        return False
    return None


def binom_at_least(n: int, p: float, k: int) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    return 1.0 - sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(min(k, n + 1)))


def drawn(n_lo: int, n_hi: int, p_lo: float, p_hi: float, share: float) -> Tri:
    """Whether more than ``share`` of n draws hit, each with probability in [p_lo, p_hi]."""
    sure = binom_at_least(n_lo, p_lo, math.floor(share * n_lo) + 1)
    could = max(binom_at_least(n, p_hi, math.floor(share * n) + 1) for n in (n_lo, n_hi))
    if sure >= CERTAIN:
        return True
    if could <= 1 - CERTAIN:
        return False
    return None


def either(a: Tri, b: Tri) -> Tri:
    """True when one is, False when both are not, else undecided."""
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def need(value: Tri) -> bool:
    if value is None:
        raise Ambiguous
    return value


@dataclass
class Sick:
    """One probe's symptoms (docs/dev/diagnosis.md, step 1) and which are still unexplained."""

    probe: str
    carrier: str
    open: set[str]
    failure_kind: str = ""
    #: It may also fail a few requests (lost SYNs) beside its other symptoms.
    maybe_failing: bool = False


@dataclass
class Lab:
    """The knobs of one scenario, read from its objects and its generated config."""

    scenario: Scenario
    config: Config
    th: Thresholds

    @property
    def engine(self) -> EngineConfig:
        # Launch flags that are engine knobs (kv_tokens, ...) first, then the run-time ones.
        return self.launched.merged(dict(self.scenario.simulator.config))

    @property
    def launched(self) -> EngineConfig:
        """The engine before the scenario applies: its launch flags only (the step times
        given in milliseconds, as ``simulate`` takes them)."""
        fixed: dict[str, Any] = {}
        for k, v in self.scenario.simulator.flags.items():
            if k in EngineConfig.__dataclass_fields__:
                fixed[k] = v
            elif k.endswith("_ms") and k[:-3] in EngineConfig.__dataclass_fields__:
                fixed[k[:-3]] = float(v) / 1000
        return EngineConfig(**fixed)

    @property
    def faults(self) -> Faults:
        return Faults().merged(self.scenario.simulator.faults)

    @property
    def probe_rate_max(self) -> float:
        """The probes' requests per second at most: each once per interval, a tenth more
        for the interval's jitter."""
        return len(self.config.probes) / self.config.probes[0].interval * 1.1

    def new_connections(self) -> bool:
        """Whether every probe request opens a connection of its own: the probe keeps an
        idle one only 2.5 s (exporter/probing/client.py)."""
        return self.config.probes[0].interval > PROBE_KEEPALIVE

    def probe_count(self, answer: float) -> tuple[int, int]:
        """Finished requests of one probe in the window when an answer takes up to
        ``answer`` seconds: a probe runs once per interval, or back to back when its answer
        takes longer (a run still in flight holds the next); a tenth either way for the
        interval's jitter and the spacing between probes."""
        probe = self.config.probes[0]
        period = max(probe.interval, min(answer, probe.timeouts.total))
        window = self.config.diagnosis.window
        return math.floor(window / period * 0.85), math.ceil(window / probe.interval * 1.1)


def engine_model(lab: Lab) -> dict[str, Range]:
    """Bounds of the engine's step, TTFT, inter-token P95 and queue share, and its load."""
    cfg, faults, load = lab.engine, lab.faults, lab.scenario.load
    probe = lab.config.probes[0]
    # A probe runs once per interval, or back to back when its answer takes longer.
    probe_rate = len(lab.config.probes) / max(
        probe.interval, faults.slow_first_token + (probe.max_tokens + 1) * (
            cfg.decode_step + cfg.decode_step_per_seq))
    step_lo = cfg.decode_step + cfg.decode_step_per_seq
    prefill_chunk = min(cfg.max_num_batched_tokens, max(load.prompt_tokens, PROBE_PROMPT_MAX))
    step_hi = cfg.decode_step + cfg.decode_step_per_seq * cfg.max_num_seqs + \
        prefill_chunk / cfg.prefill_tps

    def occupancy(prompt: int, tokens: int, step: float) -> float:
        return faults.slow_first_token + math.ceil(prompt / cfg.max_num_batched_tokens) * step \
            + prompt / cfg.prefill_tps + tokens * step

    def busy(step: float, probes: float) -> float:
        return (load.rate * occupancy(load.prompt_tokens, load.max_tokens, step)
                + probes * occupancy(PROBE_PROMPT_MAX, probe.max_tokens, step))

    # The probes run at most once per interval and never two runs at once, so their share
    # of the load shrinks as answers slow down: the lower bound counts the load alone.
    arrivals = load.rate + probe_rate
    rho = (busy(step_lo, 0.0) / cfg.max_num_seqs,
           busy(step_hi, probe_rate) / cfg.max_num_seqs)
    occ_lo = occupancy(1, 1, step_lo)
    occ_hi = max(occupancy(load.prompt_tokens, load.max_tokens, step_hi),
                 occupancy(PROBE_PROMPT_MAX, probe.max_tokens, step_hi))
    first_lo = faults.slow_first_token + step_lo
    # The engine's TTFT P95 (over every request, not one probe's): where more than 5 % of
    # its requests are the users', at least their first token, which waits for their whole
    # prompt's prefill.
    p95_lo = first_lo
    if rho[1] < 1 and 0.9 * load.rate / (0.9 * load.rate + lab.probe_rate_max) > 0.05 * MARGIN:
        p95_lo = max(first_lo, prefill_seconds(users_prompt(load)[0], cfg, faults, step_hi)[0])
    first_hi = faults.slow_first_token + step_hi * (
        math.ceil(max(load.prompt_tokens, PROBE_PROMPT_MAX) / cfg.max_num_batched_tokens) + 1)
    user_lo = occupancy(load.prompt_tokens, load.max_tokens, step_lo)
    if rho[1] < 1:
        served = (load.rate * 0.9, load.rate * 1.1)
        # Erlang C (M/M/c, a bound for the simulator's near-deterministic service).
        wait_hi = erlang_wait(arrivals, busy(step_hi, probe_rate) / arrivals, cfg.max_num_seqs)
        wait = (0.0, wait_hi)
        share = (0.0, wait_hi / (wait_hi + occ_lo))
    elif rho[0] > MARGIN and load.concurrency > cfg.max_num_seqs:
        # Over capacity: the load fills its in-flight cap, so at least cap - slots wait.
        per = occupancy(load.prompt_tokens, load.max_tokens, step_lo)
        waiting = load.concurrency - cfg.max_num_seqs
        wait = (waiting * per / cfg.max_num_seqs,
                (waiting + len(lab.config.probes)) * occ_hi / cfg.max_num_seqs)
        share = (wait[0] / (wait[0] + occ_hi), 1.0)
        # The slots are the users' but for one per probe at most.
        served = (max(0, cfg.max_num_seqs - len(lab.config.probes)) / occ_hi,
                  min(load.rate * 1.1, cfg.max_num_seqs / user_lo))
    else:
        raise Ambiguous
    return {"step": (step_lo, step_hi), "itl": (step_lo, step_hi), "rho": rho, "wait": wait,
            "share": share, "ttft": (first_lo + wait[0], first_hi + wait[1]),
            "ttft_p95": (p95_lo + wait[0], first_hi + wait[1]), "served": served}


def read_from(bounds: tuple[float, ...], p95: Range, every: Range) -> Range:
    """Where a histogram's P95 reads for one truly in ``p95``, every observation being in
    ``every``: ``histogram_quantile`` interpolates inside a bucket, so where one bucket
    holds them all it reads 95 % of the way up that bucket (1.07 s with vLLM's TTFT
    buckets reads 2.425 s). Else ``p95`` (the buckets near it decide no line the model
    has drawn across them yet)."""
    lower = max((b for b in bounds if b < every[0]), default=0.0)
    upper = min((b for b in bounds if b >= every[0]), default=math.inf)
    if every[1] <= upper < math.inf:
        at = lower + 0.95 * (upper - lower)
        return (at, at)
    return p95


def users_prompt(load: Load) -> Range:
    """The load's prompt as the engine counts it: the load writes prompt_tokens - 8 filler
    words (none under 8) after its request number ("r12"), and the chat template adds its
    role lines."""
    tokens = max(load.prompt_tokens, 8)
    return tokens - 2.0, tokens + 2.0


def prefill_seconds(prompt: float, cfg: EngineConfig, faults: Faults, step_hi: float
                    ) -> Range:
    """What the simulator counts as one request's prefill (scheduled to first token): the
    slow-first-token hold, then each prefill chunk's step (at least ``decode_step`` plus the
    chunk at ``prefill_tps``); at most one step more, the one in progress when it became
    ready or that had no budget left for it."""
    chunks = math.ceil(prompt / cfg.max_num_batched_tokens)
    return (faults.slow_first_token + chunks * cfg.decode_step + prompt / cfg.prefill_tps,
            faults.slow_first_token + (chunks + 1) * step_hi)


def prefill_rate(cfg: EngineConfig, faults: Faults, load: Load, served: Range, probe_rate: float
                 ) -> Range:
    """The engine's prefill rate over a span (prompt tokens per second of prefill, the
    users' and the probes' requests together, ``served`` users' requests per second and
    up to ``probe_rate`` of the probes'):
    between the slowest mix and the faster of the two kinds alone."""
    step_hi = cfg.decode_step + cfg.decode_step_per_seq * cfg.max_num_seqs + min(
        cfg.max_num_batched_tokens, max(load.prompt_tokens, PROBE_PROMPT_MAX)) / cfg.prefill_tps
    users, probes = users_prompt(load), PROBE_PROMPT
    user_s = (prefill_seconds(users[0], cfg, faults, step_hi)[0],
              prefill_seconds(users[1], cfg, faults, step_hi)[1])
    probe_s = (prefill_seconds(probes[0], cfg, faults, step_hi)[0],
               prefill_seconds(probes[1], cfg, faults, step_hi)[1])
    mixes = [(u, r) for u in served for r in (0.0, probe_rate) if u + r > 0]
    lo = min((u * users[0] + r * probes[0]) / (u * user_s[1] + r * probe_s[1])
             for u, r in mixes)
    return lo, max(users[1] / user_s[0], probes[1] / probe_s[0])


def prompts_too_long(lab: Lab, eng: dict[str, Range]) -> Tri:
    """docs/dev/diagnosis.md's long_prompts rule without a baseline, but for the slow first
    token it also needs: the users' prompt (the engine's mean without the probes', judged
    only over min_requests and more than two per probe) costs over prompt_budget_share x
    the TTFT SLO at the engine's best prefill rate, and is over prompt_growth x the probes'
    own prompt and at least long_prompt_tokens."""
    th, (slo_ttft, _) = lab.th, slo(lab)
    load = lab.scenario.load
    users = users_prompt(load)
    longer = over((users[0] / (th.prompt_growth * PROBE_PROMPT[1]),
                   users[1] / (th.prompt_growth * PROBE_PROMPT[0])), 1.0)
    floor = over(users, th.long_prompt_tokens)
    window = lab.config.diagnosis.window
    gate = max(th.min_requests, 2 * len(lab.config.probes) + 1)
    counted = over((eng["served"][0] * window, eng["served"][1] * window), gate)
    # The best span of the history is the window's or faster; before the scenario applied
    # (its baseline phase, or the moment between the load's start and the applied knobs)
    # the engine ran at its launch settings, and a span may hold only those requests.
    rate = prefill_rate(lab.engine, lab.faults, load, eng["served"], lab.probe_rate_max)
    before = prefill_rate(lab.launched, Faults(),
                          BASELINE_LOAD if lab.scenario.baseline > 0 else load, (1.0, 1.0),
                          lab.probe_rate_max)
    best = (rate[0], max(rate[1], before[1]))
    costly = over((users[0] / best[1], users[1] / best[0]), th.prompt_budget_share * slo_ttft)
    parts = (longer, floor, counted, costly)
    if False in parts:
        return False
    return None if None in parts else True


def kv_may_preempt(lab: Lab) -> bool:
    """Whether the simulator's KV cache could ever run short: the most sequences it runs at
    once, each at the largest a request grows to (prompt, answer and the next token), in
    its blocks. The cache preempts only when what runs outgrows it (the scheduler admits a
    prefill only where it fits), so below that ``engine/kv_cache_pressure`` is ruled out
    exactly; above it the model cannot say when the cache fills (not modelled yet)."""
    cfg, load, probe = lab.engine, lab.scenario.load, lab.config.probes[0]
    running = min(cfg.max_num_seqs, load.concurrency + len(lab.config.probes))
    largest = max(users_prompt(load)[1] + load.max_tokens, PROBE_PROMPT[1] + probe.max_tokens)
    return running * math.ceil((largest + 1) / cfg.block_size) > cfg.kv_blocks


def kv_fills(lab: Lab, eng: dict[str, Range]) -> bool:
    """Whether the KV cache surely fills and preempts through the window, and is at
    kv_cache_usage or over when scraped. The load is over capacity with requests always
    waiting, so the scheduler admits whenever a prompt fits; the slots' sequences at their
    mean size (prompt and half the answer) need more than the cache with the margin, so
    they cannot all be held; each answer is over twice a prompt, so what a finished
    sequence frees is refilled by admissions and then outgrown before the next finishes
    (a preemption each time); and between those moments the cache is short of the head's
    prompt (it does not fit), a share of it under the margin of 1 - kv_cache_usage."""
    cfg, load, th = lab.engine, lab.scenario.load, lab.th
    prompt = users_prompt(load)
    return (eng["rho"][0] > MARGIN and load.concurrency > cfg.max_num_seqs
            and load.max_tokens >= 2 * (prompt[1] + 1)
            and cfg.max_num_seqs * (prompt[0] + load.max_tokens / 2) > MARGIN * cfg.kv_tokens
            and (prompt[1] + 1 + cfg.block_size) / cfg.kv_tokens
            < (1 - th.kv_cache_usage) / MARGIN)


def kv_alone(lab: Lab, eng: dict[str, Range]) -> bool:
    """Nothing but the cache is turned, and nothing else can be a verdict: default paths
    whose RTT floor is clear of the TTFT budget, the lab's healthy GPU, no engine fault,
    the probes' usual timeouts, prompts too short for long_prompts. A preempting cache
    makes the probes' TPOT and total unbounded, and every symptom it makes is the cache's
    (it explains TTFT, TPOT and failures), so the verdict is the cache's alone."""
    th, (slo_ttft, _) = lab.th, slo(lab)
    s = lab.scenario
    rtt_hi = (DEFAULT_DELAY * 1.1 + 0.005) * th.rtt_round_trips
    return (not s.paths and s.gpu == Gpu() and lab.faults == Faults() and not s.simulator.down
            and not s.probes.timeouts and over((0.0, rtt_hi), th.rtt_budget_share * slo_ttft)
            is False and prompts_too_long(lab, eng) is False)


def imbalanced(lab: Lab) -> Tri:
    """Whether the last of two data-parallel ranks (the simulator's ``--dp-ranks 2``, with
    ``dp_pin_rate`` of the requests pinned to it) is an ``engine/imbalance`` alone, or None
    where the model cannot say (None also for any engine of one rank: not this model's).

    Per rank (``max_num_seqs`` slots each, the least-loaded rank for the unpinned requests):
    the last gets at least the pinned share of the load and serves at most its slots over
    the shortest occupancy, over capacity by the margin; the other gets at most the unpinned
    share of the load and the probes and is under capacity by it (Erlang C bounds its mean
    queue). The load's in-flight cap fills within the ten seconds before the window, after
    which the last rank's mean queue is at least the cap less its slots and what the other
    rank holds (Little's law: arrivals x time in the engine). It must be over
    imbalance_min_waiting and imbalance_ratio x the other's queue, and the engine's queue
    share (by Little's law the mean queue over the mean queue and both ranks' slots) over
    queue_share, all with the margin: the queue is then the rank's, which replaces queueing.
    Nothing else may be turned (as for a full KV cache), the TPOT SLO clear of a step, and
    the users' prompts too short for long_prompts; any symptom a probe feels then is the
    queue's (its TTFT, its timeouts)."""
    s, th, (slo_ttft, slo_tpot) = lab.scenario, lab.th, slo(lab)
    if s.simulator.flags.get("dp_ranks", 1) != 2:
        return None
    cfg, load, probe = lab.engine, lab.scenario.load, lab.config.probes[0]
    pin = lab.faults.dp_pin_rate
    rtt_hi = (DEFAULT_DELAY * 1.1 + 0.005) * th.rtt_round_trips
    step_lo = cfg.decode_step + cfg.decode_step_per_seq
    step_hi = cfg.decode_step + cfg.decode_step_per_seq * cfg.max_num_seqs + min(
        cfg.max_num_batched_tokens, max(load.prompt_tokens, PROBE_PROMPT_MAX)) / cfg.prefill_tps

    def occupancy(prompt: float, tokens: int, step: float) -> float:
        return (math.ceil(prompt / cfg.max_num_batched_tokens) + tokens) * step \
            + prompt / cfg.prefill_tps

    users = users_prompt(load)
    occ_lo = occupancy(users[0], load.max_tokens, step_lo)
    occ_hi = max(occupancy(users[1], load.max_tokens, step_hi),
                 occupancy(PROBE_PROMPT[1], probe.max_tokens, step_hi))
    alone = (not s.paths and s.gpu == Gpu() and not s.simulator.config and not s.probes.timeouts
             and lab.faults == Faults(dp_pin_rate=pin) and not s.simulator.down
             and not kv_may_preempt(lab)
             and over((0.0, rtt_hi), th.rtt_budget_share * slo_ttft) is False
             and over((0.0, step_hi), slo_tpot) is False
             and over((0.0, step_hi), th.stall_seconds) is False
             and over((users[0] / (th.prompt_growth * PROBE_PROMPT[1]),
                       users[1] / (th.prompt_growth * PROBE_PROMPT[0])), 1.0) is False)
    if not alone:
        return None
    arrive_last, serve_last = load.rate * pin, cfg.max_num_seqs / occ_lo
    arrive_other = (load.rate + lab.probe_rate_max) * (1 - pin)
    rho_other = arrive_other * occ_hi / cfg.max_num_seqs
    if arrive_last < MARGIN * serve_last or rho_other > 1 / MARGIN or arrive_other <= 0:
        return None
    queue_other = arrive_other * erlang_wait(arrive_other, occ_hi, cfg.max_num_seqs)
    held_other = arrive_other * occ_hi + queue_other
    fill = load.concurrency / (arrive_last - serve_last)
    if fill > SETTLE_LEAD:
        return None
    waiting = load.concurrency - cfg.max_num_seqs - held_other
    share = waiting / (waiting + queue_other + 2 * cfg.max_num_seqs) if waiting > 0 else 0.0
    if waiting > MARGIN * max(th.imbalance_min_waiting, th.imbalance_ratio * queue_other) \
            and share > MARGIN * th.queue_share:
        return True
    return None


def erlang_wait(arrivals: float, service: float, servers: int) -> float:
    a = arrivals * service
    rho = a / servers
    terms = sum(a**k / math.factorial(k) for k in range(servers))
    last = a**servers / math.factorial(servers) / (1 - rho)
    p_wait = last / (terms + last)
    return p_wait * service / (servers * (1 - rho))


def slo(lab: Lab) -> tuple[float, float]:
    return lab.config.slo.ttft_p95_seconds, lab.config.slo.tpot_p95_seconds


def stream_drop(loss: float, stream_loss: float) -> float:
    """The share of a stream's packets one of the two drops takes (they draw apart)."""
    return 1 - (1 - loss) * (1 - stream_loss)


#: How far the worse of a stream's two shares (the chain judges either) strays from the
#: share of its packets dropped, either way. That is the out-of-order one, of the server's
#: segments: the client sends mostly ACKs, and a lost ACK costs no retransmission when the
#: next covers it; one gap puts the segments after it out of order until it is filled.
#: (At 8% dropped at each end the lab's probe saw 5.2% and 7.2% out of order, 0.2%
#: retransmitted: tests/scenarios/stream-loss-icmp-clean.yaml.)
STREAM_SPREAD = 2.0


def probe_symptoms(lab: Lab, eng: dict[str, Range]) -> list[Sick]:
    """Each probe's symptoms (the untagged local one rides no carrier)."""
    th, (slo_ttft, slo_tpot) = lab.th, slo(lab)
    probe = lab.config.probes[0]
    tokens = probe.max_tokens
    faults, timeouts = lab.faults, probe.timeouts
    out = []
    for p in lab.config.probes:
        carrier = p.carrier or ""
        path = lab.scenario.path(carrier) if carrier else None
        # A segment lost to either knob costs the stream a retransmission alike.
        d, j, loss, stall = ((path.delay, path.jitter, stream_drop(path.loss, path.stream_loss),
                              path.stall) if path else (0.0, 0.0, 0.0, 0.0))
        ttft = (eng["ttft"][0] + max(0.0, d - j), eng["ttft"][1] + 2 * (d + j))
        gaps = (stall + (TCP_RTO_MIN + d if loss else 0.0)) / (tokens - 1)
        tpot = (eng["itl"][0] + stall / (tokens - 1), eng["itl"][1] + 2 * j + gaps)
        total = (ttft[0] + (tokens - 1) * eng["itl"][0] + stall,
                 ttft[1] + (tokens - 1) * eng["itl"][1] + stall + 2 * j
                 + (TCP_RTO_MIN + d if loss else 0.0))
        n_lo, n_hi = lab.probe_count(total[1])
        found: set[str] = set()
        kind = ""
        first = over(ttft, slo_ttft)
        if loss and first is False:
            # A lost request segment waits for a retransmission: slow if that passes the SLO.
            slow = over((ttft[0] + TCP_RTO_MIN, ttft[1] + TCP_RTO_MIN + d), slo_ttft)
            first = need(slow) and drawn(n_lo, n_hi, loss, 1 - (1 - loss) ** 4, 0.05) \
                if slow is not False else False
        if need(first):
            found.add("ttft")
        gap = over((stall, stall + eng["itl"][1] + 2 * j + (TCP_RTO_MIN if loss else 0.0)),
                   th.stall_seconds)
        if need(over(tpot, slo_tpot)) or need(gap):
            found.add("tpot")
        # Failures: 429s drawn per request; timeouts when the client's patience is shorter
        # than the answer's bound; an answer past the first-token timeout times out too.
        limited = faults.rate_limit_rate
        fails_429 = drawn(n_lo // 2, n_hi, limited, limited, th.failure_ratio) if limited \
            else False
        # The probe's deadlines run from before it connects (its TTFT from after).
        opening = syn_late(path) if path and lab.new_connections() else (0.0, 0.0)
        late = either(over(plus(total, opening), timeouts.total),
                      over(plus(ttft, opening), timeouts.first_token))
        if need(late) is True:
            # Every answer is cut before its end: no stream is timed to its last token.
            found.discard("tpot")
            found.add("failures")
            kind = "timeout"
        elif need(fails_429):
            found.add("failures")
            kind = "rate_limited"
        # A SYN lost twice times a new connection out: a few failures that only a loss
        # finding on this path can explain, and that could make a probe sick on their own.
        maybe = bool(loss) and drawn(n_lo, n_hi, 0.0, loss**2, th.failure_ratio) is not False
        if maybe and not found:
            raise Ambiguous
        if found and n_lo < th.min_requests:
            # Answers so slow that the window may hold too few of them to judge the probe.
            if n_hi >= th.min_requests:
                raise Ambiguous
            continue
        if found:
            out.append(Sick(p.name, carrier, found, kind, maybe))
    return out


class Unexplained(Ambiguous):
    """A symptom no modelled cause explains: the chain would say exporter/no_data."""


@dataclass
class Found:
    layer: str
    cause: str
    scope: dict[str, str]
    explains: frozenset[str]
    fails: frozenset[str]
    riders: list[Sick]
    #: Its own numbers are over an alert's line (exporter/monitoring/findings.py): a
    #: verdict whether or not a probe feels it.
    own: bool = False
    #: A fault on its own (the engine down): first among equals.
    hard: bool = False
    #: How many probe symptoms it took over (the chain's primary explains the most).
    felt: int = 0
    #: An engine split the model leaves open between queueing and slow_prefill: kept only
    #: where a later step takes either over.
    undecided: bool = False

    @property
    def claimed(self) -> bool:
        return self.felt > 0

    def claim(self) -> None:
        for s in self.riders:
            taken = s.open & self.explains
            if "failures" in taken and s.failure_kind not in self.fails:
                taken.discard("failures")
            self.felt += len(taken)
            s.open -= taken


def probe_scope(s: Sick) -> dict[str, str]:
    """A probe's own cause names the probe (and its carrier): not the path's target."""
    return {"carrier": s.carrier, "probe": s.probe} if s.carrier else {"probe": s.probe}


ALL = frozenset(("ttft", "tpot", "failures"))
FIRST = frozenset(("ttft",))
NET_FAILS = frozenset(("timeout", "connect", "stream"))


#: Seconds the client's kernel waits for its SYN's retries: 1 s each for the first few
#: (Linux 6.7+), or 1, 2, 4 s (older kernels).
SYN_RETRY = (1.0, 2.0)


def syn_late(p: CarrierPath) -> Range:
    """How late a new connection to the carrier opens for its dropped first SYNs."""
    if not p.syn_drops:
        return (0.0, 0.0)
    return (p.syn_drops * SYN_RETRY[0],
            sum(SYN_RETRY[1] ** i for i in range(p.syn_drops)) + 0.1)


def plus(a: Range, b: Range) -> Range:
    return (a[0] + b[0], a[1] + b[1])


def slow_setup(lab: Lab, p: CarrierPath, slo_ttft: float, lost: bool) -> bool:
    """Whether the carrier's probe opens its connections over the setup line (share x its
    TTFT SLO; the lab's handshake is with the carrier's proxy, a round trip of nothing):
    every new connection when the carrier drops its first SYNs; those that lose a SYN or
    its answer to ``loss``, unless a loss finding takes them over."""
    th = lab.th
    line = th.connection_setup_share * slo_ttft
    if p.syn_drops:
        late = syn_late(p)
        if not lab.new_connections() or \
                late[1] >= lab.config.probes[0].timeouts.connect:
            # Pooled connections (few or no new ones in the window), or some that time out.
            raise Ambiguous
        return need(over(late, line))
    dropped = stream_drop(p.loss, p.stream_loss)
    if not dropped or lost:
        return False
    # A SYN or its answer lost: that connection opens a second late (twice: rarer still).
    if not need(over((SYN_RETRY[0], SYN_RETRY[0] + 0.1), line)) or not lab.new_connections():
        return False
    n_lo, n_hi = lab.probe_count(1.0)
    first = 1 - (1 - dropped) ** 2
    return need(drawn(n_lo, n_hi, first, first, 0.05))


def network(lab: Lab, sick: list[Sick], eng: dict[str, Range]) -> list[Found]:
    """Step 2 per carrier: path findings first (loss, route or RTT floor, jitter), then the
    probe's own (connection setup, stream stalls), each claiming in that order."""
    th, (slo_ttft, slo_tpot) = lab.th, slo(lab)
    paths = lab.config.paths
    assert paths is not None
    bursts = lab.config.diagnosis.window / paths.interval
    n_lo, n_hi = math.floor(bursts * 0.85) * paths.burst, math.ceil(bursts * 1.1) * paths.burst
    out: list[Found] = []
    for carrier in CARRIERS:
        # A path fault no one feels is a verdict only over its alert's line (own).
        riders = [s for s in sick if s.carrier == carrier]
        p = lab.scenario.path(carrier)
        # Path causes are scoped like their alerts: the carrier and the path's target.
        scope = {"carrier": carrier, "target": paths.carriers[carrier][0].name}

        def add(cause: str, explains: frozenset[str], riders: list[Sick] = riders,
                scope: dict[str, str] = scope, own: bool = False) -> None:
            f = Found("network", cause, scope, explains, NET_FAILS, riders, own=own)
            f.claim()
            out.append(f)

        streamed = (p.stream_loss / STREAM_SPREAD, p.stream_loss * STREAM_SPREAD)
        # In a peak window over a clean off-peak phase, a loss over peak_min_loss is the
        # peak's congestion (it replaces packet_loss; its off-peak is 0).
        peak = lab.scenario.peak
        if need(drawn(n_lo, n_hi, p.loss, p.loss, th.peak_min_loss if peak else th.loss_ratio)
                if p.loss else False):
            # The probe's stream loss, if any, joins this finding (docs/dev/diagnosis.md).
            add("peak_congestion" if peak else "packet_loss", ALL, own=True)
        elif p.stream_loss and need(over(streamed, th.loss_ratio)):
            # Over LLMProbeStreamPacketLoss's line with ICMP clean: a finding of its own,
            # scoped to the carrier's probe, whether or not it feels it.
            [probe] = [q.name for q in lab.config.probes if q.carrier == carrier]
            add("packet_loss", ALL, scope={"carrier": carrier, "probe": probe}, own=True)
        elif any(s.maybe_failing for s in riders):
            raise Ambiguous  # failures no finding would explain
        moved = p.hops is not None and p.hops != list(DEFAULT_HOPS[carrier])
        rtt = (p.delay * 0.9, p.delay * 1.1 + p.jitter + 0.005)
        floor = (rtt[0] * th.rtt_round_trips, rtt[1] * th.rtt_round_trips)
        if moved:
            # The generator moves a route only to a worse class: LLMPathRouteDegraded's line.
            add("route_change", ALL, own=True)
        elif riders and need(over(floor, th.rtt_budget_share * slo_ttft)):
            # No alert for an RTT floor: a verdict only where a probe feels it.
            add("rtt_floor", FIRST)
        if need(over((p.jitter / 2, p.jitter), th.jitter_seconds)):
            add("jitter", frozenset(("ttft", "tpot")), own=True)
        lost = any(f.scope.get("carrier") == carrier and f.cause in (
            "packet_loss", "peak_congestion") for f in out)
        [mine] = [q for q in lab.config.probes if q.carrier == carrier]
        if slow_setup(lab, p, mine.slo.ttft_p95_seconds or slo_ttft, lost):
            f = Found("network", "connection_setup", {"carrier": carrier, "probe": mine.name},
                      frozenset(("failures",)), NET_FAILS,
                      [s for s in riders if s.probe == mine.name], own=True)
            f.claim()
            out.append(f)
        for s in riders:
            stalled = over((p.stall, p.stall), th.stall_seconds)
            if "tpot" in s.open and need(stalled) and not need(over(eng["itl"], slo_tpot)):
                add("stream_stalls", frozenset(("tpot",)), [s], probe_scope(s))
    return out


def engine(lab: Lab, sick: list[Sick], eng: dict[str, Range], name: str
           ) -> tuple[list[Found], bool, bool]:
    """Step 3, then the GPU step's replacement of the split; (findings, first token slow,
    decode slow)."""
    slo_ttft, slo_tpot = slo(lab)
    scope = {"engine": name}
    if lab.scenario.simulator.down:
        f = Found("engine", "down", scope, ALL, NET_FAILS | {"server"}, sick, own=True,
                  hard=True)
        f.claim()
        return [f], True, False
    # The engine's own P95s, as read from its histograms (the lab's simulator has vLLM's).
    first = need(over(read_from(VLLM_TTFT, eng["ttft_p95"], eng["ttft"]), slo_ttft))
    decode = need(over(read_from(VLLM_ITL, eng["itl"], eng["itl"]), slo_tpot))
    found: list[Found] = []
    queue = over(eng["share"], lab.th.queue_share)
    if queue is None and first and not decode and not any("failures" in s.open for s in sick):
        # A queue or a slow prefill, the knobs do not say which: long users' prompts take
        # either over (step 5), and nothing else may rely on which it is (``undecided``).
        found.append(Found("engine", "slow_prefill", scope, FIRST, frozenset(), sick,
                           own=True, undecided=True))
    # A queue over LLMEngineCapacityBound's line is a verdict however fast the answers.
    elif need(queue):
        found.append(Found("engine", "queueing", scope, FIRST | {"failures"},
                           frozenset(("timeout",)), sick, own=True))
    elif first or decode:
        if first:
            found.append(Found("engine", "slow_prefill", scope, FIRST, frozenset(), sick,
                               own=True))
        if decode:
            found.append(Found("engine", "slow_decode", scope, frozenset(("tpot",)),
                               frozenset(), sick, own=True))
    for f in found:
        f.claim()
    return gpu(lab, found, scope, sick, first, decode), first, decode


XID_FAILS = frozenset(("server", "stream", "timeout", "connect"))
#: GPU causes whose own numbers page (LLMGPUThrottled, LLMGPUMemoryNearFull): verdicts under
#: a fast engine too; the others only explain a slow one.
GPU_OWN = ("throttling", "memory_full")


def gpu(lab: Lab, found: list[Found], scope: dict[str, str], sick: list[Sick], first: bool,
        decode: bool) -> list[Found]:
    th, g, slow = lab.th, lab.scenario.gpu, first or decode
    splits = [f for f in found if f.cause in ("slow_prefill", "slow_decode")]

    def exact(value: float, threshold: float, above: bool) -> bool:
        if abs(value - threshold) < 0.01:
            raise Ambiguous
        return value > threshold if above else value < threshold

    causes = []
    if g.xids:
        # Any XID in the window (the runner raises them at its middle), engine slow or not.
        causes.append("xid_errors")
    if set(g.throttle) & set(th.throttle_reasons):
        causes.append("throttling")
    if exact(g.memory_used, th.gpu_memory_ratio, True):
        causes.append("memory_full")
    if slow and exact(g.utilization, th.gpu_underutilized, False):
        causes.append("underutilized")
    if slow and (g.pcie_width < Gpu().pcie_width or g.nvlink_down or g.nvlink_replays):
        causes.append("interconnect")  # GPU 0's links; alone they explain nothing
    if decode and exact(g.dram_bw, th.dram_bandwidth, True):
        causes.append("memory_bandwidth")
    if len(causes) > 1:
        raise Ambiguous  # two GPU causes: their order is by strength
    if causes and any(f.undecided for f in found):
        raise Ambiguous  # a GPU cause takes slow_prefill, not a queue
    if not causes:
        return found
    cause = causes[0]
    takes = ("slow_decode",) if cause == "memory_bandwidth" else ("slow_prefill", "slow_decode")
    taken = [f for f in splits if f.cause in takes]
    kept = [f for f in found if f not in taken]
    # The GPU's verdict takes over what the split explained (its evidence, its probes).
    felt = sum(f.felt for f in taken)
    if cause == "xid_errors":
        # A fault on its own: it explains any symptom of the engine's probes still open
        # and the failures a dead or resetting card causes.
        f = Found("gpu", cause, dict(scope), ALL, XID_FAILS, sick, own=True, hard=True,
                  felt=felt)
        f.claim()
        return [*kept, f]
    where = {**scope, "gpu": "0"} if cause == "interconnect" else dict(scope)
    return [*kept, Found("gpu", cause, where, frozenset(), frozenset(), [], own=True,
                         felt=felt)]


def long_prompts(lab: Lab, eng: dict[str, Range], sick: list[Sick], found: list[Found],
                 first: bool, name: str) -> list[Found]:
    """Step 5's users' prompts too long for the SLO: they replace the engine's slow prefill
    or queue (removed from ``found``) and explain what the probes still feel first."""
    if lab.scenario.simulator.down:
        return []
    rule = prompts_too_long(lab, eng)
    if rule is False:
        return []
    takes = [f for f in found if f.layer == "engine" and f.cause in ("slow_prefill", "queueing")]
    if not first:
        # Whether long prompts replace a queue the first token does not feel, the
        # documentation leaves open (the chain's rule needs a slow first token).
        if any(f.cause == "queueing" for f in takes):
            raise Ambiguous
        return []
    if rule is None or any(f.layer == "gpu" for f in found):
        # Undecided, or a GPU cause beside it: both replace a slow prefill, and whether the
        # other stays a verdict of its own is not fixed by the knobs.
        raise Ambiguous
    for f in takes:
        found.remove(f)
    f = Found("application", "long_prompts", {"engine": name}, frozenset(("ttft", "tpot")),
              frozenset(("timeout",)), sick, own=any(t.own for t in takes),
              felt=sum(t.felt for t in takes))
    f.claim()
    return [f]


def concurrency(lab: Lab, eng: dict[str, Range], found: list[Found], first: bool
                ) -> list[Found]:
    """Step 5's users' rate: a queue that slows the first token while the users send over
    ``request_rate_growth`` x their baseline phase's rate (a load under capacity then, the
    same slots) is theirs: ``client_concurrency`` takes ``queueing`` over."""
    s = lab.scenario
    queued = [f for f in found if f.cause == "queueing"]
    if s.baseline_load is None or s.baseline <= 0 or not queued or not first:
        return found
    before = engine_model(Lab(s.model_copy(update={"load": s.baseline_load}), lab.config,
                              lab.th))
    if before["rho"][1] >= 1 / MARGIN:
        raise Ambiguous  # the baseline queued too: its served rate is not its load's
    rate, served = s.baseline_load.rate, eng["served"]
    if not need(over((served[0] / (rate * 1.1), served[1] / (rate * 0.9)),
                     lab.th.request_rate_growth)):
        return found
    q = queued[0]
    grown = Found("application", "client_concurrency", dict(q.scope), q.explains, q.fails, [],
                  felt=q.felt)
    return [grown if f is q else f for f in found]


def application(sick: list[Sick], slow: bool) -> list[Found]:
    """429s are a cause upstream of the probes: one verdict, with every probe it fails as
    its evidence (docs/dev/diagnosis.md), felt as much as all of them together. A probe's own
    timeout is that probe's: one verdict each (one expectation, scope unchecked), each felt
    by its probe alone."""
    limited = [s for s in sick if s.failure_kind == "rate_limited"]
    timed_out = [s for s in sick if s.failure_kind == "timeout" and "failures" in s.open
                 and not slow]
    out = []
    for cause, kind, groups in (("rate_limited", "rate_limited", [limited] if limited else []),
                                ("client_timeouts", "timeout", [[s] for s in timed_out])):
        for riders in groups:
            f = Found("application", cause, {}, frozenset(("failures",)), frozenset((kind,)),
                      riders)
            f.claim()
            out.append(f)
    return out


def ordered(found: list[Found]) -> list[Found]:
    """docs/dev/diagnosis.md's order: the primary explains most of what the probes feel (of
    equals, a fault on its own, then the first in chain order); the others follow in chain
    order, those the probes feel first. ``found`` is in chain order, and two causes of one
    layer are never expected (their order is by strength), so the layer's index is its
    place."""
    out = sorted(found, key=lambda f: 0 if f.claimed or f.hard else 1)
    if out:
        first = max(out, key=lambda f: (f.felt, f.hard, -out.index(f)))
        out.remove(first)
        out.insert(0, first)
    return out


def alone(lab: Lab, faults: Faults) -> bool:
    """Nothing but ``faults`` is turned: default paths, a healthy GPU, the probes' usual
    timeouts, the engine up."""
    s = lab.scenario
    return (not s.paths and s.gpu == Gpu() and not s.probes.timeouts and not s.simulator.down
            and lab.faults == faults)


def unobserved(lab: Lab, eng: dict[str, Range], name: str) -> list[dict[str, object]]:
    """Every scrape of the engine's metrics fails (HTTP 500) on an engine that serves well:
    its layer is unobserved, not healthy, so ``exporter/no_data`` scoped to it. Decided
    alone, and only where no probe feels anything (a slow probe's no_data is about the
    probe, which the model does not follow)."""
    s = lab.scenario
    if not alone(lab, Faults(metrics_error_rate=1.0)) or s.simulator.config or s.baseline:
        raise Ambiguous
    if any(sick.open for sick in probe_symptoms(lab, eng)):
        raise Ambiguous
    return [{"layer": "exporter", "cause": "no_data", "scope": {"engine": name}}]


def peak_alone(s: Scenario) -> bool:
    """A peak scenario the model decides: paths' loss and nothing else turned, the same load
    in both phases (every drift rule compares the peak with the off-peak phase, which the
    model does not follow but for a path's loss)."""
    clean = CarrierPath().model_dump(exclude={"loss"})
    return (all(p.model_dump(exclude={"loss"}) == clean for p in s.paths.values())
            and s.simulator == Simulator() and s.baseline_simulator is None and s.gpu == Gpu()
            and not s.probes.timeouts and (s.baseline_load or BASELINE_LOAD) == s.load)


def hogs(s: Scenario) -> list[str]:
    """The host causes of the hogs a scenario starts beside the engine."""
    h = s.host
    if h is None:
        return []
    return [cause for cause, on in (("cpu_saturated", h.cpu_hog), ("memory_pressure",
                                    h.memory_hog), ("io_pressure", h.io_hog)) if on]


def host(lab: Lab, name: str) -> list[dict[str, object]]:
    """A hog beside an engine that meets its SLOs without it: its pressure's verdict, a
    page of its own. One kind of hog (two are ordered by strength), the rest of the
    scenario expecting nothing (a host verdict takes the engine's split over; what a
    probe then feels of a slowed engine is not modelled)."""
    causes = hogs(lab.scenario)
    rest = Lab(lab.scenario.model_copy(update={"host": None}), lab.config, lab.th)
    if len(causes) > 1 or expected(rest):
        raise Ambiguous
    return [{"layer": "host", "cause": causes[0], "scope": {"engine": name}}]


def expected(lab: Lab) -> list[dict[str, object]]:
    """The verdicts the chain should give, primary first; [] for healthy. Raises Ambiguous
    (or Unexplained) when the knobs do not decide it with the margins above."""
    name = lab.config.engines[0].name
    if lab.scenario.peak and not peak_alone(lab.scenario):
        raise Ambiguous
    if hogs(lab.scenario):
        return host(lab, name)
    # The first token's budget beyond queue and prefill, decided alone (budget.py builds
    # on this module's bounds, hence imported here).
    from tests.support.lab import budget
    got = budget.expected(lab)
    if got is not None:
        return got
    if lab.scenario.simulator.flags.get("dp_ranks", 1) != 1:
        if imbalanced(lab):
            # An imbalance of the waiting queue replaces queueing (docs/dev/diagnosis.md).
            return [{"layer": "engine", "cause": "imbalance",
                     "scope": {"engine": name, "dp_rank": "1"}}]
        raise Ambiguous  # data-parallel ranks beside anything else: not modelled
    eng = engine_model(lab)
    if kv_may_preempt(lab):
        if kv_fills(lab, eng) and kv_alone(lab, eng):
            # kv_cache_pressure replaces the queue (docs/dev/diagnosis.md).
            return [{"layer": "engine", "cause": "kv_cache_pressure", "scope": {"engine": name}}]
        raise Ambiguous  # a cache that may preempt beside anything else: not modelled
    if lab.faults.metrics_error_rate:
        return unobserved(lab, eng, name)
    sick = probe_symptoms(lab, eng)
    found = network(lab, sick, eng)
    eng_found, first, decode = engine(lab, sick, eng, name)
    eng_found = concurrency(lab, eng, eng_found, first)
    prompts = long_prompts(lab, eng, sick, eng_found, first, name)
    if any(f.undecided for f in eng_found):
        raise Ambiguous  # a split between queueing and slow_prefill no step took over
    found += eng_found + prompts + application(sick, first or decode)
    if any(s.open for s in sick):
        raise Unexplained
    out: list[dict[str, object]] = []
    for f in ordered([f for f in found if f.claimed or f.own]):
        if any(o["layer"] == f.layer for o in out):
            if any((o["layer"], o["cause"]) == (f.layer, f.cause) and not f.scope for o in out):
                continue  # the same per-probe cause on several probes: one expectation
            raise Ambiguous  # two causes in one layer: ordered by strength
        out.append({"layer": f.layer, "cause": f.cause, "scope": f.scope})
    return out

