"""Cost of rendering the exporter's `/` page (and its refreshed part, /live) at 100 checks.

Input: 100 checks with their last run (a target URL, an outcome, an error on every tenth),
the window of ``tests.support.observations.fleet()`` (10 probes, 3 engines, 30 paths and
8 GPUs: 51 tiles, 175 sparklines), a full last hour of 60 points (one a minute, values
moving so no two are equal), and the faulted diagnosis of ``benchmarks.diagnosis_eval``
(15 verdicts, evidence, actions, what was ruled out) at the top.

Ours = ``exporter.runtime.page.document(view)``, the whole HTML of `/`; also timed
``page.live(view)`` (what the page's script fetches every 5 s). Reference =
``json.dumps`` of ``dataclasses.asdict`` of the 60 points' observations: one plain walk over
every number the sparklines draw. Each is the median of ``--repeat`` runs after a warm-up.

Run (from the repository root): .venv/bin/python -m benchmarks.page_render
Exit status 1 if a median render of `/` takes 50 ms or more.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from dataclasses import replace

from benchmarks.diagnosis_eval import faulted, median_ms
from exporter import metrics
from exporter.checks.base import Check
from exporter.checks.batch import Batch
from exporter.config.load import parse_config
from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.thresholds import Thresholds
from exporter.diagnosis.trends import Point
from exporter.runtime import page
from exporter.runtime.scheduler import CheckState
from tests.support.observations import fleet

TARGET_MS = 50.0
CHECKS = 100
POINTS = 60


class Listed(Check):
    kind = "probe"

    async def run(self) -> None:
        return None

    def describe(self) -> str:
        return f"chat http://10.0.0.{len(self.target)}:8000/v1/chat/completions model=m"

    def batch(self) -> Batch:
        return ()  # owns no series


def moved(obs: Observations, i: int) -> Observations:
    """``obs`` with every drawn number nudged by step ``i``."""
    f = 1 + (i % 7) / 10
    return replace(
        obs,
        probes=tuple(replace(p, ttft_p95=(p.ttft_p95 or 0.3) * f,
                             tpot_p95=(p.tpot_p95 or 0.03) * f) for p in obs.probes),
        paths=tuple(replace(p, rtt_mean=(p.rtt_mean or 0.03) * f, lost=i % 3,
                            jitter=0.002 * f) for p in obs.paths),
        engines=tuple(replace(e, running=8 * f, waiting=i % 5, kv_cache_usage=0.5 * f / 2)
                      for e in obs.engines),
        gpus=tuple(replace(g, utilization=0.8 / f, dram_bandwidth_utilization=0.5 * f / 2)
                   for g in obs.gpus),
    )


def view() -> page.View:
    now = time.time()
    obs = faulted(fleet(probes=10, engines=3, paths=30, gpus=8))
    trend = [Point(now - 60 * (POINTS - i), now - 60 * (POINTS - i - 1), moved(obs, i))
             for i in range(POINTS)]
    outcomes = metrics.CHECK_OUTCOMES
    checks: list[tuple[Check, CheckState | None]] = [
        (Listed(f"target-{i}", 5.0, 10.0),
         CheckState(runs=100 + i, last_outcome=outcomes[1 + i % 3 if i % 10 == 9 else 0],
                    last_duration=0.012 * (1 + i % 4), last_run_at=now - i % 15,
                    last_error="connect: connection refused" if i % 10 == 9 else ""))
        for i in range(CHECKS)
    ]
    return page.View(version="bench", config_path="config.yaml", config=parse_config(""),
                     checks=checks, diagnosis=diagnose(obs, Thresholds()).to_json(),
                     observations=obs, trend=trend, now=now)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--repeat", type=int, default=200, help="timed runs per measurement")
    args = ap.parse_args(argv)
    v = view()
    html = page.document(v)
    tiles, sparks = html.count('<article class="tile'), html.count("<svg")
    print(f"Python {platform.python_version()} on {platform.machine()}, "
          f"median of {args.repeat} runs; {len(v.checks)} checks, {tiles} tiles, "
          f"{sparks} sparklines, {len(html) / 1024:.0f} KiB of HTML")
    ours = median_ms(lambda: page.document(v), args.repeat)
    live = median_ms(lambda: page.live(v), args.repeat)
    ref = median_ms(lambda: json.dumps([dataclasses.asdict(p.obs) for p in v.trend],
                                       default=str), args.repeat)
    print(f"{'/ ms':>8} {'/live ms':>9} {'ref ms':>8} {'ratio':>6}")
    print(f"{ours:>8.2f} {live:>9.2f} {ref:>8.2f} {ours / ref:>5.2f}x")
    ok = ours < TARGET_MS
    print("PASS" if ok else f"FAIL: target is under {TARGET_MS} ms per render")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
