"""Each number of this report against a baseline (an earlier report's JSON, or a bench
JSON), with its change and the regressions marked by bench's rule: worse by more than
``max_regression``, and for a duration by more than a millisecond."""

from __future__ import annotations

from collections.abc import Iterator

from exporter.bench import compare as bench_compare
from exporter.report.model import Baseline, Bench, Change, Report

#: A latency must move by more than this to regress (bench's --regression-floor default).
FLOOR_SECONDS = 0.001
#: A ratio (loss, failures) must move by more than this: 0.1% to 0.2% loss is no finding.
FLOOR_RATIO = 0.005
#: Flat name -> (value, unit, higher is worse).
Flat = dict[str, tuple[float | None, str, bool]]


def _where(vantage: str, what: str) -> str:
    return f"{what} from {vantage}" if vantage else what


def _quantiles(name: str, metric_q: object) -> Iterator[tuple[str, float | None]]:
    for q in ("p50", "p95", "p99"):
        yield f"{name} {q}", getattr(metric_q, q, None)


def flatten(report: Report) -> Flat:
    """Every compared number of a report under a stable name."""
    out: Flat = {}
    for c in report.carriers:
        where = _where(c.vantage, f"carrier {c.carrier or '-'}")
        for m in c.metrics:
            for cls, qs in m.by_class.items():
                for name, value in _quantiles(f"{where} {m.metric}", qs):
                    out[f"{name} {cls}"] = (value, m.unit, True)
        for cls, ratio in c.loss_ratio.items():
            out[f"{where} packet loss {cls}"] = (ratio, "ratio", True)
        for cls, ratio in c.retransmission_ratio.items():
            out[f"{where} real users' retransmission {cls}"] = (ratio, "ratio", True)
        for cls, ratio in c.stream_retransmission_ratio.items():
            out[f"{where} probe stream retransmission {cls}"] = (ratio, "ratio", True)
        for cls, ratio in c.stream_out_of_order_ratio.items():
            out[f"{where} probe stream out of order {cls}"] = (ratio, "ratio", True)
    for o in report.outcomes:
        where = _where(o.vantage, f"probe {o.probe}")
        for cls, counts in o.by_class.items():
            out[f"{where} failure ratio {cls}"] = (
                getattr(counts, "failure_ratio", None), "ratio", True)
            out[f"{where} timeout ratio {cls}"] = (
                getattr(counts, "timeout_ratio", None), "ratio", True)
    for g in report.goodput:
        for cls, ratio in g.by_class.items():
            out[f"{_where(g.vantage, f'probe {g.probe}')} goodput {cls}"] = (ratio, "ratio", False)
    for lc in report.long_context:
        where = _where(lc.vantage, f"probe {lc.probe} long-context ttft")
        for cls, qs in lc.ttft.by_class.items():
            for name, value in _quantiles(where, qs):
                out[f"{name} {cls}"] = (value, "s", True)
    for q in report.queue:
        where = _where(q.vantage, f"engine {q.target} {q.model} queue time")
        for cls, qs in q.time.by_class.items():
            for name, value in _quantiles(where, qs):
                out[f"{name} {cls}"] = (value, "s", True)
    return out


def _change(metric: str, unit: str, base: float | None, value: float | None, worse_up: bool,
            max_regression: float) -> Change:
    floor = FLOOR_SECONDS if unit == "s" else FLOOR_RATIO if unit == "ratio" else 0.0
    rel = None if base is None or value is None or base == 0 else (value - base) / base
    return Change(metric=metric, unit=unit, baseline=base, current=value, change=rel,
                  regression=bench_compare.regressed(base, value, worse_up, max_regression,
                                                     floor))


def _bench_changes(base: Bench, current: Bench, max_regression: float) -> list[Change]:
    units = {"ms": "s", "%": "ratio"}
    return [
        Change(metric=f"bench {c.metric}", unit=units.get(c.unit, c.unit), baseline=c.baseline,
               current=c.current, change=c.change, regression=c.regression)
        for c in bench_compare.compare(base.summary, current.summary, max_regression,
                                       FLOOR_SECONDS)
    ]


def against(baseline: Report | Bench, source: str, report: Report,
            max_regression: float) -> Baseline:
    """The comparison; a bench baseline compares with the report's bench run only."""
    changes: list[Change] = []
    if isinstance(baseline, Report):
        base = flatten(baseline)
        for name, (value, unit, worse_up) in flatten(report).items():
            if value is not None or base.get(name, (None,))[0] is not None:
                changes.append(_change(name, unit, base.get(name, (None,))[0], value,
                                       worse_up, max_regression))
        if baseline.bench is not None and report.bench is not None:
            changes += _bench_changes(baseline.bench, report.bench, max_regression)
        kind = "report"
    else:
        assert report.bench is not None, "checked by the command"
        changes = _bench_changes(baseline, report.bench, max_regression)
        kind = "bench"
    return Baseline(source=source, kind=kind, max_regression=max_regression, changes=changes)
