"""Soak: the exporter for a long run with every kind of check, faults toggled, hostile
targets, scraped every second; does anything grow?

The exporter runs a healthy probe and engine check against the simulator (whose faults change
in turn: healthy, errors, stalls, disconnects, slow first tokens, hangs, a broken metrics
endpoint, malformed streams; one cycle per reference window, so every window sees each),
probes against hostile endpoints (tests/support/hostile_probe.py), hostile engine targets
(tests/support/hostile_engine.py: a 200k-value label bomb, NaN buckets, plain text), TCP path
checks to an open and a closed
port, and the embedded diagnosis, whose history (kept in memory for baselines, 6 h by
default) is cut to ``HISTORY`` so that it is full early: past it, what grows is a leak, not the
history filling as designed. /metrics is scraped every second, `/` and /live every 10 s.

Measured over the run: the exporter's RSS, open file descriptors and threads, /metrics p50
and p99 and its size, and schedule slip (runs the healthy probe and engine missed against
their interval). The named reference is the first ``--reference`` minutes of the same run:
each figure is printed for that window and for the last window of the same length, with the
ratio late/early, plus the RSS trend over the second half (MB per hour, a Theil-Sen fit to
each minute's highest RSS: the allocator's high-water mark, which is what keeps the memory).

Run (from the repository root): .venv/bin/python -m benchmarks.soak --minutes 20
Exit status 1 if the exporter died, a /metrics scrape failed, a canary secret showed, fds or
threads grew past the reference window's peak (plus slack), RSS rose by more than
``MAX_RSS_TREND`` MB/hour over the second half, or /metrics p99 by more than 3x.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from exporter.simulator.state import DEFAULT_MODEL
from tests.support.hostile_probe import REFUSED
from tests.support.matrix import leaks, pages, runs
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.samples import parse
from tests.support.simulator import Simulator, running_simulator

CANARY = "sk-canary-soak-66d2"
PROBE_INTERVAL, ENGINE_INTERVAL = 1.0, 1.0
HOSTILE_PROBES = ("error-event", "rate-limited", "reset", "hang", "malformed", "not-sse",
                  REFUSED)
#: fault -> interval: the bomb is parsed every 30 s, the small ones every 5 s.
HOSTILE_ENGINES = {"engine-values": "30s", "nan-le": "5s", "plain-text": "5s"}
#: The simulator's faults, in turn, each for --toggle seconds.
FAULT_CYCLE: tuple[dict[str, float], ...] = (
    {},
    {"error_rate": 0.3},
    {"stall": 0.4},
    {"disconnect_rate": 0.3},
    {"slow_first_token": 0.3},
    {"hang_rate": 0.2},
    {"metrics_error_rate": 0.5},
    {"malformed_rate": 0.3, "stream_error_rate": 0.2},
)
#: The diagnosis history: full after 5 minutes (the window it serves is 2 minutes).
HISTORY, WINDOW = "5m", "2m"
#: An allocator keeps the high-water mark of a burst (a 16 MB label bomb parsed while a page
#: renders) as a step, not a slope: the verdict is the trend once the history is full.
MAX_RSS_TREND, MAX_P99_RATIO = 10.0, 3.0
#: Descriptors and threads that come and go with in-flight work (a probe's socket, a
#: worker thread rendering `/`): growth beyond this over the reference's peak is a leak.
FD_SLACK, THREAD_SLACK = 16, 4


@dataclass
class Tick:
    """One 10-second sample of the exporter process and its counters."""

    at: float
    rss_mb: float
    fds: int
    threads: int
    probe_runs: float
    engine_runs: float
    series: int
    metrics_bytes: int


@dataclass
class Soak:
    scrapes: list[tuple[float, float]] = field(default_factory=list)  # (at, seconds)
    pages: list[tuple[float, float]] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    failed_scrapes: int = 0


def proc_stats(pid: int) -> tuple[float, int, int]:
    """(RSS in MB, open fds, threads) of ``pid``."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text()
                  .splitlines() if ":" in line)
    rss_kb = float(status["VmRSS"].split()[0])
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd")), int(status["Threads"])


