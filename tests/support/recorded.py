"""A recorded hour of a small fleet, as the exporter's own samples at each tick: two probes
(one long-context), two paths, a vLLM-like engine with two data-parallel ranks and two
models, a Triton-like one (duration counters, no histograms), two GPUs, the host under them (its
PSI and the engine cgroup's), real users of three carriers on one port (the clients check) and the check-run counters. The numbers are random but seeded, and shaped like the real thing: a peak
window, a route change, an engine restart (its counters reset), an XID that appears mid
window, stalls, rate limits and a throttle that holds for part of the window.

``ticks()`` yields ``(unix time, samples)``; ``openmetrics()`` writes the same samples for
``promtool tsdb create-blocks-from openmetrics``, so the embedded history and a real
Prometheus hold exactly the same series.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from exporter import metrics
from exporter.diagnosis.families import RawSample

INTERVAL = 10.0
MINUTES = 50
PEAK_MINUTES = (range(10, 20), range(48, 60))
ROUTE_CHANGE_MINUTE = 25
RESTART_MINUTE = 33
XID_MINUTE = 44
THROTTLE_MINUTE = 45
#: From here a job beside the engine takes its CPUs: the engine's cgroup stalls for one.
HOST_HOG_MINUTE = 40
#: From here GPU 1's PCIe link runs at x8 and one of its NVLinks is down and replaying.
LINK_MINUTE = 42
HOST_CPUS = 32

PROBES = (("chat", "gpu-sh:443", "short", "mobile", "main"),
          ("long", "gpu-sh:443", "long_context", "telecom", "main"))
PATHS = (("mobile", "gpu-sh", "sh", "icmp"), ("telecom", "gpu-sh", "sh", "tcp"))
GPUS = (("0", "GPU-aa", "NVIDIA H200"), ("1", "GPU-bb", "NVIDIA H200"))
VLLM = tuple(("main", "vllm", model, rank) for model in ("ds", "qwen") for rank in ("0", "1"))
TRITON = ("triton", "triton", "ens", "")
OUTCOMES = ("ok", "rate_limited", "timeout_total")
#: Real users' carriers (the clients check on one port); mobile's retransmit in the first
#: peak and its RTT rises in the second.
CLIENTS = ("mobile", "telecom", metrics.CLIENTS_OTHER_CARRIER)
CLIENT_PORT = "8000"
CHECKS = ("probe/chat", "probe/long", "engine/main", "engine/triton", "gpu/nvml", "path/mobile")


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, v: float) -> None:
        i = next((j for j, b in enumerate(self.bounds) if v <= b), len(self.bounds))
        for j in range(i, len(self.counts)):
            self.counts[j] += 1
        self.total += v

    def samples(self, name: str, labels: dict[str, str], buckets: bool = True
                ) -> list[RawSample]:
        out: list[RawSample] = []
        if buckets:
            for b, c in zip((*self.bounds, math.inf), self.counts, strict=True):
                out.append((f"{name}_bucket", {**labels, "le": _le(b)}, c))
        out.append((f"{name}_sum", labels, self.total))
        out.append((f"{name}_count", labels, self.counts[-1]))
        return out


@dataclass
class Fleet:
    rng: random.Random
    #: Draws for the families added after the fleet was first recorded, so those before
    #: keep their numbers.
    later: random.Random = field(default_factory=lambda: random.Random(22))
    #: Likewise for the first token's budget, added after those.
    budget: random.Random = field(default_factory=lambda: random.Random(23))
    #: And for the host, added after the budget, and the GPUs' links after that.
    host: random.Random = field(default_factory=lambda: random.Random(24))
    link: random.Random = field(default_factory=lambda: random.Random(25))
    counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    hists: dict[tuple[str, tuple[tuple[str, str], ...]], Histogram] = field(default_factory=dict)

    def add(self, name: str, labels: dict[str, str], by: float) -> RawSample:
        key = (name, tuple(labels.items()))
        self.counters[key] = self.counters.get(key, 0.0) + by
        return (name, labels, self.counters[key])

    def hist(self, family: metrics.Family, labels: dict[str, str],
             bounds: tuple[float, ...] = ()) -> Histogram:
        key = (family.name, tuple(labels.items()))
        if key not in self.hists:
            self.hists[key] = Histogram(bounds or family.buckets or ())
        return self.hists[key]

    def restart(self, section_names: tuple[str, ...]) -> None:
        """An engine restart: its counters and histograms count again from zero."""
        for key in [k for k in self.counters if k[0] in section_names]:
            self.counters[key] = 0.0
        for key in [k for k in self.hists if k[0] in section_names]:
            self.hists[key] = Histogram(self.hists[key].bounds)


def _rows(names: tuple[str, ...], rows: tuple[tuple[str, ...], ...]
          ) -> Iterator[tuple[tuple[str, ...], dict[str, str]]]:
    for values in rows:
        yield values, dict(zip(names, values, strict=True))


ENGINE_BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _probe_tick(f: Fleet, minute: int) -> list[RawSample]:
    out: list[RawSample] = []
    r = f.rng
    for values, labels in _rows(metrics.PROBE_LABELS, PROBES):
        slow = 2.0 if values[2] == "long_context" else 1.0
        ok = r.randint(0, 3)
        failed = r.random() < 0.3
        out.append(f.add(metrics.PROBE_REQUESTS.name, {**labels, "outcome": "ok"}, ok))
        out.append(f.add(metrics.PROBE_REQUESTS.name, {**labels, "outcome": "rate_limited"},
                         1 if failed and minute % 2 else 0))
        out.append(f.add(metrics.PROBE_REQUESTS.name, {**labels, "outcome": "timeout_total"},
                         1 if failed and not minute % 2 else 0))
        out.append(f.add(metrics.PROBE_PROMPT_TOKENS.name, labels,
                         ok * r.randint(100, 400) * (20 if slow > 1 else 1)))
        # Drawn from nothing random: the fleet's other numbers stay what they were.
        out.append(f.add(metrics.PROBE_OUTPUT_TOKENS.name, {**labels, "source": "usage"},
                         ok * (16 if slow > 1 else 32)))
        ttft = f.hist(metrics.PROBE_TTFT, labels)
        tpot = f.hist(metrics.PROBE_TPOT, labels)
        itl = f.hist(metrics.PROBE_ITL, labels)
        stall = f.hist(metrics.PROBE_STALL, labels)
        for _ in range(ok):
            ttft.observe(r.lognormvariate(math.log(0.4 * slow), 0.5))
            tpot.observe(r.lognormvariate(math.log(0.04), 0.3))
            for _ in range(5):
                itl.observe(r.lognormvariate(math.log(0.04), 0.6))
            stall.observe(r.choice((0.1, 0.3, 2.7, 0.2)) * r.uniform(0.8, 1.2))
        for name, h in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("stall", stall)):
            family = {"ttft": metrics.PROBE_TTFT, "tpot": metrics.PROBE_TPOT,
                      "itl": metrics.PROBE_ITL, "stall": metrics.PROBE_STALL}[name]
            out += h.samples(family.name, labels)
        for connection in ("new", "reused"):
            for phase in ("dns", "connect", "tls", "request"):
                if connection == "reused" and phase != "request":
                    continue
                plabels = {**labels, "phase": phase, "connection": connection}
                h = f.hist(metrics.PROBE_PHASE, plabels)
                for _ in range(r.randint(0, 1) if connection == "new" else ok):
                    h.observe(r.lognormvariate(math.log(0.02), 0.7))
                out += h.samples(metrics.PROBE_PHASE.name, plabels)
        out += _split_and_tcp(f, labels, ok)
    return out


def _split_and_tcp(f: Fleet, labels: dict[str, str], ok: int) -> list[RawSample]:
    """The engine's exact split of most ok probes (one in four absent), and the probe
    connections' TCP segments with a little loss on the telecom probe's stream."""
    r = f.later
    out: list[RawSample] = []
    exact = sum(1 for _ in range(ok) if r.random() < 0.75)
    for split, n in (("exact", exact), ("absent", ok - exact), ("inconsistent", 0)):
        out.append(f.add(metrics.PROBE_SERVER_SPLIT.name, {**labels, "split": split}, n))
    for part, mean in (("network_frontend", 0.05), ("queue", 0.1), ("prefill", 0.2),
                       ("decode", 1.0)):
        plabels = {**labels, "part": part}
        h = f.hist(metrics.PROBE_SERVER_TIMING, plabels)
        for _ in range(exact):
            h.observe(r.lognormvariate(math.log(mean), 0.5))
        out += h.samples(metrics.PROBE_SERVER_TIMING.name, plabels, buckets=False)
    lossy = labels["carrier"] == "telecom"
    sent = ok * r.randint(20, 40)
    received = ok * r.randint(30, 70)
    for kind, n in (("sent", sent), ("retransmitted", r.randint(0, 2) if lossy and ok else 0),
                    ("received", received),
                    ("out_of_order", r.randint(0, 5) if lossy and ok else 0)):
        out.append(f.add(metrics.PROBE_TCP_SEGMENTS.name, {**labels, "segments": kind}, n))
    return out


def _path_tick(f: Fleet, minute: int, first: bool) -> list[RawSample]:
    out: list[RawSample] = []
    r = f.rng
    for values, labels in _rows(metrics.PATH_LABELS, PATHS):
        lossy = values[0] == "mobile" and minute in PEAK_MINUTES[0]
        sent = 5
        received = sum(1 for _ in range(sent) if r.random() > (0.08 if lossy else 0.005))
        out.append(f.add(metrics.PATH_PACKETS_SENT.name, labels, sent))
        out.append(f.add(metrics.PATH_PACKETS_RECEIVED.name, labels, received))
        h = f.hist(metrics.PATH_RTT, labels)
        for _ in range(received):
            h.observe(r.gauss(0.035 if values[0] == "telecom" else 0.05, 0.004))
        out += h.samples(metrics.PATH_RTT.name, labels, buckets=False)
        for method, scale in ((metrics.PATH_JITTER_RFC3550, 1.0), ("stddev", 1.4)):
            out.append((metrics.PATH_JITTER.name, {**labels, "method": method},
                        abs(r.gauss(0.004, 0.002)) * scale))
        route = dict(zip(metrics.ROUTE_LABELS, values[:2], strict=True))
        changed = values[0] == "telecom" and minute >= ROUTE_CHANGE_MINUTE
        cls = "chinanet_163" if changed else ("cn2_gia" if values[0] == "telecom" else "cmi")
        out.append((metrics.PATH_ROUTE_INFO.name, {**route, "route_class": cls}, 1.0))
        out.append(f.add(metrics.PATH_ROUTE_CHANGES.name, route,
                         1 if first and minute == ROUTE_CHANGE_MINUTE else 0))
    return out


_ENGINE_NAMES = tuple(x.name for x in (
    metrics.ENGINE_PROMPT_TOKENS, metrics.ENGINE_PREEMPTIONS, metrics.ENGINE_REQUESTS_FINISHED,
    metrics.ENGINE_TTFT, metrics.ENGINE_ITL, metrics.ENGINE_E2E, metrics.ENGINE_QUEUE_TIME,
    metrics.ENGINE_PREFILL_TIME, metrics.ENGINE_DECODE_TIME, metrics.ENGINE_PREFIX_CACHE_QUERIES,
    metrics.ENGINE_PREFIX_CACHE_HITS, metrics.ENGINE_SPEC_DRAFTS, metrics.ENGINE_SPEC_DRAFT_TOKENS,
    metrics.ENGINE_SPEC_ACCEPTED_TOKENS, metrics.ENGINE_PROMPT_TOKENS_BY_SOURCE,
    metrics.ENGINE_KV_TRANSFER_TIME, metrics.ENGINE_PROCESS_CPU))


def _budget_tick(f: Fleet, minute: int) -> list[RawSample]:
    """What the first token's budget reads beyond queue and prefill, from its own draws: the
    prefix cache's hits fall and the drafts' acceptance drops once busy, the API server's
    CPU climbs, a KV handover is slow; and the probe connections' round trips."""
    r, busy = f.budget, minute >= 40
    main = {"target": "main", "engine": "vllm", "model": "", "dp_rank": ""}
    out: list[RawSample] = [f.add(metrics.ENGINE_PROCESS_CPU.name, main,
                                  INTERVAL * r.uniform(0.8, 1.0) if busy
                                  else INTERVAL * r.uniform(0.1, 0.3))]
    for values in VLLM:
        labels = dict(zip(metrics.ENGINE_SERIES_LABELS, values, strict=True))
        prompt, done = r.randint(200, 2000), r.randint(0, 4)
        hit = int(prompt * (r.uniform(0.0, 0.1) if busy else r.uniform(0.5, 0.9)))
        external = int(prompt * r.uniform(0.0, 0.3))
        out.append(f.add(metrics.ENGINE_PREFIX_CACHE_QUERIES.name, labels, prompt))
        out.append(f.add(metrics.ENGINE_PREFIX_CACHE_HITS.name, labels, hit))
        for source, n in (("local_cache_hit", hit), ("external_kv_transfer", external),
                          ("local_compute", prompt - hit - external)):
            out.append(f.add(metrics.ENGINE_PROMPT_TOKENS_BY_SOURCE.name,
                             {**labels, "source": source}, max(0, n)))
        drafts = r.randint(10, 40)
        accepted = sum(r.random() < (0.2 if busy else 0.7) for _ in range(3 * drafts))
        out.append(f.add(metrics.ENGINE_SPEC_DRAFTS.name, labels, drafts))
        out.append(f.add(metrics.ENGINE_SPEC_DRAFT_TOKENS.name, labels, 3 * drafts))
        out.append(f.add(metrics.ENGINE_SPEC_ACCEPTED_TOKENS.name, labels, accepted))
        for reason, most in (("capacity", 3), ("deferred", 2)):
            out.append((metrics.ENGINE_REQUESTS_WAITING_BY_REASON.name,
                        {**labels, "reason": reason}, float(r.randint(0, most))))
        transfer = f.hist(metrics.ENGINE_KV_TRANSFER_TIME, labels, ENGINE_BOUNDS)
        for _ in range(done):
            transfer.observe(r.lognormvariate(math.log(0.4 if busy else 0.05), 0.3))
        out += transfer.samples(metrics.ENGINE_KV_TRANSFER_TIME.name, labels)
    for probe, labels in _rows(metrics.PROBE_LABELS, PROBES):
        rtt = f.hist(metrics.PROBE_TCP_RTT, labels)
        for _ in range(r.randint(0, 3)):
            rtt.observe(r.gauss(0.035 if probe[3] == "telecom" else 0.05, 0.004))
        out += rtt.samples(metrics.PROBE_TCP_RTT.name, labels, buckets=False)
    return out


