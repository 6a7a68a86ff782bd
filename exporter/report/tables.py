"""The report's sections as tables of cells, rendered alike by the HTML and Markdown
writers. A number's cell carries its JSON pointer into report.json and its value."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from exporter.report import fmt
from exporter.report.model import Metric, Quantiles, Report
from exporter.report.stats import NAMES as QS

#: The parts of a probe's TTFT the engine times: by quantile ("ttft_queue") and by mean.
PARTS = {"network_frontend": "TTFT: network and API server", "queue": "TTFT: engine queue",
         "prefill": "TTFT: prefill"}
KERNEL_RTT = "probes' kernel RTT"
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "rtt": "RTT", "jitter": "jitter (RFC 3550)",
          "loss": "loss per burst", "queue_time": "queue time",
          "users_rtt": "real users' RTT", "probe_tcp_rtt": KERNEL_RTT, "network": KERNEL_RTT,
          **PARTS, **{f"ttft_{k}": v for k, v in PARTS.items()}}


@dataclass(frozen=True)
class Cell:
    text: str
    path: str | None = None
    value: float | None = None
    #: "" plain, "worse" (peak above daytime, failures), "bad" (SLO missed, regression),
    #: "good" (SLO met).
    mark: str = ""


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[Cell]] = field(default_factory=list)


@dataclass
class Section:
    key: str
    title: str
    intro: str
    tables: list[Table] = field(default_factory=list)
    #: Plot keys (exporter/report/plots.py) shown under the intro.
    plots: list[str] = field(default_factory=list)
    #: Free lines (verdict evidence); shown after the tables.
    notes: list[str] = field(default_factory=list)


def num(v: float | None, unit: str, path: str, mark: str = "", signed: bool = False) -> Cell:
    return Cell(fmt.value(v, unit, signed), path, v, mark)


def shared_bucket(qs: Quantiles | None, q: str, unit: str) -> str:
    """" (one bucket: 0-300 ms)" where another quantile of the class lies in the same
    histogram bucket as ``q``: the data cannot tell them apart, the interpolation does."""
    if qs is None or (bucket := qs.buckets.get(q)) is None \
            or list(qs.buckets.values()).count(bucket) < 2:
        return ""
    lo, hi = bucket
    if hi is None:
        return f" (one bucket: over {fmt.value(lo, unit)})"
    if lo == 0:
        return f" (one bucket: under {fmt.value(hi, unit)})"
    return f" (one bucket: {fmt.value(lo, unit)} to {fmt.value(hi, unit)})"


def _metric_rows(m: Metric, base: str, classes: list[str]) -> Iterator[list[Cell]]:
    peaks = [c for c in classes if c in m.diff]
    for q in QS:
        row = [Cell(LABELS.get(m.metric, m.metric)), Cell(q)]
        for cls in classes:
            qs = m.by_class.get(cls)
            cell = num(getattr(qs, q, None), m.unit, base + fmt.pointer("by_class", cls, q))
            note = shared_bucket(qs, q, m.unit)
            row.append(Cell(cell.text + note, cell.path, cell.value, cell.mark) if note else cell)
        for cls in peaks:
            d = getattr(m.diff[cls], q)
            row.append(num(d, m.unit, base + fmt.pointer("diff", cls, q),
                           "worse" if d is not None and d > 0 else "", signed=True))
        yield row


def _metric_header(first: str, r: Report) -> list[str]:
    peaks = [c for c in r.classes if c != r.classes[0]]
    return [first, "", *(fmt.class_name(c, r.peak_windows) for c in r.classes),
            *(f"Δ {c} - daytime" for c in peaks)]


def segments(means: dict[str, dict[str, float | None]], cls: str) -> list[float] | None:
    """A class's first token as the budget's segments, which add up to the TTFT of the
    requests the engine timed: the probes' kernel RTT (at most the part outside the
    engine), the rest of that part, queue and prefill; None where the engine timed none."""
    outside, queue, prefill = (means.get(k, {}).get(cls) for k in
                               ("network_frontend", "queue", "prefill"))
    if outside is None or queue is None or prefill is None:
        return None
    rtt = min(means.get("network", {}).get(cls) or 0.0, outside)
    return [rtt, outside - rtt, queue, prefill]


def has_budget(r: Report) -> bool:
    return any(segments(c.means, cls) is not None for c in r.carriers for cls in r.classes)


def carriers(r: Report) -> Section:
    s = Section("carriers", "Per carrier: daytime and peak",
                "P50/P95/P99 over each class of time: probe TTFT and TPOT (long-context "
                "probes excepted), path RTT, jitter and loss per burst, and the real users' "
                "smoothed RTT (the clients check); Δ is the peak window minus daytime. Packet "
                "loss is lost over sent packets in the class; real users' retransmission is "
                "segments retransmitted over segments sent to the carrier's users; the probe "
                "streams' are the kernel's counts on the probes' own connections "
                "(retransmitted over sent, out of order over received), and their kernel RTT "
                "the smoothed RTT of those connections. The budget plot stacks the first "
                "token's means, which add up: network and API server, queue and prefill "
                "(the engine's timing of the probes' requests).",
                plots=[*(["budget"] if has_budget(r) else []),
                       *(f"carrier-{i}" for i in range(len(r.carriers)))])
    for i, c in enumerate(r.carriers):
        t = Table(f"carrier {fmt.scope(c.vantage, c.carrier)}", _metric_header("metric", r))
        for j, m in enumerate(c.metrics):
            t.rows += _metric_rows(m, fmt.pointer("carriers", i, "metrics", j), r.classes)
        t.rows.append([Cell("packet loss"), Cell("all"), *(
            num(c.loss_ratio.get(cls), "ratio", fmt.pointer("carriers", i, "loss_ratio", cls))
            for cls in r.classes)])
        if c.retransmission_ratio:
            t.rows.append([Cell("real users' retransmission"), Cell("all"), *(
                num(c.retransmission_ratio.get(cls), "ratio",
                    fmt.pointer("carriers", i, "retransmission_ratio", cls))
                for cls in r.classes)])
        # Means, which add up: network and API server + queue + prefill is the TTFT of the
        # requests the engine timed.
        for name, per in c.means.items():
            t.rows.append([Cell(LABELS.get(name, name)), Cell("mean"), *(
                num(per.get(cls), "s", fmt.pointer("carriers", i, "means", name, cls))
                for cls in r.classes)])
        for attr, what in (("stream_retransmission_ratio", "probe stream retransmission"),
                           ("stream_out_of_order_ratio", "probe stream out of order")):
            ratios: dict[str, float | None] = getattr(c, attr)
            if ratios:
                t.rows.append([Cell(what), Cell("all"), *(
                    num(ratios.get(cls), "ratio", fmt.pointer("carriers", i, attr, cls))
                    for cls in r.classes)])
        s.tables.append(t)
    return s


def routes(r: Report) -> Section:
    s = Section("routes", "Route class per carrier",
                "Share of the period in each route class (by the CIDR route table); out: "
                "from this site to the carrier's target; in: from a vantage point inside the "
                "carrier's network, the way users' traffic comes in.", plots=["timeline"])
    t = Table("routes", ["carrier", "target", "direction", "classes", "changes seen",
                         "changes counted"])
    changes = Table("route changes", ["at", "carrier", "target", "direction", "from", "to"])
    for i, route in enumerate(r.routes):
        share = ", ".join(f"{k} {v:.0%}" for k, v in route.share.items())
        t.rows.append([Cell(fmt.scope(route.vantage, route.carrier)), Cell(route.target),
                       Cell(route.direction), Cell(share), Cell(str(len(route.changes))),
                       Cell(fmt.count(route.changes_counted),
                            fmt.pointer("routes", i, "changes_counted"),
                            route.changes_counted)])
        for ch in route.changes:
            changes.rows.append([Cell(fmt.when(ch.at)), Cell(route.carrier),
                                 Cell(route.target), Cell(route.direction), Cell(ch.old),
                                 Cell(ch.new, mark="worse")])
    s.tables = [t, changes] if changes.rows else [t]
    return s


def outcomes(r: Report) -> Section:
    s = Section("outcomes", "Failures and timeouts by outcome",
                "Probe requests per outcome in each class; failure is every outcome but ok, "
                "timeout the three timeout outcomes.", plots=["outcomes"])
    for i, o in enumerate(r.outcomes):
        names = sorted({k for c in o.by_class.values() if c for k in c.outcomes})
        t = Table(f"probe {fmt.scope(o.vantage, o.probe)}",
                  ["class", "requests", "failure", "timeout", *names])
        for cls in r.classes:
            c = o.by_class.get(cls)
            base = fmt.pointer("outcomes", i, "by_class", cls)
            if c is None:
                t.rows.append([Cell(fmt.class_name(cls, r.peak_windows)), Cell(fmt.DASH)])
                continue
            t.rows.append([
                Cell(fmt.class_name(cls, r.peak_windows)),
                Cell(fmt.count(c.requests), base + "/requests", c.requests),
                num(c.failure_ratio, "ratio", base + "/failure_ratio",
                    "worse" if c.failure_ratio else ""),
                num(c.timeout_ratio, "ratio", base + "/timeout_ratio",
                    "worse" if c.timeout_ratio else ""),
                *(Cell(fmt.count(c.outcomes.get(n)), base + fmt.pointer("outcomes", n),
                       c.outcomes.get(n)) if n in c.outcomes else Cell(fmt.DASH)
                  for n in names)])
        s.tables.append(t)
    return s


def queue(r: Report) -> Section:
    s = Section("queue", "Queue-time distribution",
                "Time finished requests waited in the engine queue before first being "
                "scheduled, from the engine's own histogram.", plots=["queue"])
    for i, q in enumerate(r.queue):
        t = Table(f"engine {fmt.scope(q.vantage, q.target)} model {q.model}",
                  _metric_header("metric", r))
        t.rows += _metric_rows(q.time, fmt.pointer("queue", i, "time"), r.classes)
        s.tables.append(t)
    return s


def goodput(r: Report) -> Section:
    s = Section("goodput", "Goodput against the SLO",
                f"Share of probe requests that were ok and within their TTFT and TPOT SLO "
                f"(TTFT P95 {fmt.value(r.slo.ttft_p95_seconds, 's')}, TPOT P95 "
                f"{fmt.value(r.slo.tpot_p95_seconds, 's')} unless a probe overrides them), "
                f"against the objective {fmt.value(r.slo.objective, 'ratio')}.",
                plots=["goodput"])
    t = Table("goodput", ["probe", *(fmt.class_name(c, r.peak_windows) for c in r.classes)])
    for i, g in enumerate(r.goodput):
        t.rows.append([Cell(fmt.scope(g.vantage, g.probe)), *(
            num(g.by_class.get(c), "ratio", fmt.pointer("goodput", i, "by_class", c),
                "" if g.met.get(c) is None else "good" if g.met.get(c) else "bad")
            for c in r.classes)])
    s.tables.append(t)
    return s


def long_context(r: Report) -> Section:
    s = Section("long_context", "Long-context profile TTFT",
                "Time to first token of probes with profile long_context: how long a long "
                "prompt takes to load, daytime and peak.")
    for i, lc in enumerate(r.long_context):
        t = Table(f"probe {fmt.scope(lc.vantage, lc.probe)} (carrier {lc.carrier or fmt.DASH})",
                  _metric_header("metric", r))
        t.rows += _metric_rows(lc.ttft, fmt.pointer("long_context", i, "ttft"), r.classes)
        s.tables.append(t)
    return s


def verdicts(r: Report) -> Section:
    s = Section("verdicts", "Diagnosis verdicts in the period",
                "When the exporter's decision chain named a cause (llm_diagnosis_verdict), "
                "for how long, whether LLMLatencyDiagnosis fired, and the chain's evidence at "
                "the end of each episode.")
    t = Table("episodes", ["from", "to", "duration", "verdict", "scope", "primary", "paged",
                           "summary"])
    for i, e in enumerate(r.verdicts):
        scope = " ".join(f"{k}={v}" for k, v in e.scope.items()) or "everywhere"
        t.rows.append([Cell(fmt.when(e.start)), Cell(fmt.when(e.end)),
                       Cell(fmt.duration(e.duration_s), fmt.pointer("verdicts", i,
                                                                    "duration_s"), e.duration_s),
                       Cell(f"{e.layer}/{e.cause}", mark="bad" if e.primary else "worse"),
                       Cell(scope), Cell("yes" if e.primary else "no"),
                       Cell("yes" if e.paged else "no"), Cell(e.summary or fmt.DASH)])
        s.notes += [f"{e.layer}/{e.cause} until {fmt.when(e.end)}: {line}"
                    for line in e.evidence]
    s.tables.append(t)
    return s


def checklist(r: Report) -> Section:
    s = Section("checklist", "Host and GPU checklist",
                "The field guides' checks over the whole period, per machine and GPU: "
                "nothing swapped, system memory at least twice the GPUs', the engine's "
                "tasks did not wait on the host, every PCIe link at its widest and fastest, "
                "every NVLink up and clean, no XID error. A check with nothing measured (no "
                "GPU, no engine cgroup) has no row.")
    t = Table("checks", ["machine", "gpu", "check", "expected", "measured", "result"])
    for i, c in enumerate(r.checklist):
        result = {True: Cell("ok", mark="good"), False: Cell("FAILED", mark="bad"),
                  None: Cell("no data")}[c.ok]
        t.rows.append([Cell(c.scope.get("vantage") or "this host"),
                       Cell(c.scope.get("gpu", fmt.DASH)), Cell(c.item), Cell(c.expected),
                       num(c.value, c.unit, fmt.pointer("checklist", i, "value"),
                           "bad" if c.ok is False else ""), result])
    s.tables.append(t)
    return s


def bench(r: Report) -> Section:
    assert r.bench is not None
    b = r.bench
    cfg = ", ".join(f"{k} {v}" for k, v in b.config.items()
                    if k in ("url", "model", "concurrency", "rate", "prompt_tokens",
                             "max_tokens") and v is not None)
    s = Section("bench", f"Bench run ({b.source})", cfg, plots=["bench"])
    latency = b.summary.get("latency", {})
    qs = sorted({k for d in latency.values() if d for k in d if k.startswith("p")})
    t = Table("latency", ["metric", "count", *qs])
    for key, d in latency.items():
        if d:
            t.rows.append([Cell(key.removesuffix("_s")), Cell(fmt.count(d.get("count"))), *(
                num(d.get(q), "s", fmt.pointer("bench", "summary", "latency", key, q))
                for q in qs)])
    g = b.summary.get("goodput") or {}
    t2 = Table("throughput", ["requests", "success", "req/s", "output tok/s", "goodput"])
    t2.rows.append([
        Cell(fmt.count(b.summary.get("requests"))),
        num(b.summary.get("success_ratio"), "ratio", "/bench/summary/success_ratio"),
        num(b.summary.get("request_throughput"), "req/s", "/bench/summary/request_throughput"),
        num(b.summary.get("output_token_throughput"), "tok/s",
            "/bench/summary/output_token_throughput"),
        num(g.get("ratio"), "ratio", "/bench/summary/goodput/ratio")])
    s.tables = [t, t2]
    return s


def baseline(r: Report) -> Section:
    assert r.baseline is not None
    b = r.baseline
    bad = b.regressions
    s = Section("baseline", f"Against the baseline ({b.source})",
                f"Each number against the {b.kind} baseline; a regression is worse by more "
                f"than {b.max_regression:.0%} (a duration also by more than 1 ms). "
                + (f"{len(bad)} regression(s)." if bad else "No regression."))
    rows = sorted(enumerate(b.changes), key=lambda ic: not ic[1].regression)
    t = Table("changes", ["metric", "baseline", "current", "change", ""])
    for i, c in rows:
        base = fmt.pointer("baseline", "changes", i)
        t.rows.append([Cell(c.metric), num(c.baseline, c.unit, base + "/baseline"),
                       num(c.current, c.unit, base + "/current"),
                       Cell(fmt.change(c.change), base + "/change", c.change,
                            "bad" if c.regression else ""),
                       Cell("REGRESSION" if c.regression else "",
                            mark="bad" if c.regression else "")])
    s.tables.append(t)
    return s


def sections(r: Report) -> list[Section]:
    out = [carriers(r), routes(r), outcomes(r), queue(r), goodput(r), long_context(r),
           verdicts(r)]
    if r.checklist:
        out.append(checklist(r))
    if r.bench is not None:
        out.append(bench(r))
    if r.baseline is not None:
        out.append(baseline(r))
    return out