def config(port: int, sim: Simulator, probe_ports: dict[str, int], engine_port: int) -> str:
    hostile = "".join(
        f"  - {{name: {f}, url: 'http://127.0.0.1:{probe_ports[f]}/v1/chat/completions', model: m,"
        " interval: 2s, min_spacing: 10ms, max_tokens: 4, api_key: {env: SOAK_KEY},"
        " timeouts: {connect: 1s, first_token: 1s, total: 1500ms}}\n"
        for f in HOSTILE_PROBES
    )
    engines = "".join(
        f"  - {{name: {f}, url: 'http://127.0.0.1:{engine_port}/{f}/metrics', type: vllm,"
        f" interval: {every}, timeout: {'9s' if every == '30s' else '4s'},"
        " bearer_token: {env: SOAK_KEY}}\n"
        for f, every in HOSTILE_ENGINES.items()
    )
    return (
        f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
        f"probes:\n  - {{name: chat, url: '{sim.url}', model: {DEFAULT_MODEL},"
        f" interval: {PROBE_INTERVAL:g}s, min_spacing: 10ms, max_tokens: 8,"
        " timeouts: {connect: 1s, first_token: 2s, total: 5s}}\n" + hostile
        + f"engines:\n  - {{name: sim, url: '{sim.base}/metrics',"
        f" interval: {ENGINE_INTERVAL:g}s}}\n"
        + engines
        + "paths:\n  interval: 5s\n  burst: 10\n  spacing: 50ms\n  timeout: 500ms\n"
        "  carriers:\n    lo:\n"
        f"      - {{name: open, host: 127.0.0.1, region: local, protocol: tcp, port: {sim.port}}}\n"
        f"      - {{name: closed, host: 127.0.0.1, region: local, protocol: tcp,"
        f" port: {probe_ports[REFUSED]}}}\n"
        f"diagnosis: {{interval: 5s, window: {WINDOW}, history: {HISTORY}}}\n"
    )


