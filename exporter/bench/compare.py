"""``--compare``: each metric's change against a saved ``--json`` run, and which of them
regressed past ``--max-regression``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.bench.config import DEFAULT_PERCENTILES, BenchError, percentile_key
from exporter.bench.summary import FORMAT, LATENCIES, format_ms

#: Percentiles --compare gates on, when the run reports them: the median and the tail.
#: p90/p99 of a short run move too much between identical runs to fail a build on.
GATED_PERCENTILES = ("p50", "p95")
#: What a load is, for refusing to compare runs under different ones.
LOAD_KEYS = ("concurrency", "rate")


@dataclass(frozen=True)
class Change:
    metric: str
    unit: str
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


Row = tuple[str, str, float | None, bool, bool]


def _metric_rows(summary: dict[str, Any], percentiles: Sequence[float]) -> list[Row]:
    """(name, unit, value, higher_is_worse, gated) for every compared metric."""
    rows: list[Row] = []
    for key in LATENCIES:
        d = summary.get("latency", {}).get(key)
        for q in percentiles:
            p = percentile_key(q)
            rows.append((f"{key[:-2]} {p}", "ms", d.get(p) if d else None, True,
                         p in GATED_PERCENTILES))
    goodput = summary.get("goodput") or {}
    rows += [
        ("request throughput", "req/s", summary.get("request_throughput"), False, True),
        ("output token throughput", "tok/s", summary.get("output_token_throughput"), False,
         True),
        ("goodput", "req/s", goodput.get("per_s"), False, False),
        ("goodput ratio", "%", goodput.get("ratio"), False, True),
        ("success ratio", "%", summary.get("success_ratio"), False, True),
    ]
    return rows


def compare(
    baseline: dict[str, Any],
    current: dict[str, Any],
    max_regression: float,
    floor: float,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> list[Change]:
    """Each metric's change, for the current run's percentiles (a percentile the baseline
    did not report shows as -); a gated one regresses past ``max_regression`` (relative),
    and a latency must also have moved by more than ``floor`` seconds (sub-millisecond
    jitter on a fast metric is not a regression)."""
    base = {row[0]: row[2] for row in _metric_rows(baseline, percentiles)}
    out: list[Change] = []
    for name, unit, value, worse_up, gated in _metric_rows(current, percentiles):
        b = base.get(name)
        regression = gated and regressed(b, value, worse_up, max_regression, floor)
        out.append(Change(name, unit, b, value, worse_up, gated, regression))
    return out


def regressed(baseline: float | None, value: float | None, higher_is_worse: bool,
              max_regression: float, floor: float) -> bool:
    """Worse than ``baseline`` by more than ``max_regression`` (relative); a latency must
    also have moved by more than ``floor`` seconds."""
    if baseline is None or value is None or baseline <= 0:
        return False
    rel = (value - baseline) / baseline
    if higher_is_worse:
        return rel > max_regression and value - baseline > floor
    return -rel > max_regression


def format_value(value: float | None, unit: str) -> str:
    """A compared value with its unit, so no row is a bare number."""
    if value is None:
        return "-"
    if unit == "ms":
        return f"{format_ms(value)} ms"
    if unit == "%":
        return f"{value:.1%}"
    return f"{value:.2f} {unit}"


def render_compare(changes: list[Change], path: str, max_regression: float) -> str:
    lines = [
        f"compared with {path} (gated: p50/p95 latencies, throughput, goodput ratio, "
        f"success; max regression {max_regression:.0%})",
        f"{'metric':<26}{'baseline':>16}{'current':>16}{'change':>10}",
    ]
    for c in changes:
        base, cur = format_value(c.baseline, c.unit), format_value(c.current, c.unit)
        change = "-" if c.change is None else f"{c.change:+.1%}"
        flag = "  REGRESSION" if c.regression else ("" if c.gated else "  (not gated)")
        lines.append(f"{c.metric:<26}{base:>16}{cur:>16}{change:>10}{flag}")
    bad = [c.metric for c in changes if c.regression]
    lines.append(
        f"regressions past {max_regression:.0%}: {', '.join(bad)}" if bad else "no regression"
    )
    return "\n".join(lines)


def load_baseline(path: str, flag: str = "--compare") -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"{flag} {path}: cannot read a bench JSON file: {exc}") from None
    return check_bench(data, path, flag)


def check_bench(data: Any, path: str, flag: str) -> dict[str, Any]:
    """``data`` if it is a bench ``--json`` document, else BenchError naming ``flag``."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BenchError(f"{flag} {path}: not a bench --json file (format {FORMAT})")
    summary = data.get("summary")
    if not isinstance(summary, dict):
        raise BenchError(f"{flag} {path}: no summary in the file")
    return data


def describe_load(config: dict[str, Any]) -> str:
    if config.get("concurrency") is not None:
        return f"concurrency {config['concurrency']}"
    if config.get("rate") is not None:
        return f"rate {config['rate']:g} req/s"
    return "an unknown load"


def check_same_load(path: str, base: dict[str, Any], cur: dict[str, Any]) -> None:
    """Latency under concurrency 8 against concurrency 1 (or a rate against a concurrency)
    measures the load change, not the code change: refuse unless told otherwise."""
    if any(base.get(k) != cur.get(k) for k in LOAD_KEYS):
        raise BenchError(
            f"--compare {path}: the baseline ran at {describe_load(base)}, this run at "
            f"{describe_load(cur)}; give the same load, or --allow-different-load"
        )


def differences(base: dict[str, Any], cur: dict[str, Any]) -> str:
    keys = ("url", "model", "api", "concurrency", "rate", "max_tokens", "prompt_tokens",
            "prompts", "dataset")
    # A key the baseline lacks comes from an older version: not a difference in the runs.
    diffs = [f"{k} {base.get(k)!r} -> {cur.get(k)!r}" for k in keys
             if k in base and base.get(k) != cur.get(k)]
    return f"note: the runs differ in {'; '.join(diffs)}\n" if diffs else ""
