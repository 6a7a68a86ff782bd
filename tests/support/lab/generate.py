"""A seeded generator of lab scenarios: healthy ones, single faults and double faults
(a network fault on one carrier with an engine, GPU or application fault), each with the
verdicts ``expect.py`` derives from its knobs and the run's thresholds.

    python -m tests.support.lab.generate --seed 7 --n 20 --out /tmp/scenarios

Each draw picks knob values inside the lab's ranges (per-carrier loss 0-15 %, delay
20-300 ms, jitter, stalls, route changes; engine capacity, prefill and decode speed, a small
KV cache, a pinned data-parallel rank; GPU states and XID events; load rate and prompt size, long users' prompts over few slots; probe
timeouts; the SLOs and the diagnosis window), builds
the scenario, and keeps it only when the expected answer is decided with the margins of
``expect.py`` and has the intended shape (no verdict with every knob under its line, one
verdict, or two in different layers); otherwise it draws again. The same seed gives the same scenarios.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from exporter import metrics
from exporter.config.load import parse_config
from exporter.config.models import Config
from exporter.config.values import format_duration
from exporter.diagnosis.thresholds import Thresholds, resolve
from exporter.simulator.engine_config import EngineConfig
from tests.support.lab.expect import (
    SETTLE_LEAD,
    Ambiguous,
    Lab,
    drawn,
    expected,
    need,
    over,
    slo,
)
from tests.support.lab.runner import DIAGNOSIS, exporter_config
from tests.support.lab.scenario import CARRIERS, DEFAULT_HOPS, Scenario, hop_networks

Spec = dict[str, Any]
#: Draws per scenario before the generator gives up on an intent.
TRIES = 4000
#: Value draws per choice of knobs before another choice is tried.
PER_PLAN = 200
LAB_WINDOW = DIAGNOSIS["window"]


def _nested(spec: Spec, *keys: str) -> Spec:
    for k in keys:
        spec = spec.setdefault(k, {})
    return spec


def _round(x: float, digits: int = 3) -> float:
    return round(x, digits)


def _dur(x: float) -> str:
    """Seconds as the scenario format writes a duration (whole milliseconds)."""
    return format_duration(round(x, 3))


@functools.cache
def route_alternatives(carrier: str, th: Thresholds) -> tuple[str, ...]:
    """Networks of the route table whose class ranks below the carrier's default route."""
    from exporter.checks.path.routes import load_table

    table = load_table()
    single = {next(iter(r.networks)): r.route_class for r in table.rules if len(r.networks) == 1}
    here = th.route_rank(single[DEFAULT_HOPS[carrier][0]])
    return tuple(sorted(n for n, c in single.items() if th.route_rank(c) > here
                        and hop_networks(n) == [n]))



def quiet(lab: Lab) -> bool:
    """No knob over any line, felt or not: a healthy run in the strict sense, where the
    generated alerts stay quiet too (a lossy path nobody's probe feels is no verdict, yet
    its loss alert pends)."""
    th, g, (slo_ttft, _) = lab.th, lab.scenario.gpu, slo(lab)
    paths = lab.config.paths
    assert paths is not None
    bursts = lab.config.diagnosis.window / paths.interval
    n = math.ceil(bursts * 1.1) * paths.burst
    try:
        for carrier in CARRIERS:
            p = lab.scenario.path(carrier)
            rtt = (p.delay * 0.9, p.delay * 1.1 + p.jitter + 0.005)
            if (p.hops is not None and p.hops != list(DEFAULT_HOPS[carrier])) or p.syn_drops \
                    or need(
                    drawn(n, n, p.loss, p.loss, th.loss_ratio) if p.loss else False) or need(
                    over((rtt[0] * th.rtt_round_trips, rtt[1] * th.rtt_round_trips),
                         th.rtt_budget_share * slo_ttft)) or need(
                    over((p.jitter / 2, p.jitter), th.jitter_seconds)) or need(
                    over((p.stall, p.stall), th.stall_seconds)):
                return False
    except Ambiguous:
        return False
    return not (set(g.throttle) & set(th.throttle_reasons) or g.memory_used >= th.gpu_memory_ratio
                or g.xids or lab.faults.rate_limit_rate or lab.scenario.simulator.down)


