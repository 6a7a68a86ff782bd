"""Hostile config files against `check-config`: wall time and peak memory of the whole
process, as a ratio to the same command on config.example.yaml (the named reference, run
in the same script, so machine noise hits both).

The files are the ones tests/test_hostile_config.py checks for the one-line error: a
billion-laughs alias bomb, 50k-deep nesting, a NUL byte, invalid UTF-8, a FIFO, a secret
file pointing at /dev/zero, a 10 MB file, and an empty file.

Run (from the repository root): .venv/bin/python -m benchmarks.hostile_config
Exit status 1 if any file takes over 2 s or 200 MB, or over 3x the reference's time.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.hostile import HOSTILE

RUNS = 5
MAX_SECONDS = 2.0
MAX_RSS_MB = 200.0
MAX_RATIO = 3.0
ENV = {k: v for k, v in os.environ.items() if k not in ("ENGINE_TOKEN", "LLM_API_KEY")}


def measure(path: Path) -> tuple[float, float]:
    """Median seconds and the peak RSS (MB) of `check-config path` over RUNS runs."""
    times, peaks = [], []
    for _ in range(RUNS):
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "exporter", "check-config", str(path)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        _, _, usage = os.wait4(proc.pid, 0)
        times.append(time.perf_counter() - start)
        peaks.append(usage.ru_maxrss / 1024)
    return statistics.median(times), max(peaks)


def main() -> int:
    ref_s, ref_mb = measure(Path("config.example.yaml"))
    print(f"reference: check-config config.example.yaml  {ref_s:.2f} s  {ref_mb:.0f} MB")
    print(f"{'file':<18}{'seconds':>9}{'x ref':>8}{'peak MB':>9}")
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for kind in sorted(HOSTILE):
            path = Path(tmp) / f"{kind}.yaml"
            HOSTILE[kind][0](path)
            seconds, peak = measure(path)
            ratio = seconds / ref_s
            bad = seconds > MAX_SECONDS or peak > MAX_RSS_MB or ratio > MAX_RATIO
            failed |= bad
            print(f"{kind:<18}{seconds:>9.2f}{ratio:>8.2f}{peak:>9.0f}{'  FAIL' if bad else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
