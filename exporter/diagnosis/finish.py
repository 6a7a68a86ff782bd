"""How a declaration's values for one window become its field's value (``measured(...,
finish)`` in ``observations.py``): a count, a mapping, a bucket grid, a route class. Values
arrive keyed by the leaf's ``by`` labels (``()`` for a plain statistic)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from exporter import metrics
from exporter.config.models import Config
from exporter.diagnosis.declare import count

By = Mapping[tuple[str, ...], float]


def outcomes(values: By, config: Config) -> dict[str, int]:
    return {k[0]: n for k, v in values.items() if (n := max(0, round(v)))}


def count_or_none(values: By, config: Config) -> int | None:
    return count(values, config) if () in values else None


def grid(values: By, config: Config) -> tuple[float, ...]:
    """The finite bucket bounds a histogram has in the window, lowest first: the grid its
    quantiles are interpolated on (what the evidence quotes as their resolution)."""
    return tuple(sorted({b for k in values if math.isfinite(b := float(k[0]))}))


def by_rank(values: By, config: Config) -> dict[tuple[str, str], float]:
    """Per (model, dp_rank), where the engine has data-parallel ranks at all."""
    return {(k[0], k[1]): v for k, v in values.items() if k[1]}


def pairs(values: By, config: Config) -> dict[tuple[str, str], float]:
    """Per pair of ``by`` labels (scope, resource)."""
    return {(k[0], k[1]): v for k, v in values.items()}


def links_down(values: By, config: Config) -> int:
    """Links (by ``link``) whose up gauge reads 0."""
    return sum(1 for v in values.values() if v < 1)


def or_zero(values: By, config: Config) -> float:
    return values.get((), 0.0)


def up(values: By, config: Config) -> bool | None:
    v = values.get(())
    return None if v is None else v >= 1


def lost(values: By, config: Config) -> float | None:
    """A loss ratio, never below 0: a packet in flight when a span opens is received inside
    it but was sent before it, so over a clean span the received can outnumber the sent
    (-0.13% read from a recorded off-peak baseline of a clean path)."""
    v = values.get(())
    return None if v is None else max(0.0, v)


def in_peak(values: By, config: Config) -> bool:
    return bool(values.get(()))


def _rank(config: Config, cls: str) -> int:
    # Classes outside the order (unknown) sort as the worst: never hide a bad route.
    order = config.alerting.route_class_order
    return order.index(cls) if cls in order else len(order)


def current_class(values: By, config: Config) -> str | None:
    """The route class reported now; the worst of them should two be."""
    on = [k[0] for k, v in values.items() if v >= 1]
    return max(on, key=lambda c: _rank(config, c), default=None)


def best_class(values: By, config: Config) -> str | None:
    """The best class of the route order the route had (unknown ones rank nowhere)."""
    order = config.alerting.route_class_order
    seen = [k[0] for k, v in values.items() if v >= 1 and k[0] in order]
    return min(seen, key=order.index, default=None)


def clock_events(values: By, config: Config) -> tuple[str, ...]:
    """Reasons that held the clocks for over alerting.throttle_share of the window: NVML
    flips per sample, so one sample is no throttle (as LLMGPUThrottled)."""
    share = config.alerting.throttle_share
    return tuple(sorted(k[0] for k, v in values.items() if v > share))


def runs(values: By, config: Config) -> dict[tuple[str, ...], float]:
    return dict(values)


def failing(runs: Mapping[tuple[str, ...], float]) -> bool:
    """Failed runs in the window and not one success: what the chain cannot decide from."""
    ok = sum(v for k, v in runs.items() if k[0] == metrics.CHECK_SUCCESS)
    return ok == 0 and any(v > 0 for k, v in runs.items() if k[0] != metrics.CHECK_SUCCESS)