def _engine_tick(f: Fleet, minute: int) -> list[RawSample]:
    out: list[RawSample] = [(metrics.ENGINE_UP.name, {"target": "main"}, 1.0),
                            (metrics.ENGINE_UP.name, {"target": "triton"}, 1.0)]
    r = f.rng
    for values in VLLM:
        labels = dict(zip(metrics.ENGINE_SERIES_LABELS, values, strict=True))
        done = r.randint(0, 4)
        busy = minute >= 40
        out.append((metrics.ENGINE_REQUESTS_RUNNING.name, labels,
                    float(r.randint(8, 16) if busy else r.randint(0, 8))))
        out.append((metrics.ENGINE_REQUESTS_WAITING.name, labels,
                    float(r.randint(0, 5) if busy else 0)))
        out.append((metrics.ENGINE_KV_CACHE_USAGE.name, labels,
                    min(1.0, r.uniform(0.85, 1.0) if busy else r.uniform(0.2, 0.6))))
        out.append(f.add(metrics.ENGINE_PROMPT_TOKENS.name, labels, done * r.randint(150, 600)))
        out.append(f.add(metrics.ENGINE_PREEMPTIONS.name, labels, r.randint(0, 1) if busy else 0))
        for reason in ("stop", "length"):
            out.append(f.add(metrics.ENGINE_REQUESTS_FINISHED.name,
                             {**labels, "finished_reason": reason}, done if reason == "stop"
                             else 0))
        hists = {fam: f.hist(fam, labels, ENGINE_BOUNDS) for fam in (
            metrics.ENGINE_TTFT, metrics.ENGINE_ITL, metrics.ENGINE_E2E,
            metrics.ENGINE_QUEUE_TIME, metrics.ENGINE_PREFILL_TIME, metrics.ENGINE_DECODE_TIME)}
        slow = 3.0 if values[2] == "qwen" else 1.0
        for _ in range(done):
            queue = r.expovariate(1 / (0.3 if busy else 0.02))
            prefill = r.lognormvariate(math.log(0.15 * slow), 0.4)
            decode = r.lognormvariate(math.log(1.5), 0.3)
            hists[metrics.ENGINE_QUEUE_TIME].observe(queue)
            hists[metrics.ENGINE_PREFILL_TIME].observe(prefill)
            hists[metrics.ENGINE_DECODE_TIME].observe(decode)
            # Time in the API server before the engine queued it: in TTFT and E2E (as vLLM
            # stamps arrival before tokenizing), in neither queue nor prefill.
            frontend = 0.2 if busy else 0.005
            hists[metrics.ENGINE_TTFT].observe(frontend + queue + prefill)
            hists[metrics.ENGINE_E2E].observe(frontend + queue + prefill + decode)
            for _ in range(4):
                hists[metrics.ENGINE_ITL].observe(r.choice((0.03, 0.04, 0.05, 3.0 if busy
                                                            else 0.06)))
        for fam, h in hists.items():
            out += h.samples(fam.name, labels)
    triton = dict(zip(metrics.ENGINE_SERIES_LABELS, TRITON, strict=True))
    done = r.randint(0, 3)
    out.append(f.add(metrics.ENGINE_REQUESTS_SUCCEEDED.name, triton, done))
    out.append(f.add(metrics.ENGINE_QUEUE_DURATION.name, triton, done * r.uniform(0, 0.05)))
    out.append(f.add(metrics.ENGINE_COMPUTE_DURATION.name, triton, done * r.uniform(0.2, 0.5)))
    out.append((metrics.ENGINE_REQUESTS_RUNNING.name, triton, float(r.randint(0, 4))))
    return out


