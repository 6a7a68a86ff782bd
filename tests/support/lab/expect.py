"""What the decision chain should conclude from a scenario's knobs, derived from the knob
values, a bounded model of the lab and the run's thresholds, never by running the chain.

The model bounds each statistic the chain reads (a probe's TTFT and TPOT, the engine's TTFT,
inter-token P95 and queue share, a path's loss, RTT and jitter) between a lower and an upper
value computed from the knobs (network delay and jitter, the simulator's step times and
capacity, the load), then applies the documented rules of docs/diagnosis.md (symptom per
probe, attribution in chain order, an engine split replaced by its GPU why, a layer over an
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
from exporter.simulator.engine_config import EngineConfig
from exporter.simulator.faults import Faults
from tests.support.lab.scenario import CARRIERS, DEFAULT_HOPS, Scenario

MARGIN = 1.3
CERTAIN = 0.98
#: Linux's minimum retransmission timeout (TCP_RTO_MIN): a lost request segment, alone in
#: flight, costs the probe at least this before its first token.
TCP_RTO_MIN = 0.2
#: The short probe profile's prompt is one sentence and a nonce: under this many tokens.
PROBE_PROMPT_MAX = 64

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
    """One probe's symptoms (docs/diagnosis.md, step 1) and which are still unexplained."""

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
        s = self.scenario.simulator
        # Launch flags that are engine knobs (kv_tokens, ...) first, then the run-time ones.
        fixed: dict[str, Any] = {k: v for k, v in s.flags.items()
                                 if k in EngineConfig.__dataclass_fields__}
        return EngineConfig(**fixed).merged(dict(s.config))

    @property
    def faults(self) -> Faults:
        return Faults().merged(self.scenario.simulator.faults)

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
    first_hi = faults.slow_first_token + step_hi * (
        math.ceil(max(load.prompt_tokens, PROBE_PROMPT_MAX) / cfg.max_num_batched_tokens) + 1)
    if rho[1] < 1:
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
    else:
        raise Ambiguous
    return {"step": (step_lo, step_hi), "itl": (step_lo, step_hi), "rho": rho, "wait": wait,
            "share": share, "ttft": (first_lo + wait[0], first_hi + wait[1])}


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
        late = either(over(total, timeouts.total), over(ttft, timeouts.first_token))
        if need(late) is True:
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
        if need(drawn(n_lo, n_hi, p.loss, p.loss, th.loss_ratio) if p.loss else False):
            # The probe's stream loss, if any, joins this finding (docs/diagnosis.md).
            add("packet_loss", ALL, own=True)
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
        for s in riders:
            setup = s.open & FIRST | ({"failures"} & s.open
                                      if s.failure_kind in NET_FAILS else set())
            if setup:
                ttft_lo = max(eng["ttft"][0] + p.delay - p.jitter,
                              slo_ttft if "ttft" in s.open else 0.0)
                connect = (p.delay - p.jitter, p.delay + p.jitter + (1.0 if p.loss else 0.0))
                if need(over(connect, th.connection_setup_share * ttft_lo)):
                    add("connection_setup", FIRST | {"failures"}, [s], probe_scope(s))
            stalled = over((p.stall, p.stall), th.stall_seconds)
            if "tpot" in s.open and need(stalled) and not need(over(eng["itl"], slo_tpot)):
                add("stream_stalls", frozenset(("tpot",)), [s], probe_scope(s))
    return out


def engine(lab: Lab, sick: list[Sick], eng: dict[str, Range], name: str
           ) -> tuple[list[Found], bool, bool]:
    """Step 3, then the GPU step's replacement of the split; (findings, slow, decode slow)."""
    slo_ttft, slo_tpot = slo(lab)
    scope = {"engine": name}
    if lab.scenario.simulator.down:
        f = Found("engine", "down", scope, ALL, NET_FAILS | {"server"}, sick, own=True,
                  hard=True)
        f.claim()
        return [f], True, False
    first, decode = need(over(eng["ttft"], slo_ttft)), need(over(eng["itl"], slo_tpot))
    found: list[Found] = []
    # A queue over LLMEngineCapacityBound's line is a verdict however fast the answers.
    if need(over(eng["share"], lab.th.queue_share)):
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
    slow = bool(first or decode)
    return gpu(lab, found, scope, slow, decode), slow, decode


#: GPU causes whose own numbers page (LLMGPUThrottled, LLMGPUMemoryNearFull): verdicts under
#: a fast engine too; the others only explain a slow one.
GPU_OWN = ("throttling", "memory_full")


def gpu(lab: Lab, found: list[Found], scope: dict[str, str], slow: bool, decode: bool
        ) -> list[Found]:
    th, g = lab.th, lab.scenario.gpu
    splits = [f for f in found if f.cause in ("slow_prefill", "slow_decode")]

    def exact(value: float, threshold: float, above: bool) -> bool:
        if abs(value - threshold) < 0.01:
            raise Ambiguous
        return value > threshold if above else value < threshold

    causes = []
    if set(g.throttle) & set(th.throttle_reasons):
        causes.append("throttling")
    if exact(g.memory_used, th.gpu_memory_ratio, True):
        causes.append("memory_full")
    if slow and exact(g.utilization, th.gpu_underutilized, False):
        causes.append("underutilized")
    if decode and exact(g.dram_bw, th.dram_bandwidth, True):
        causes.append("memory_bandwidth")
    if len(causes) > 1:
        raise Ambiguous  # two GPU causes: their order is by strength
    if not causes:
        return found
    cause = causes[0]
    takes = ("slow_decode",) if cause == "memory_bandwidth" else ("slow_prefill", "slow_decode")
    taken = [f for f in splits if f.cause in takes]
    kept = [f for f in found if f not in taken]
    # The GPU's verdict takes over what the split explained (its evidence, its probes).
    return [*kept, Found("gpu", cause, dict(scope), frozenset(), frozenset(), [], own=True,
                         felt=sum(f.felt for f in taken))]


def application(sick: list[Sick], slow: bool) -> list[Found]:
    out = []
    for s in sick:
        if s.failure_kind == "rate_limited":
            f = Found("application", "rate_limited", {}, frozenset(("failures",)),
                      frozenset(("rate_limited",)), [s])
        elif s.failure_kind == "timeout" and "failures" in s.open and not slow:
            f = Found("application", "client_timeouts", {}, frozenset(("failures",)),
                      frozenset(("timeout",)), [s])
        else:
            continue
        f.claim()
        out.append(f)
    return out


def ordered(found: list[Found]) -> list[Found]:
    """docs/diagnosis.md's order: the primary explains most of what the probes feel (of
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


def expected(lab: Lab) -> list[dict[str, object]]:
    """The verdicts the chain should give, primary first; [] for healthy. Raises Ambiguous
    (or Unexplained) when the knobs do not decide it with the margins above."""
    name = lab.config.engines[0].name
    eng = engine_model(lab)
    sick = probe_symptoms(lab, eng)
    found = network(lab, sick, eng)
    eng_found, slow, _ = engine(lab, sick, eng, name)
    found += eng_found + application(sick, slow)
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

