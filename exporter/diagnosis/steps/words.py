"""How the steps turn numbers into words and labels: seconds and shares as a pager reads
them, a quantile's bucket, a strength from how far past its line a value is, a probe's
scope."""

from __future__ import annotations

from collections.abc import Sequence

from exporter.diagnosis.observations import ProbeWindow


def bucket_of(value: float, grid: Sequence[float]) -> tuple[float, float] | None:
    """The bucket bounds a histogram quantile lies between: histogram_quantile interpolates
    linearly inside the bucket the rank falls in (from 0 in the first, and answers the
    highest finite bound past it), so the quantile is known to no finer than these two."""
    upper = next((b for b in grid if value <= b), None)
    if upper is None:
        return None
    return max((b for b in grid if b < upper), default=0.0), upper


def resolution(value: float, grid: Sequence[float], threshold: float, what: str) -> str:
    """A clause for a summary when ``threshold`` lies inside the quantile's bucket: whether
    the quantile is over it is then the interpolation's guess, not a measurement (vLLM's
    TTFT buckets jump from 0.25 s to 0.5 s: a 0.3 s SLO sits inside one)."""
    bucket = bucket_of(value, grid)
    if bucket is None or not bucket[0] < threshold < bucket[1]:
        return ""
    return (f" (the engine's histogram has no bucket between {secs(bucket[0])} and "
            f"{secs(bucket[1])}, so its P95 against the {secs(threshold)} {what} is "
            "interpolated)")


def strength(value: float, threshold: float, base: float = 0.6) -> float:
    """Confidence from how far past its threshold a value is: ``base`` at the threshold,
    rising to 0.95 at twice it. A value just over a line is weaker evidence than one far
    past it."""
    if threshold <= 0:
        return 0.95
    over = min(1.0, max(0.0, value / threshold - 1.0))
    return round(base + (0.95 - base) * over, 3)


def secs(value: float) -> str:
    """Seconds the way a pager reads them: 1.8 s, 450 ms."""
    if value >= 1:
        return f"{value:.3g} s"
    return f"{value * 1000:.3g} ms"


def pct(value: float) -> str:
    return f"{value * 100:.2g}%" if value < 0.1 else f"{value * 100:.0f}%"


def probe_scope(p: ProbeWindow) -> dict[str, str]:
    return {k: v for k, v in (("carrier", p.carrier), ("target", p.target),
                              ("probe", p.probe), ("engine", p.engine), ("site", p.site),
                              ("vantage", p.vantage)) if v}


def probe_labels(p: ProbeWindow) -> dict[str, str]:
    return {"probe": p.probe, "target": p.target, "carrier": p.carrier, "vantage": p.vantage}