def _gpu_tick(f: Fleet, minute: int, first: bool) -> list[RawSample]:
    out: list[RawSample] = []
    r = f.rng
    for values, labels in _rows(metrics.GPU_LABELS, GPUS):
        out.append((metrics.GPU_UTILIZATION.name, labels, r.uniform(0.3, 0.95)))
        out.append((metrics.GPU_DRAM_BANDWIDTH_UTILIZATION.name, labels, r.uniform(0.2, 0.9)))
        out.append((metrics.GPU_MEMORY_TOTAL.name, labels, 141e9))
        out.append((metrics.GPU_MEMORY_USED.name, labels, r.uniform(120e9, 140e9)))
        for reason in metrics.GPU_CLOCK_EVENT_REASONS:
            held = (reason == "sw_thermal" and values[0] == "0" and minute >= THROTTLE_MINUTE
                    and r.random() < 0.8) or (reason == "gpu_idle" and r.random() < 0.1)
            out.append((metrics.GPU_CLOCK_EVENT.name, {**labels, "reason": reason},
                        1.0 if held else 0.0))
        if values[0] == "1" and minute >= XID_MINUTE:
            # The exporter creates an XID's series at its first event.
            out.append(f.add(metrics.GPU_XID_ERRORS.name, {**labels, "xid": "79"},
                             1 if minute == XID_MINUTE and first else 0))
    return out


