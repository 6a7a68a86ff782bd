"""A run's numbers: latency percentiles, throughput and goodput over its records, as the
table on stdout and as the ``--json`` document.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from exporter import __version__
from exporter.bench.config import DEFAULT_PERCENTILES, BenchConfig, percentile_key
from exporter.bench.failures import failure_lines, failures
from exporter.bench.runner import RunResult
from exporter.metrics import ProbeOutcome
from exporter.probing.request import target_of

FORMAT = "llm-latency-exporter-bench/1"
LATENCIES = ("ttft_s", "ttfc_s", "tpot_s", "itl_s", "e2e_s")


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def distribution(
    values: list[float], percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> dict[str, float | int] | None:
    if not values:
        return None
    ordered = sorted(values)
    out: dict[str, float | int] = {"count": len(ordered), "mean": sum(ordered) / len(ordered)}
    for q in percentiles:
        out[percentile_key(q)] = percentile(ordered, q)
    out["max"] = ordered[-1]
    return out


def summarize(
    records: list[dict[str, Any]],
    duration: float,
    slo_ttft: float,
    slo_tpot: float,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> dict[str, Any]:
    """Percentiles over ok requests (ITL pooled over all their gaps); goodput over all."""
    ok = [r for r in records if r["outcome"] == ProbeOutcome.OK.value]
    outcomes = Counter(r["outcome"] for r in records)
    latency: dict[str, Any] = {}
    for key in LATENCIES:
        if key == "itl_s":
            values = [g for r in ok for g in r["itl_s"]]
        else:
            values = [r[key] for r in ok if r[key] is not None]
        latency[key] = distribution(values, percentiles)
    good = sum(
        1
        for r in ok
        if r["ttft_s"] <= slo_ttft and (r["tpot_s"] is None or r["tpot_s"] <= slo_tpot)
    )
    out_tokens = sum(r["output_tokens"] or 0 for r in ok)
    prompt_counts = [r["prompt_tokens"] for r in ok if r["prompt_tokens"] is not None]
    per_s = (lambda n: n / duration) if duration > 0 else (lambda n: 0.0)
    return {
        "duration_s": duration,
        "requests": len(records),
        "ok": len(ok),
        "success_ratio": len(ok) / len(records) if records else 0.0,
        "outcomes": {o.value: outcomes[o.value] for o in ProbeOutcome if outcomes[o.value]},
        "failures": failures(records),
        "request_throughput": per_s(len(ok)),
        "output_token_throughput": per_s(out_tokens),
        "input_token_throughput": per_s(sum(prompt_counts)) if prompt_counts else None,
        "output_tokens": out_tokens,
        "output_tokens_estimated": any(r["output_tokens_estimated"] for r in ok),
        "goodput": {
            "good": good,
            "ratio": good / len(records) if records else 0.0,
            "per_s": per_s(good),
            "slo_s": {"ttft": slo_ttft, "tpot": slo_tpot},
        },
        "latency": latency,
    }


def format_ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def render_summary(cfg: BenchConfig, summary: dict[str, Any]) -> str:
    mode = (
        f"concurrency {cfg.concurrency}" if cfg.concurrency is not None else f"rate {cfg.rate:g}/s"
    )
    keys = ["mean", *(percentile_key(q) for q in cfg.percentiles), "max"]
    source = (
        "synthetic prompts" if cfg.dataset == "random" else f"{cfg.dataset} {cfg.prompts_path}"
    )
    lines = [
        f"bench: {summary['requests']} requests to {target_of(cfg.url)} ({cfg.api}, model "
        f"{cfg.model}), {mode}, {source}, {summary['duration_s']:.2f}s",
        "",
        f"{'latency (ms)':<14}" + "".join(f"{k:>10}" for k in keys) + f"{'n':>8}",
    ]
    names = {"ttft_s": "ttft", "ttfc_s": "ttfc", "tpot_s": "tpot", "itl_s": "itl",
             "e2e_s": "e2e"}
    for key, name in names.items():
        d = summary["latency"][key]
        if d is None:
            lines.append(f"{name:<14}{'-':>10}")
            continue
        cells = "".join(f"{format_ms(d.get(k)):>10}" for k in keys)
        lines.append(f"{name:<14}{cells}{d['count']:>8}")
    g = summary["goodput"]
    outcomes = ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items()) or "none"
    inp = summary["input_token_throughput"]
    # One row per rate, each with its unit: req/s and tok/s are not comparable numbers.
    lines += [
        "",
        f"{'throughput':<14}{summary['request_throughput']:.2f} req/s",
        f"{'output tokens':<14}{summary['output_token_throughput']:.1f} tok/s",
        f"{'input tokens':<14}" + ("-" if inp is None else f"{inp:.1f} tok/s"),
        f"{'goodput':<14}{g['per_s']:.2f} req/s, {g['ratio']:.1%} of requests within SLO "
        f"(ttft <= {g['slo_s']['ttft'] * 1000:g} ms, tpot <= {g['slo_s']['tpot'] * 1000:g} ms)",
        f"{'outcomes':<14}{outcomes}",
        *failure_lines(summary.get("failures", {})),
    ]
    if cfg.dataset_skipped:
        lines.append(f"note: {cfg.dataset_skipped} {cfg.dataset} entries without a human turn "
                     "and a gpt reply were skipped")
    if summary["output_tokens_estimated"]:
        lines.append(
            "note: the server sent no usage, so output tokens (and TPOT) count chunks, not tokens"
        )
    return "\n".join(lines)


def report(cfg: BenchConfig, run: RunResult, summary: dict[str, Any]) -> dict[str, Any]:
    """The ``--json`` document: the run's settings, its summary and every request."""
    return {
        "format": FORMAT,
        "version": __version__,
        "run_id": run.run_id,
        "started_at": run.started_at,
        # start_s values are relative to this CLOCK_MONOTONIC reading, so records can be
        # lined up with anything else on the host that stamps the same clock.
        "origin_monotonic_s": run.origin,
        "config": cfg.describe(),
        "summary": summary,
        "requests": run.records,
    }