# --- knobs: each sets one fault on a spec, drawn from its range -----------------------------
#: SLOs on bucket bounds of the probe histograms (an SLO between two bounds would be judged
#: on an interpolated quantile).
_TTFT_SLOS = [b for b in metrics.PROBE_TTFT.buckets or () if 0.1 <= b <= 2.0]
_TPOT_SLOS = [b for b in metrics.PROBE_TPOT.buckets or () if 0.03 <= b <= 0.3]


def net_delay(rng: random.Random, spec: Spec, carrier: str) -> None:
    d = rng.uniform(0.02, 0.3)
    _nested(spec, "paths", carrier).update(delay=_dur(d), jitter=_dur(rng.uniform(0, d / 8)))


def net_jitter(rng: random.Random, spec: Spec, carrier: str) -> None:
    """Jitter over its line on a short path, under SLOs loose enough that the model can
    bound what the probe feels (a jitter of j stretches a TPOT by up to 2j, a first token by
    up to 2(delay + j): tight SLOs leave every draw undecided)."""
    j = rng.uniform(0.06, 0.1)
    _nested(spec, "paths", carrier).update(delay=_dur(rng.uniform(j, j + 0.05)), jitter=_dur(j))
    _nested(spec, "exporter", "slo").update(
        ttft_p95_seconds=rng.choice([b for b in _TTFT_SLOS if b >= 1.0]),
        tpot_p95_seconds=max(_TPOT_SLOS))


def net_loss(rng: random.Random, spec: Spec, carrier: str) -> None:
    _nested(spec, "paths", carrier).update(loss=_round(rng.uniform(0, 0.15)))


def net_peak(rng: random.Random, spec: Spec, carrier: str) -> None:
    """Loss of 0-15 % on one carrier that only the evening peak has: a clean off-peak
    baseline phase, then the peak window opens with the loss."""
    _with_baseline(spec)
    spec["peak"] = True
    net_loss(rng, spec, carrier)


def net_stall(rng: random.Random, spec: Spec, carrier: str) -> None:
    _nested(spec, "paths", carrier).update(stall=_dur(rng.uniform(0.1, 4.0)),
                                           stall_after=rng.randint(4, 10))


def net_syn(rng: random.Random, spec: Spec, carrier: str) -> None:
    """The first SYN of every connection to one carrier's entry dropped, with probes 3-6 s
    apart so that each opens a connection of its own (an idle one is kept 2.5 s)."""
    _nested(spec, "paths", carrier)["syn_drops"] = 1
    _nested(spec, "probes")["interval"] = _dur(rng.uniform(3, 6))


def net_route(rng: random.Random, spec: Spec, carrier: str, th: Thresholds) -> None:
    spec["baseline"] = _dur(25)  # the old route is traced before it moves
    _nested(spec, "paths", carrier).update(hops=[rng.choice(route_alternatives(carrier, th))],
                                           delay=_dur(rng.uniform(0.02, 0.3)))


def eng_decode(rng: random.Random, spec: Spec) -> None:
    # Steps past 0.1 s take the lab's load over capacity, where the queue is undecided.
    _nested(spec, "simulator", "config")["decode_step"] = _round(rng.uniform(0.005, 0.1), 4)


def short_prompts(rng: random.Random, spec: Spec) -> None:
    """Half the time, users whose prompts are no longer than the probes' own: a slow
    prefill is then the engine's whatever rate it is judged at (long_prompts needs prompts
    over prompt_growth x the probes'; with the lab's 256 the verdict turns on which
    history span holds the engine's best rate, which the knobs do not fix)."""
    if rng.random() < 0.5:
        _nested(spec, "load")["prompt_tokens"] = rng.randint(8, 28)


def eng_first_token(rng: random.Random, spec: Spec) -> None:
    _nested(spec, "simulator", "faults")["slow_first_token"] = _round(rng.uniform(0, 2.0))
    short_prompts(rng, spec)


def eng_prefill(rng: random.Random, spec: Spec) -> None:
    _nested(spec, "simulator", "config")["prefill_tps"] = _round(rng.uniform(500, 40000), 0)
    short_prompts(rng, spec)


def eng_capacity(rng: random.Random, spec: Spec) -> None:
    seqs = rng.randint(1, 6)
    _nested(spec, "simulator", "config")["max_num_seqs"] = seqs
    spec["load"] = {"rate": _round(rng.uniform(1, 6), 2), "prompt_tokens": 256,
                    "max_tokens": rng.randint(32, 128),
                    "concurrency": rng.randint(seqs + 2, 24)}


