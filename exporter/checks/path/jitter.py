"""Jitter of a path from its RTTs: the RFC 3550 estimator and the mean |D| of one burst."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import pairwise

#: RFC 3550 A.8: the jitter estimate moves 1/16 of the way to each new |D|.
RFC3550_GAIN = 1 / 16


def rtt_diffs(rtts: Sequence[float | None]) -> list[float]:
    """|D| between consecutively *sent* answered packets (send order, not arrival order:
    with jitter larger than the spacing, replies overtake each other)."""
    answered = [r for r in rtts if r is not None]
    return [abs(b - a) for a, b in pairwise(answered)]


def mean_abs_diff(rtts: Sequence[float | None]) -> float | None:
    diffs = rtt_diffs(rtts)
    return statistics.fmean(diffs) if diffs else None


def rfc3550(jitter: float | None, diffs: Sequence[float]) -> float | None:
    """The RFC 3550 estimator advanced over ``diffs``. It starts from the first |D| instead
    of the RFC's zero: from zero it reads low for its first ~50 samples, which at 20 packets
    per burst would be the first minutes of every exporter start."""
    for d in diffs:
        jitter = d if jitter is None else jitter + (d - jitter) * RFC3550_GAIN
    return jitter