def _host_tick(f: Fleet, minute: int, i: int) -> list[RawSample]:
    """The host's counters were counting before the exporter started: their first sample
    is far from zero."""
    r, out = f.host, list[RawSample]()
    hog = minute >= HOST_HOG_MINUTE
    base = 1e5 if i == 0 else 0.0
    for scope in metrics.HOST_SCOPES:
        for resource in metrics.PRESSURE_RESOURCES:
            some = r.uniform(0.4, 0.7) if hog and resource == "cpu" else r.uniform(0, 0.05)
            for kind, share in zip(metrics.PRESSURE_KINDS, (some, some / 3), strict=True):
                out.append(f.add(metrics.HOST_PRESSURE.name, {"scope": scope,
                                 "resource": resource, "kind": kind},
                                 base + share * INTERVAL))
    busy = r.uniform(0.85, 0.95) if hog else r.uniform(0.2, 0.4)
    iowait = r.uniform(0, 0.02)
    for mode, share in zip(metrics.CPU_MODES, (busy, 1 - busy - iowait, iowait), strict=True):
        out.append(f.add(metrics.HOST_CPU.name, {"mode": mode},
                         base + share * HOST_CPUS * INTERVAL))
    for direction in metrics.SWAP_DIRECTIONS:
        out.append(f.add(metrics.HOST_SWAP.name, {"direction": direction},
                         base + r.randint(0, 40)))
    out.append(f.add(metrics.HOST_MAJOR_FAULTS.name, {}, base + r.randint(0, 100)))
    out.append(f.add(metrics.HOST_ENGINE_CPU.name, {}, base + r.uniform(2, 3) * INTERVAL))
    out.append((metrics.HOST_MEMORY_TOTAL.name, {}, 2e12))
    out.append((metrics.HOST_MEMORY_AVAILABLE.name, {}, r.uniform(0.5e12, 0.6e12)))
    out.append((metrics.HOST_CPUS.name, {}, float(HOST_CPUS)))
    return out


