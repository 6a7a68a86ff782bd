"""``--compare``: each metric's change against a saved ``--json`` run, and which of them
regressed past ``--max-regression``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.bench.config import BenchError
from exporter.bench.summary import FORMAT, LATENCIES, format_ms

#: Percentiles --compare gates on: the median and the tail. p90/p99 of a short run move
#: too much between identical runs to fail a build on.
GATED_PERCENTILES = ("p50", "p95")


@dataclass(frozen=True)
class Change:
    metric: str
    baseline: float | None
    current: float | None
    higher_is_worse: bool
    gated: bool
    regression: bool

    @property
    def change(self) -> float | None:
        if self.baseline is None or self.current is None or self.baseline == 0:
            return None
        return (self.current - self.baseline) / self.baseline


def _metric_rows(summary: dict[str, Any]) -> list[tuple[str, float | None, bool, bool]]:
    """(name, value, higher_is_worse, gated) for every compared metric."""
    rows: list[tuple[str, float | None, bool, bool]] = []
    for key in LATENCIES:
        d = summary.get("latency", {}).get(key)
        for p in ("p50", "p90", "p95", "p99"):
            rows.append((f"{key[:-2]} {p}", d.get(p) if d else None, True,
                         p in GATED_PERCENTILES))
    goodput = summary.get("goodput") or {}
    rows += [
        ("request throughput", summary.get("request_throughput"), False, True),
        ("output token throughput", summary.get("output_token_throughput"), False, True),
        ("goodput ratio", goodput.get("ratio"), False, True),
        ("success ratio", summary.get("success_ratio"), False, True),
    ]
    return rows


def compare(
    baseline: dict[str, Any], current: dict[str, Any], max_regression: float, floor: float
) -> list[Change]:
    """Each metric's change; a gated one regresses past ``max_regression`` (relative), and a
    latency must also have moved by more than ``floor`` seconds (sub-millisecond jitter on a
    fast metric is not a regression)."""
    base = {name: value for name, value, _, _ in _metric_rows(baseline)}
    out: list[Change] = []
    for name, value, worse_up, gated in _metric_rows(current):
        b = base.get(name)
        regression = False
        if gated and b is not None and value is not None and b > 0:
            rel = (value - b) / b
            if worse_up:
                regression = rel > max_regression and value - b > floor
            else:
                regression = -rel > max_regression
        out.append(Change(name, b, value, worse_up, gated, regression))
    return out


def render_compare(changes: list[Change], path: str, max_regression: float) -> str:
    lines = [
        f"compared with {path} (gated: p50/p95 latencies, throughput, goodput, success; "
        f"max regression {max_regression:.0%})",
        f"{'metric':<26}{'baseline':>12}{'current':>12}{'change':>10}",
    ]
    for c in changes:
        latency = c.higher_is_worse
        fmt: Callable[[float | None], str] = (
            (lambda v: format_ms(v) + " ms")
            if latency
            else (lambda v: "-" if v is None else f"{v:.3f}")
        )
        change = "-" if c.change is None else f"{c.change:+.1%}"
        flag = "  REGRESSION" if c.regression else ("" if c.gated else "  (not gated)")
        lines.append(f"{c.metric:<26}{fmt(c.baseline):>12}{fmt(c.current):>12}{change:>10}{flag}")
    bad = [c.metric for c in changes if c.regression]
    lines.append(
        f"regressions past {max_regression:.0%}: {', '.join(bad)}" if bad else "no regression"
    )
    return "\n".join(lines)


def load_baseline(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"--compare {path}: cannot read a bench JSON file: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BenchError(f"--compare {path}: not a bench --json file (format {FORMAT})")
    summary = data.get("summary")
    if not isinstance(summary, dict):
        raise BenchError(f"--compare {path}: no summary in the file")
    return data


def differences(base: dict[str, Any], cur: dict[str, Any]) -> str:
    keys = ("url", "model", "api", "concurrency", "rate", "max_tokens", "prompt_tokens",
            "prompts")
    diffs = [f"{k} {base.get(k)!r} -> {cur.get(k)!r}" for k in keys if base.get(k) != cur.get(k)]
    return f"note: the runs differ in {'; '.join(diffs)}\n" if diffs else ""
