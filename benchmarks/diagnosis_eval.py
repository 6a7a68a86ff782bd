"""Cost of one decision-chain evaluation for 10 probes, 3 engines, 30 paths and 8 GPUs.

Input: ``tests.support.observations.fleet()`` (10 probes over three carriers and three
engines, 30 carrier paths, 8 GPUs spread over the engines), in two states:

* healthy: every step runs to ``ruled_out`` and collects the evidence that cleared it (the
  most evidence objects a healthy window makes);
* faulted: loss on every mobile path, one engine queueing with every probe slow, a thermally
  throttled GPU: findings, attribution, folding and summaries all run.

Ours = ``exporter.diagnosis.chain.diagnose(obs, thresholds)``; also timed, for scale, the
JSON form (``diagnose(...).to_json()`` then ``json.dumps``) that /api/v1/diagnosis serves.
Reference = ``json.dumps(dataclasses.asdict(obs))`` of the same observations: one plain walk
over every field, the least any consumer of the window pays. Each is the median of
``--repeat`` runs after a warm-up.

Run (from the repository root): .venv/bin/python -m benchmarks.diagnosis_eval
Exit status 1 if a median evaluation takes 5 ms or more.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace

from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.thresholds import Thresholds
from tests.support.observations import fleet

TARGET_MS = 5.0


def faulted(obs: Observations) -> Observations:
    slow = obs.engines[0].engine
    return replace(
        obs,
        paths=tuple(replace(p, lost=12) if p.carrier == "mobile" else p for p in obs.paths),
        engines=tuple(replace(e, queue_seconds=900.0, waiting=25.0, running=64.0,
                              ttft_p95=2.4) if e.engine == slow else e for e in obs.engines),
        probes=tuple(replace(p, ttft_p95=2.6) for p in obs.probes),
        gpus=tuple(replace(g, clock_events=("hw_thermal",)) if g.gpu == "0" else g
                   for g in obs.gpus),
    )


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm caches outside the measurement
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def timings(obs: Observations, th: Thresholds, repeat: int) -> tuple[float, float, float]:
    """Median ms of the evaluation, of it with its JSON form, and of the reference walk."""
    ours = median_ms(lambda: diagnose(obs, th), repeat)
    full = median_ms(lambda: json.dumps(diagnose(obs, th).to_json()), repeat)
    ref = median_ms(lambda: json.dumps(dataclasses.asdict(obs), default=str), repeat)
    return ours, full, ref


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--repeat", type=int, default=2000, help="timed runs per measurement")
    args = ap.parse_args(argv)
    th = Thresholds()
    print(f"Python {platform.python_version()} on {platform.machine()}, "
          f"median of {args.repeat} runs")
    print(f"{'state':>8} {'verdicts':>8} {'evidence':>8} {'diagnose ms':>11} {'+json ms':>9} "
          f"{'ref ms':>7} {'ratio':>6}")
    ok = True
    base = fleet(probes=10, engines=3, paths=30, gpus=8)
    for name, obs in (("healthy", base), ("faulted", faulted(base))):
        d = diagnose(obs, th)
        evidence = sum(len(s.evidence) for s in d.steps) + sum(len(v.evidence)
                                                                for v in d.verdicts)
        ours, full, ref = timings(obs, th, args.repeat)
        print(f"{name:>8} {len(d.verdicts):>8} {evidence:>8} {ours:>11.3f} {full:>9.3f} "
              f"{ref:>7.3f} {ours / ref:>5.2f}x")
        ok = ok and ours < TARGET_MS
    print("PASS" if ok else f"FAIL: target is under {TARGET_MS} ms per evaluation")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