def app_concurrency(rng: random.Random, spec: Spec) -> None:
    """The users' request rate grows at the same capacity: 8-16 slots (the users' then,
    beside the probes' four), a baseline phase at 15-35 % of what they serve, then 1.4-2.5x
    it, so the queue is certain and its growth is the users'."""
    seqs, tokens = rng.randint(8, 16), rng.randint(32, 96)
    cfg = EngineConfig(max_num_seqs=seqs)
    served = seqs / ((tokens + 2) * (cfg.decode_step + cfg.decode_step_per_seq * seqs))
    load = {"prompt_tokens": 256, "max_tokens": tokens,
            "concurrency": rng.randint(seqs + 6, seqs + 20)}
    _with_baseline(spec)
    for phase in ("simulator", "baseline_simulator"):
        _nested(spec, phase, "config")["max_num_seqs"] = seqs
    spec["baseline_load"] = {**load, "rate": _round(max(0.6, served * rng.uniform(0.15, 0.35)),
                                                   2)}
    spec["load"] = {**load, "rate": _round(min(200.0, served * rng.uniform(1.4, 2.5)), 2)}


def eng_down(rng: random.Random, spec: Spec) -> None:
    spec["baseline"] = _dur(15)  # the engine is seen up before it stops
    _nested(spec, "simulator")["down"] = True


def gpu_state(rng: random.Random, spec: Spec, th: Thresholds) -> None:
    """One GPU state away from the lab's healthy card, on either side of its threshold, with
    a slower engine most of the time (the fake NVML cannot slow the simulator; a throttled
    card's steps are slower)."""
    gpu = _nested(spec, "gpu")
    which = rng.choice(("throttle", "memory_used", "utilization", "dram_bw"))
    lines = {"memory_used": th.gpu_memory_ratio, "utilization": th.gpu_underutilized,
             "dram_bw": th.dram_bandwidth}
    if which == "throttle":
        gpu["throttle"] = [rng.choice(metrics.GPU_CLOCK_EVENT_REASONS)]
    else:
        line = lines[which]
        gpu[which] = _round(rng.uniform(line + 0.02, 1.0) if rng.random() < 0.5
                            else rng.uniform(0.2, line - 0.02), 2)
    if rng.random() < 0.8:
        rng.choice((eng_decode, eng_first_token))(rng, spec)


def gpu_idle(rng: random.Random, spec: Spec, th: Thresholds) -> None:
    """A GPU busy well under the underutilized line under an engine that is slow (its
    first token or its steps): the bottleneck is off the GPU."""
    _nested(spec, "gpu")["utilization"] = _round(rng.uniform(0.05, th.gpu_underutilized - 0.05), 2)
    rng.choice((eng_decode, eng_first_token))(rng, spec)


def gpu_bandwidth(rng: random.Random, spec: Spec, th: Thresholds) -> None:
    """DRAM bandwidth over its line under an engine whose decode steps are slow (40-80
    ms, short of queueing the lab's load), against a TPOT SLO of a bucket bound at most half
    a step and a first-token SLO the slower steps leave met (2 s)."""
    _nested(spec, "gpu")["dram_bw"] = _round(rng.uniform(th.dram_bandwidth + 0.03, 1.0), 2)
    step = _round(rng.uniform(0.04, 0.08), 4)
    _nested(spec, "simulator", "config")["decode_step"] = step
    tpot = [b for b in metrics.PROBE_TPOT.buckets or () if 0.02 <= b <= step / 2]
    _nested(spec, "exporter", "slo").update(ttft_p95_seconds=2.0,
                                            tpot_p95_seconds=rng.choice(tpot))


#: XIDs the driver reports for real faults (graphics engine exception, MMU fault, double-bit
#: ECC error, row remapping, fallen off the bus, contained / uncontained ECC errors).
XID_CODES = (13, 31, 48, 63, 64, 79, 94, 95)


