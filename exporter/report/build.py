"""The report from Prometheus: every section over the period's segments."""

from __future__ import annotations

import datetime as dt
import math

from exporter import redact
from exporter.config.models import Config
from exporter.diagnosis.promapi import PromClient
from exporter.report import sections
from exporter.report.checklist import checklist
from exporter.report.collect import Collector
from exporter.report.model import Bench, Report, Slo, Span
from exporter.report.period import classes, segments
from exporter.report.routes import routes
from exporter.report.verdicts import episodes

#: Points per series of a range query (Prometheus refuses over 11,000).
POINTS = 2000


def step_for(start: float, end: float) -> float:
    return float(max(1, math.ceil((end - start) / POINTS)))


def _utc(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.UTC)


def build(client: PromClient, config: Config, start: float, end: float,
          bench: Bench | None = None, now: dt.datetime | None = None) -> Report:
    pw = config.peak_windows
    segs = segments(pw, start, end)
    names = classes(pw)
    col = Collector(client, segs)
    step = step_for(start, end)
    return Report(
        generated_at=now or dt.datetime.now(dt.UTC),
        prometheus=redact.url(client.base),
        start=_utc(start), end=_utc(end), timezone=pw.timezone,
        peak_windows={n: f"{w.start:%H:%M}-{w.end:%H:%M}" for n, w in pw.windows.items()},
        classes=names,
        class_seconds={c: sum(s.seconds for s in segs if s.cls == c) for c in names},
        spans=[Span(cls=s.cls, start=_utc(s.start), end=_utc(s.end)) for s in segs],
        slo=Slo(ttft_p95_seconds=config.slo.ttft_p95_seconds,
                tpot_p95_seconds=config.slo.tpot_p95_seconds, objective=config.slo.objective),
        carriers=sections.carriers(col, names),
        routes=routes(client, start, end, step),
        outcomes=sections.outcomes(col, names),
        queue=sections.queue(col, names),
        goodput=sections.goodput(col, names, config),
        long_context=sections.long_context(col, names),
        verdicts=episodes(client, config, start, end, step),
        checklist=checklist(client, config, start, end),
        bench=bench,
    )


def is_empty(report: Report) -> bool:
    return not (report.carriers or report.routes or report.outcomes or report.queue
                or report.verdicts)