def soak(exporter: Proc, base: str, sim: Simulator, seconds: float, toggle: float) -> Soak:
    out = Soak()
    start = time.monotonic()
    next_tick = next_toggle = start
    cycle = 0
    while (now := time.monotonic()) - start < seconds:
        if exporter.popen.poll() is not None:
            raise SystemExit(f"the exporter died:\n{exporter.output()[-3000:]}")
        if now >= next_toggle:
            sim.faults(**FAULT_CYCLE[cycle % len(FAULT_CYCLE)])
            cycle += 1
            next_toggle += toggle
        began = time.monotonic()
        status, body = http_get(f"{base}/metrics", timeout=10)
        took = time.monotonic() - began
        if status != 200:
            out.failed_scrapes += 1
        else:
            out.scrapes.append((began - start, took))
        if now >= next_tick and status == 200:
            for path in ("/", "/live"):
                page_began = time.monotonic()
                http_get(base + path, timeout=10)
                out.pages.append((page_began - start, time.monotonic() - page_began))
            samples = parse(body)
            rss, fds, threads = proc_stats(exporter.pid)
            out.ticks.append(Tick(now - start, rss, fds, threads, runs(samples, "probe/chat"),
                                  runs(samples, "engine/sim"), len(samples), len(body)))
            next_tick += 10
        time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))
    return out


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def slope_mb_per_hour(ticks: list[Tick]) -> float:
    """Trend of each minute's highest RSS over ``ticks``: the median of the slopes between
    every two minutes (Theil-Sen), so one transient spike (a bomb parsed while a page renders)
    does not tilt it."""
    peaks: dict[int, float] = {}
    for t in ticks:
        peaks[int(t.at // 60)] = max(peaks.get(int(t.at // 60), 0.0), t.rss_mb)
    minutes = sorted(peaks)
    slopes = [(peaks[b] - peaks[a]) / (b - a) for i, a in enumerate(minutes)
              for b in minutes[i + 1:]]
    return 60 * statistics.median(slopes) if slopes else float("nan")


def window(s: Soak, lo: float, hi: float) -> dict[str, float]:
    ticks = [t for t in s.ticks if lo <= t.at < hi]
    took = [v for at, v in s.scrapes if lo <= at < hi]
    span = ticks[-1].at - ticks[0].at if len(ticks) > 1 else float("nan")

    def kept(counter: Callable[[Tick], float], interval: float) -> float:
        done = counter(ticks[-1]) - counter(ticks[0])
        return done / (span / interval)

    return {
        "rss_mb": statistics.median(t.rss_mb for t in ticks),
        "fds_max": max(t.fds for t in ticks),
        "threads_max": max(t.threads for t in ticks),
        "metrics_p50_ms": 1000 * quantile(took, 0.5),
        "metrics_p99_ms": 1000 * quantile(took, 0.99),
        "metrics_kb": statistics.median(t.metrics_bytes for t in ticks) / 1024,
        "series": statistics.median(t.series for t in ticks),
        "probe_runs_kept": kept(lambda t: t.probe_runs, PROBE_INTERVAL),
        "engine_runs_kept": kept(lambda t: t.engine_runs, ENGINE_INTERVAL),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--reference", type=float, default=2.0,
                    help="minutes of the reference window (the start of the run)")
    ap.add_argument("--toggle", type=float, help="seconds per simulator fault (default: one"
                    " cycle of the faults per reference window)")
    ap.add_argument("--json", help="write the windows and every tick here")
    args = ap.parse_args(argv)
    seconds, ref = args.minutes * 60, args.reference * 60
    toggle = args.toggle or ref / len(FAULT_CYCLE)
    if seconds < 2 * ref:
        ap.error("--minutes must be at least twice --reference")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, running_simulator(fast=True) as sim:
        ports_file, engine_port, port = Path(tmp) / "ports.json", free_port(), free_port()
        helpers = [
            Proc([sys.executable, "-m", "tests.support.hostile_probe", str(ports_file)]),
            Proc([sys.executable, "-m", "tests.support.hostile_engine", str(engine_port)]),
        ]
        exporter: Proc | None = None
        try:
            wait_until(ports_file.exists, 30, "hostile endpoints")
            wait_until(lambda: http_get(f"http://127.0.0.1:{engine_port}/health")[0] == 200,
                       60, "hostile engine")
            cfg = Path(tmp) / "config.yaml"
            cfg.write_text(config(port, sim, json.loads(ports_file.read_text()), engine_port))
            exporter = Proc(exporter_cmd("run", "--config.file", str(cfg)),
                            env={"SOAK_KEY": CANARY})
            base = f"http://127.0.0.1:{port}"
            wait_until(lambda: http_get(f"{base}/-/ready")[0] == 200, 60, "exporter ready")
            result = soak(exporter, base, sim, seconds, toggle)
            shown = {"logs": exporter.output(), **pages(base)}
        finally:
            if exporter is not None:
                exporter.stop()
            for proc in helpers:
                proc.stop()
    early = window(result, 0, ref)
    late = window(result, seconds - ref, seconds + 1)
    second_half = [t for t in result.ticks if t.at >= seconds / 2]
    trend = slope_mb_per_hour(second_half)
    print(f"soak: {args.minutes:g} min, {len(result.scrapes)} scrapes of /metrics"
          f" ({result.failed_scrapes} failed), {len(result.pages)} of / and /live;"
          f" load average at start {load[0]:.2f} on {os.cpu_count()} cores")
    print(f"reference: the first {args.reference:g} min of this run; late: the last"
          f" {args.reference:g} min; each a cycle of the simulator's faults ({toggle:g} s each)")
    print(f"{'':<20}{'early':>10}{'late':>10}{'late/early':>12}")
    for key in early:
        ratio = late[key] / early[key] if early[key] else float("nan")
        print(f"{key:<20}{early[key]:>10.2f}{late[key]:>10.2f}{ratio:>12.2f}")
    print(f"RSS trend over the second half: {trend:+.1f} MB/hour")
    leaked = leaks([CANARY], shown)
    problems = [
        *(f"canary in {where}" for where in leaked),
        *(["failed scrapes"] if result.failed_scrapes else []),
    ]
    if trend > MAX_RSS_TREND:
        problems.append("RSS grew")
    if late["fds_max"] > early["fds_max"] + FD_SLACK:
        problems.append("open fds grew")
    if late["threads_max"] > early["threads_max"] + THREAD_SLACK:
        problems.append("threads grew")
    if late["metrics_p99_ms"] > MAX_P99_RATIO * early["metrics_p99_ms"]:
        problems.append("/metrics p99 grew")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "minutes": args.minutes, "reference_minutes": args.reference, "load": load,
            "early": early, "late": late, "rss_trend_mb_per_hour": trend,
            "ticks": [t.__dict__ for t in result.ticks], "problems": problems}, indent=1))
    for problem in problems:
        print(f"FAIL: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