def _link_tick(f: Fleet, minute: int, i: int) -> list[RawSample]:
    """The driver's link counters count from its load: far from zero at the first sample."""
    r, out = f.link, list[RawSample]()
    for values, labels in _rows(metrics.GPU_LABELS, GPUS):
        bad = values[0] == "1" and minute >= LINK_MINUTE
        for family, value in ((metrics.GPU_PCIE_LINK_GENERATION, 5.0),
                              (metrics.GPU_PCIE_LINK_GENERATION_MAX, 5.0),
                              (metrics.GPU_PCIE_LINK_WIDTH, 8.0 if bad else 16.0),
                              (metrics.GPU_PCIE_LINK_WIDTH_MAX, 16.0)):
            out.append((family.name, labels, value))
        out.append(f.add(metrics.GPU_PCIE_REPLAYS.name, labels,
                         (40 if i == 0 else 0) + r.randint(0, 2 if bad else 0)))
        for link in ("0", "1"):
            down = bad and link == "1"
            out.append((metrics.GPU_NVLINK_UP.name, {**labels, "link": link},
                        0.0 if down else 1.0))
            out.append(f.add(metrics.GPU_NVLINK_ERRORS.name,
                             {**labels, "link": link, "kind": "replay"},
                             (12 if i == 0 else 0) + (r.randint(1, 5) if down else 0)))
    return out


