"""Window statistics as PromQL computes them, over sample keys of the embedded history.

``histogram_quantile`` follows Prometheus' ``bucketQuantile`` (promql/quantile.go) step by
step, so a P95 from the embedded windows equals ``histogram_quantile(0.95, sum by (le)
(increase(..._bucket[w])))`` over the same bucket counts: both sources must agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any, TypeVar

T = TypeVar("T")
#: Labels of one sample, sorted, without ``le``.
Labels = tuple[tuple[str, str], ...]
#: (sample name, labels without le, le or None): one scalar of a snapshot.
Key = tuple[str, Labels, float | None]


def matches(labels: Labels, match: Mapping[str, str]) -> bool:
    """True if every label of ``match`` has that value (an absent label reads as "", as in
    PromQL, where an empty label value is no label)."""
    if not match:
        return True
    have = _as_dict(labels)
    return all(have.get(k, "") == v for k, v in match.items())


# Every evaluation matches the same few thousand label sets many times over.
@lru_cache(maxsize=1 << 16)
def _as_dict(labels: Labels) -> Mapping[str, str]:
    return dict(labels)


def part(
    cache: dict[tuple[str, str, str], dict[str, list[Any]]], key: tuple[str, str, str],
    items: Callable[[], Iterable[tuple[Key, T]]], value: str,
) -> list[tuple[Key, T]]:
    """The ``items`` whose label ``key[2]`` is ``value``, grouped once into ``cache``: per
    path target one index pass, not one scan of every target's series (quadratic at 1000)."""
    index = cache.get(key)
    if index is None:
        index = cache[key] = {}
        for item in items():
            index.setdefault(label(item[0][1], key[2]), []).append(item)
    return index.get(value, [])


def label(labels: Labels, name: str) -> str:
    for k, v in labels:
        if k == name:
            return v
    return ""


def select(items: Iterable[tuple[Key, float]], match: Mapping[str, str]) -> Iterator[
    tuple[Key, float]
]:
    return ((k, v) for k, v in items if matches(k[1], match))


def total(items: Iterable[tuple[Key, float]], match: Mapping[str, str]) -> float | None:
    """``sum(...)`` over the matching series; None when no series matches (absent, not 0)."""
    found = False
    acc = 0.0
    for _, v in select(items, match):
        found = True
        acc += v
    return acc if found else None


def by_label(
    items: Iterable[tuple[Key, float]], match: Mapping[str, str], name: str
) -> dict[str, float]:
    """``sum by (name) (...)`` over the matching series."""
    out: dict[str, float] = {}
    for key, v in select(items, match):
        group = label(key[1], name)
        out[group] = out.get(group, 0.0) + v
    return out


def buckets(items: Iterable[tuple[Key, float]], match: Mapping[str, str]) -> dict[float, float]:
    """``sum by (le) (...)`` over the matching ``_bucket`` series."""
    out: dict[float, float] = {}
    for key, v in select(items, match):
        le = key[2]
        if le is not None:
            out[le] = out.get(le, 0.0) + v
    return out


def _locate(q: float, counts: Mapping[float, float]
            ) -> tuple[list[float], list[float], int, float] | None:
    """(the bounds, their cumulative counts made monotonic, the index of the bucket where
    the ``q`` quantile's rank falls, the rank); None where PromQL returns NaN."""
    bounds = sorted(counts)
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        return None
    # Prometheus' ensureMonotonic: a lower bucket above a higher one (a scrape racing an
    # observation) is taken as the higher one's count, never extrapolated from.
    cum: list[float] = []
    highest = 0.0
    for le in bounds:
        highest = max(highest, counts[le])
        cum.append(highest)
    if cum[-1] == 0:
        return None
    rank = q * cum[-1]
    return bounds, cum, next(i for i, c in enumerate(cum) if c >= rank), rank


def histogram_quantile(q: float, counts: Mapping[float, float]) -> float | None:
    """Prometheus' ``histogram_quantile`` over cumulative bucket counts ``{le: count}``;
    None where PromQL returns NaN (no +Inf bucket, under two buckets, no observations)."""
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    found = _locate(q, counts)
    if found is None:
        return None
    bounds, cum, b, rank = found
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], cum[b]
    if b > 0:
        start = bounds[b - 1]
        count -= cum[b - 1]
        rank -= cum[b - 1]
    return start + (end - start) * (rank / count)


def quantile_bucket(q: float, counts: Mapping[float, float]) -> tuple[float, float] | None:
    """The bucket ``(lower, upper]`` the ``q`` quantile is interpolated inside: its
    resolution (upper is inf past the last finite bound); None where it has no value."""
    found = None if math.isnan(q) or not 0 <= q <= 1 else _locate(q, counts)
    if found is None:
        return None
    bounds, _, b, _ = found
    return (bounds[b - 1] if b > 0 else min(0.0, bounds[0])), bounds[b]


def below(counts: Mapping[float, float], threshold: float) -> float:
    """Observations at or under the highest bucket bound <= ``threshold`` (0 when none)."""
    under = [le for le in counts if le <= threshold]
    return counts[max(under)] if under else 0.0


def ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den
