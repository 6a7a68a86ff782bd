"""The report as data: the JSON document (``llm-latency-exporter-report/1``) and what the
HTML and Markdown render. ``Report.model_json_schema()`` is its JSON Schema; an earlier
report's JSON, read back through :class:`Report`, is a baseline.

Durations are seconds and ratios 0..1 throughout; a statistic with no data is null, never
0. ``by_class`` maps ``daytime`` and each peak window's name to that class's value.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FORMAT = "llm-latency-exporter-report/1"

Unit = Literal["s", "ratio", "req/s", "tok/s"]


class _Model(BaseModel):
    # JSON has no infinity: a value that is not finite is written null, never `Infinity`
    # (which JSON.parse and strict parsers refuse).
    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="null")


class Quantiles(_Model):
    """P50/P95/P99 of one class; ``count`` is the observations (or samples) behind them."""

    count: float
    p50: float | None
    p95: float | None
    p99: float | None
    #: From a histogram: per quantile, the bucket [lower, upper] it is interpolated inside
    #: (upper null past the last bound). Two quantiles in one bucket are not told apart by
    #: the data: the difference between them is the interpolation's.
    buckets: dict[str, tuple[float, float | None]] = Field(default_factory=dict)


class Diff(_Model):
    """A peak window minus daytime, per quantile (null where either side has no data)."""

    p50: float | None
    p95: float | None
    p99: float | None


class Metric(_Model):
    """One statistic of one scope, per class, and each peak window's difference."""

    metric: str
    unit: Unit
    by_class: dict[str, Quantiles | None]
    diff: dict[str, Diff]


class Carrier(_Model):
    """Per carrier and vantage point: probe TTFT/TPOT (long-context probes excepted), path
    RTT, jitter (RFC 3550) and loss (per burst), the real users' smoothed RTT (the clients
    check) and the probes' kernel RTT, the packet loss, the real users' retransmission ratio
    and the probe streams' retransmission and out-of-order ratios over each class."""

    vantage: str
    carrier: str
    metrics: list[Metric]
    loss_ratio: dict[str, float | None]
    #: Segments retransmitted over segments sent to the carrier's real users ({} in a
    #: report from before the clients check, so it still reads as a baseline).
    retransmission_ratio: dict[str, float | None] = {}
    #: The carrier's probes' own streams (TCP_INFO): segments retransmitted over sent, and
    #: out of order over data segments received ({} in a report from before they did).
    stream_retransmission_ratio: dict[str, float | None] = {}
    stream_out_of_order_ratio: dict[str, float | None] = {}
    #: Means per class, seconds, that add up where quantiles do not: the field guides'
    #: segments (``network`` the probes' kernel RTT; ``network_frontend``, ``queue`` and
    #: ``prefill`` the engine's timing of the probes' requests, which sum to their
    #: ``ttft``; ``tpot`` per output token) ({} in a report from before them).
    means: dict[str, dict[str, float | None]] = {}


class RouteChange(_Model):
    at: dt.datetime
    old: str
    new: str


class Route(_Model):
    """``direction`` out: measured from the GPU site towards the carrier's target; in: from
    a vantage point inside the carrier's network (the way users' traffic comes in)."""

    vantage: str
    carrier: str
    target: str
    direction: Literal["out", "in"]
    share: dict[str, float]
    changes: list[RouteChange]
    changes_counted: float | None


class OutcomeCounts(_Model):
    requests: float
    outcomes: dict[str, float]
    failure_ratio: float | None
    timeout_ratio: float | None


class Outcomes(_Model):
    vantage: str
    probe: str
    by_class: dict[str, OutcomeCounts | None]


class Bucket(_Model):
    #: Upper bound in seconds; null for the last bucket, which has none (+Inf).
    le: float | None
    share: float


class Queue(_Model):
    """Engine queue time of finished requests: quantiles per class, and the share of the
    period's requests per bucket (non-cumulative)."""

    vantage: str
    target: str
    model: str
    time: Metric
    buckets: list[Bucket]


class Goodput(_Model):
    vantage: str
    probe: str
    objective: float
    by_class: dict[str, float | None]
    met: dict[str, bool | None]


class LongContext(_Model):
    vantage: str
    probe: str
    carrier: str
    ttft: Metric


class Episode(_Model):
    """One stretch of time a diagnosis verdict was named; evidence is the chain's at its
    end, re-run over Prometheus."""

    layer: str
    cause: str
    scope: dict[str, str]
    start: dt.datetime
    end: dt.datetime
    duration_s: float
    primary: bool
    paged: bool
    summary: str
    evidence: list[str]


class Check(_Model):
    """One row of the host and GPU checklist: on ``scope`` (vantage, and gpu for a GPU's),
    ``item`` should be ``expected``; it was ``value`` (null: no data), and ``ok`` says
    whether that holds."""

    scope: dict[str, str]
    item: str
    expected: str
    value: float | None
    unit: str
    ok: bool | None


class Bench(_Model):
    source: str
    config: dict[str, Any]
    summary: dict[str, Any]


class Change(_Model):
    metric: str
    unit: str
    baseline: float | None
    current: float | None
    change: float | None
    regression: bool


class Baseline(_Model):
    source: str
    kind: Literal["report", "bench"]
    max_regression: float
    changes: list[Change]

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]


class Span(_Model):
    """A stretch of the period in one class (a minute-aligned piece of a day or an
    evening)."""

    cls: str
    start: dt.datetime
    end: dt.datetime


class Slo(_Model):
    ttft_p95_seconds: float
    tpot_p95_seconds: float
    objective: float


class Report(_Model):
    format: Literal["llm-latency-exporter-report/1"] = "llm-latency-exporter-report/1"
    generated_at: dt.datetime
    prometheus: str
    start: dt.datetime
    end: dt.datetime
    timezone: str
    peak_windows: dict[str, str]
    classes: list[str]
    class_seconds: dict[str, float]
    spans: list[Span]
    slo: Slo
    carriers: list[Carrier]
    routes: list[Route]
    outcomes: list[Outcomes]
    queue: list[Queue]
    goodput: list[Goodput]
    long_context: list[LongContext]
    verdicts: list[Episode]
    #: Empty in reports from before the checklist.
    checklist: list[Check] = Field(default_factory=list)
    bench: Bench | None = None
    baseline: Baseline | None = None