def _clients_tick(f: Fleet, r: random.Random, minute: int) -> list[RawSample]:
    out: list[RawSample] = []
    for carrier in CLIENTS:
        labels = dict(zip(metrics.CLIENTS_LABELS, (carrier, CLIENT_PORT), strict=True))
        mobile = carrier == "mobile"
        lossy = mobile and minute in PEAK_MINUTES[0]
        slow = mobile and minute in PEAK_MINUTES[1]
        connections = r.randint(20, 60)
        sent = connections * r.randint(20, 40)
        out.append((metrics.CLIENTS_CONNECTIONS.name, labels, float(connections)))
        out.append(f.add(metrics.CLIENTS_SEGMENTS_SENT.name, labels, sent))
        out.append(f.add(metrics.CLIENTS_SEGMENTS_RETRANSMITTED.name, labels,
                         round(sent * r.uniform(0.03, 0.07) if lossy else
                               sent * r.uniform(0, 0.004))))
        h = f.hist(metrics.CLIENTS_RTT, labels)
        for _ in range(connections // 4):
            h.observe(r.lognormvariate(math.log(0.12 if slow else 0.04), 0.3))
        out += h.samples(metrics.CLIENTS_RTT.name, labels)
    return out


def _check_tick(f: Fleet, minute: int) -> list[RawSample]:
    out: list[RawSample] = []
    for check in CHECKS:
        broken = check == "engine/triton" and minute >= 39
        flaky = check == "path/mobile" and f.rng.random() < 0.3
        ok = 0 if broken else (0 if flaky else 1)
        out.append(f.add(metrics.EXPORTER_CHECK_RUNS.name,
                         {"check": check, "outcome": metrics.CHECK_SUCCESS}, ok))
        out.append(f.add(metrics.EXPORTER_CHECK_RUNS.name,
                         {"check": check, "outcome": "error"}, 1 - ok))
    return out


def ticks(start: float, seed: int = 20) -> Iterator[tuple[float, list[RawSample]]]:
    """One snapshot every INTERVAL from ``start`` for MINUTES minutes, inclusive."""
    f = Fleet(random.Random(seed))
    # Its own stream, so the other layers' numbers stay what they were before it.
    clients = random.Random(seed + 1)
    steps = int(MINUTES * 60 / INTERVAL)
    for i in range(steps + 1):
        at = start + i * INTERVAL
        minute = int(i * INTERVAL // 60)
        first = i * INTERVAL % 60 == 0
        if i * INTERVAL == RESTART_MINUTE * 60:
            f.restart(_ENGINE_NAMES)
        peak = any(minute in m for m in PEAK_MINUTES)
        yield at, [
            (metrics.EXPORTER_PEAK_WINDOW.name, {"window": "evening"}, 1.0 if peak else 0.0),
            *_probe_tick(f, minute), *_path_tick(f, minute, first), *_engine_tick(f, minute),
            *_budget_tick(f, minute),
            *_gpu_tick(f, minute, first), *_check_tick(f, minute), *_host_tick(f, minute, i),
            *_link_tick(f, minute, i),
            *_clients_tick(f, clients, minute),
        ]


def openmetrics(recorded: list[tuple[float, list[RawSample]]]) -> str:
    """The samples as OpenMetrics text with timestamps, one family after another and each
    series in time order, as the backfill wants them."""
    series: dict[str, dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]] = {}
    for at, samples in recorded:
        for name, labels, value in samples:
            series.setdefault(name, {}).setdefault(tuple(labels.items()), []).append(
                (at, value))
    lines: list[str] = []
    for name, by_labels in series.items():
        lines.append(f"# TYPE {name} unknown")
        for pairs, points in by_labels.items():
            text = ",".join(f'{k}="{v}"' for k, v in pairs)
            lines += [f"{name}{{{text}}} {v!r} {at:.3f}" for at, v in points]
    return "\n".join([*lines, "# EOF", ""])