def gpu_xid(rng: random.Random, spec: Spec) -> None:
    """One to three XID events in the window, on a card otherwise healthy; a slower engine
    half the time (the XID's verdict takes over the engine's split)."""
    _nested(spec, "gpu")["xids"] = [[0, rng.choice(XID_CODES)] for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        rng.choice((eng_decode, eng_first_token))(rng, spec)


def gpu_link(rng: random.Random, spec: Spec) -> None:
    """GPU 0's links: PCIe trained narrower than x16, NVLinks down, or link 0 replaying;
    with a slower engine most of the time (alone, a link explains nothing)."""
    gpu = _nested(spec, "gpu")
    which = rng.choice(("pcie_width", "nvlink_down", "nvlink_replays"))
    if which == "pcie_width":
        gpu[which] = rng.choice((1, 2, 4, 8))
    elif which == "nvlink_down":
        gpu[which] = rng.randint(1, 6)
    else:
        gpu[which] = _round(rng.uniform(0.5, 50), 1)
    if rng.random() < 0.8:
        rng.choice((eng_decode, eng_first_token))(rng, spec)


def host_hog(rng: random.Random, spec: Spec) -> None:
    """One kind of hog in the engine's cgroup (tests/support/cgroups.py) beside the lab's
    usual load."""
    spec["host"] = rng.choice(({"cpu_hog": rng.randint(2, 8)},
                               {"memory_hog": f"{rng.choice((64, 96, 128, 192, 256))}Mi"},
                               {"io_hog": True}))


def host_clean(rng: random.Random, spec: Spec) -> None:
    """The engine alone in a cgroup of its own, which the host check reads."""
    spec["host"] = {}


def app_rate_limit(rng: random.Random, spec: Spec) -> None:
    _nested(spec, "simulator", "faults")["rate_limit_rate"] = _round(rng.uniform(0, 0.5))


def app_timeouts(rng: random.Random, spec: Spec) -> None:
    total = _dur(rng.uniform(0.05, 1.0))
    _nested(spec, "probes", "timeouts").update(total=total, first_token=total)


def eng_kv(rng: random.Random, spec: Spec) -> None:
    """A KV cache of 1024-4096 tokens (a launch flag) under short prompts and long answers
    at 1.4-2.5 x what the slots serve: the cache fills and preempts, or, drawn small
    enough against the slots, does not decide."""
    seqs = rng.randint(12, 24)
    cfg = EngineConfig(max_num_seqs=seqs)
    prompt, tokens = rng.randint(8, 40), rng.randint(128, 384)
    served = seqs / ((tokens + 2) * (cfg.decode_step + cfg.decode_step_per_seq * seqs))
    _nested(spec, "simulator", "flags")["kv_tokens"] = rng.randint(1024, 4096)
    _nested(spec, "simulator", "config")["max_num_seqs"] = seqs
    spec["load"] = {"rate": _round(min(200.0, served * rng.uniform(1.4, 2.5)), 2),
                    "prompt_tokens": prompt, "max_tokens": tokens,
                    "concurrency": rng.randint(seqs + 8, 64)}


def eng_imbalance(rng: random.Random, spec: Spec) -> None:
    """Two data-parallel ranks of 2-4 slots each (launch flags), 80-95 % of the requests
    pinned to the last (``dp_pin_rate``), short prompts, at 1.4-2.5 x what that rank's
    slots serve over the pinned share: its queue fills to the load's in-flight cap while
    the other rank idles."""
    seqs, pin = rng.randint(2, 4), _round(rng.uniform(0.8, 0.95), 2)
    cfg = EngineConfig(max_num_seqs=seqs)
    prompt, tokens = rng.randint(8, 28), rng.randint(32, 64)
    served = seqs / ((tokens + 1) * (cfg.decode_step + cfg.decode_step_per_seq))
    _nested(spec, "simulator", "flags").update(dp_ranks=2, max_num_seqs=seqs)
    _nested(spec, "simulator", "faults")["dp_pin_rate"] = pin
    spec["load"] = {"rate": _round(served * rng.uniform(1.4, 2.5) / pin, 2),
                    "prompt_tokens": prompt, "max_tokens": tokens,
                    "concurrency": rng.randint(seqs + 6, 20)}


def app_long_prompts(rng: random.Random, spec: Spec) -> None:
    """Users' prompts of 1000-4000 tokens at a rate the engine's few slots cannot keep up
    with: their first tokens queue, and whether the prompts alone would cost over
    prompt_budget_share x the TTFT SLO at the engine's own prefill rate is what names
    long_prompts (the SLOs are drawn as for any scenario)."""
    seqs = rng.randint(5, 6)  # over the probes' four, so users' requests finish too
    cfg = EngineConfig(max_num_seqs=seqs)
    prompt, tokens = rng.randint(1000, 4000), rng.randint(16, 32)
    # 1.4-2.5 x what the slots serve at the simulator's fastest steps (prefill, then one
    # decode step per token), so the queue is certain.
    served = seqs / (prompt / cfg.prefill_tps + (tokens + 2) * cfg.decode_step)
    _nested(spec, "simulator", "config")["max_num_seqs"] = seqs
    spec["load"] = {"rate": _round(min(200.0, served * rng.uniform(1.4, 2.5)), 2),
                    "prompt_tokens": prompt, "max_tokens": tokens,
                    "concurrency": rng.randint(seqs + 2, seqs + 6)}
    # A decode step that carries a prefill chunk lasts up to max_num_batched_tokens /
    # prefill_tps longer: a TPOT SLO over that keeps the verdict on the first token.
    tpot = [b for b in metrics.PROBE_TPOT.buckets or () if 0.2 <= b <= 0.5]
    _nested(spec, "exporter", "slo")["tpot_p95_seconds"] = rng.choice(tpot)


def eng_frontend(rng: random.Random, spec: Spec) -> None:
    """Time in the engine's API server before it queues each request (tokenizing,
    templating), on either side of frontend_share x the TTFT SLO."""
    _nested(spec, "simulator", "faults")["frontend_delay"] = _round(rng.uniform(0, 2.5))


def eng_kv_transfer(rng: random.Random, spec: Spec) -> None:
    """A decode instance of a P/D pair whose KV handover takes 0-2.5 s more than its size."""
    _nested(spec, "simulator", "flags")["pd"] = True
    _nested(spec, "simulator", "faults")["kv_transfer_delay"] = _round(rng.uniform(0, 2.5))


def _with_baseline(spec: Spec) -> None:
    """A 40 s baseline phase the chain may compare with (its min_baseline 20 s)."""
    spec["baseline"] = _dur(40)
    _nested(spec, "exporter", "diagnosis")["min_baseline"] = "20s"


def eng_prefix(rng: random.Random, spec: Spec) -> None:
    """Users' system prompt of 500-3000 tokens, shared in the baseline and with a unique
    head after (a timestamp at its top), on an engine prefilling 1000-6000 tokens/s."""
    _with_baseline(spec)
    _nested(spec, "simulator", "flags")["prefill_tps"] = _round(rng.uniform(1000, 6000), 0)
    load = {"rate": 1, "prompt_tokens": rng.randint(64, 256),
            "system_prompt_tokens": rng.randint(500, 3000)}
    spec["baseline_load"] = {**load, "system_prompt": "shared"}
    spec["load"] = {**load, "system_prompt": "unique"}


def eng_spec(rng: random.Random, spec: Spec) -> None:
    """Speculative decoding of 2-5 draft tokens on 20-150 ms steps whose acceptance falls
    from 60-90 % in the baseline to 0-30 %."""
    _with_baseline(spec)
    _nested(spec, "simulator", "flags").update(speculative_tokens=rng.randint(2, 5),
                                               decode_step_ms=_round(rng.uniform(20, 150), 1))
    _nested(spec, "baseline_simulator", "config")["spec_acceptance"] = _round(
        rng.uniform(0.6, 0.9), 2)
    _nested(spec, "simulator", "config")["spec_acceptance"] = _round(rng.uniform(0, 0.3), 2)


def eng_metrics_error(rng: random.Random, spec: Spec) -> None:
    """Every scrape of the engine's metrics answered HTTP 500, under a load of 0.5-4 req/s
    the engine serves well or not."""
    _nested(spec, "simulator", "faults")["metrics_error_rate"] = 1.0
    _nested(spec, "load")["rate"] = _round(rng.uniform(0.5, 4), 2)


def app_load(rng: random.Random, spec: Spec) -> None:
    _nested(spec, "load").update(rate=_round(rng.uniform(0.5, 6), 2),
                                 prompt_tokens=rng.randint(32, 4000))


NETWORK: dict[str, Callable[..., None]] = {
    "delay": net_delay, "jitter": net_jitter, "loss": net_loss, "stall": net_stall,
    "route": net_route, "peak": net_peak, "syn": net_syn}
#: Which network knobs may pair with another in a double (the peak compares the whole run
#: with its off-peak phase, so the model decides it alone).
NET_PAIRS = tuple(k for k in NETWORK if k != "peak")
OTHER: dict[str, Callable[..., None]] = {
    "decode": eng_decode, "first_token": eng_first_token, "prefill": eng_prefill,
    "capacity": eng_capacity, "kv": eng_kv, "imbalance": eng_imbalance, "down": eng_down,
    "gpu": gpu_state, "gpu_idle": gpu_idle, "gpu_bandwidth": gpu_bandwidth, "xid": gpu_xid,
    "rate_limit": app_rate_limit, "timeouts": app_timeouts, "load": app_load,
    "long_prompts": app_long_prompts, "frontend": eng_frontend, "concurrency": app_concurrency,
    "kv_transfer": eng_kv_transfer, "prefix": eng_prefix, "spec": eng_spec,
    "metrics_error": eng_metrics_error, "link": gpu_link, "host": host_hog}
#: Which knobs may pair with a network fault in a double (an engine that is down fails
#: every probe, whatever the path; a preempting KV cache leaves the probes' TPOT
#: unbounded, and two data-parallel ranks are modelled only for their imbalance, so the
#: model decides those alone).
KINDS = (*NETWORK, *OTHER)
PAIRS = tuple(k for k in OTHER if k not in ("down", "kv", "imbalance", "frontend",
                                             "kv_transfer", "prefix", "spec", "concurrency",
                                             "metrics_error", "host"))


def _slos(rng: random.Random, spec: Spec) -> None:
    """The SLOs and window of the run: the lab's, or bucket bounds of the probe histograms
    (an SLO between two bounds would be judged on an interpolated quantile)."""
    if rng.random() < 0.3:
        return
    _nested(spec, "exporter", "slo").update(ttft_p95_seconds=rng.choice(_TTFT_SLOS),
                                            tpot_p95_seconds=rng.choice(_TPOT_SLOS))
    if rng.random() < 0.3:
        _nested(spec, "exporter", "diagnosis")["window"] = "60s"


def lab_of(scenario: Scenario) -> Lab:
    """The scenario with the config the runner would generate for it, and its thresholds."""
    config = _config(json.dumps([scenario.exporter, _durations(scenario.probes.model_dump())],
                                sort_keys=True))
    return Lab(scenario, config, resolve(config))


@functools.lru_cache(maxsize=512)
def _config(key: str) -> Config:
    # Only the scenario's exporter: and probes: sections shape the config (parsing it is
    # most of a draw's cost, hence the cache).
    exporter, probes = json.loads(key)
    scenario = Scenario.model_validate({"description": "", "settle": "1s", "expect": [],
                                        "exporter": exporter, "probes": probes})
    targets = {c: f"192.0.2.{i + 1}" for i, c in enumerate(CARRIERS)}  # only their shape
    return parse_config(yaml.safe_dump(exporter_config(scenario, targets, dt.datetime.now(
        dt.UTC))), "generated")


def _build(spec: Spec, description: str) -> Scenario:
    window = spec.get("exporter", {}).get("diagnosis", {}).get("window", LAB_WINDOW)
    seconds = parse_config(yaml.safe_dump({"diagnosis": {"window": window, "interval": "1s"}})
                           ).diagnosis.window
    # The window reads only the applied scenario; ten seconds more for the last runs.
    data = {"description": description, "settle": format_duration(seconds + SETTLE_LEAD), "expect": [], **spec}
    return Scenario.model_validate(data)


def _plan(rng: random.Random, intent: str, kind: str | None = None,
          pairs: tuple[str, ...] = PAIRS) -> list[tuple[str, str]]:
    """The knobs one scenario turns: (knob, carrier or ""); a single turns ``kind`` where
    given, a double one of ``pairs`` beside a network knob."""
    def net(kinds: tuple[str, ...] = tuple(NETWORK)) -> tuple[str, str]:
        return rng.choice(kinds), rng.choice(CARRIERS)

    if intent == "double":
        return [net(NET_PAIRS), (rng.choice(pairs), "")]
    if intent == "single" or rng.random() < 0.5:
        kind = kind or rng.choice(KINDS)
        return [net((kind,))] if kind in NETWORK else [(kind, "")]
    # Healthy: up to three carriers' knobs turned below their lines, the host check on a
    # quarter of the time.
    return [(rng.choice(("delay", "jitter", "loss", "stall")), c)
            for c in rng.sample(CARRIERS, rng.randint(1, 3))] + (
        [("host_clean", "")] if rng.random() < 0.25 else [])


def _turn(rng: random.Random, spec: Spec, kind: str, carrier: str, th: Thresholds) -> None:
    if kind in NETWORK:
        args = (rng, spec, carrier, th) if kind == "route" else (rng, spec, carrier)
        NETWORK[kind](*args)
    elif kind == "host_clean":
        host_clean(rng, spec)
    else:
        OTHER[kind](rng, spec, th) if kind.startswith("gpu") else OTHER[kind](rng, spec)


def draw(rng: random.Random, intent: str, seed: int, kind: str | None = None,
         pairs: tuple[str, ...] = PAIRS) -> Scenario:
    """One scenario of ``intent`` ("healthy", "single" or "double"). The knobs are chosen
    first and their values drawn again until decided, so a knob that is seldom decided is
    not crowded out by one that always is; a single tries ``kind`` first where given."""
    default_th = lab_of(_build({}, "")).th
    want = {"healthy": 0, "single": 1, "double": 2}[intent]
    for attempt in range(TRIES // PER_PLAN):
        plan = _plan(rng, intent, kind if attempt == 0 else None, pairs)
        for _ in range(PER_PLAN):
            spec: Spec = {"seed": seed}
            _slos(rng, spec)
            for kind, carrier in plan:
                _turn(rng, spec, kind, carrier, default_th)
            try:
                expect = expected(lab_of(_build(spec, "")))
            except (Ambiguous, ValueError):
                continue  # ValueError: a draw the format refuses (jitter over delay)
            if len(expect) != want or (intent == "healthy" and not quiet(lab_of(_build(
                    spec, "")))):
                continue
            names = " + ".join(f"{k}@{c}" if c else k for k, c in plan)
            given = ", ".join(f"{e['layer']}/{e['cause']}" for e in expect) or "healthy"
            return _build({**spec, "expect": expect},
                          f"generated {intent}: {names} -> {given}")
    raise RuntimeError(f"no decided {intent} scenario in {TRIES} draws")


def generate(seed: int, n: int, kinds: tuple[str, ...] = KINDS) -> list[Scenario]:
    """``n`` scenarios: a quarter healthy, the rest single and double faults. The singles
    take every knob of ``kinds`` in turn (a shuffled round, then another), so each class is
    drawn once per round of singles rather than by luck; the doubles pair a network knob
    with one of ``kinds`` (with any, where none of them pairs)."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown knobs {sorted(unknown)}; known: {', '.join(KINDS)}")
    pairs = tuple(k for k in PAIRS if k in kinds) or PAIRS
    rng = random.Random(seed)
    intents = ["healthy", "single", "single", "double"]
    out: list[Scenario] = []
    turn: list[str] = []
    for i in range(n):
        intent = intents[i % len(intents)]
        if intent == "single" and not turn:
            turn = rng.sample(kinds, len(kinds))
        out.append(draw(rng, intent, seed * 1000 + i,
                        turn.pop() if intent == "single" else None, pairs))
    return out


DURATIONS = {"baseline", "settle", "delay", "jitter", "stall", "connect", "first_token", "interval",
             "total"}


def _durations(data: Any, key: str = "") -> Any:
    """The dumped scenario with its durations written as the format reads them ("40s")."""
    if isinstance(data, dict):
        return {k: _durations(v, k) for k, v in data.items()}
    if isinstance(data, list):
        return [_durations(v) for v in data]
    if key in DURATIONS and isinstance(data, int | float) and not isinstance(data, bool):
        return format_duration(data)
    return data


def write(scenarios: list[Scenario], folder: Path) -> list[Path]:
    """One YAML file per scenario, in the lab's format (``python -m tests.support.lab run``)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, s in enumerate(scenarios):
        path = folder / f"gen-{s.seed}-{i:03d}.yaml"
        data = _durations(s.model_dump(mode="json", exclude_defaults=True))
        data["expect"] = [e.model_dump(mode="json") for e in s.expect]
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    for path in write(generate(args.seed, args.n), args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
