"""The diagnosis as text for the CLI: a short incident note. The verdict sentence first (what
a pager shows), then the evidence table, what was ruled out, and the next actions."""

from __future__ import annotations

from collections.abc import Iterable

from exporter.diagnosis.parts import BudgetPart, StreamPart
from exporter.diagnosis.result import Budget, Diagnosis, Evidence, StepResult, Verdict


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0 or 0.001 <= abs(value) < 100000:
        return f"{value:.4g}"
    return f"{value:.3g}"


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items()) or "-"


def _value(e: Evidence) -> str:
    """The value, and for a histogram quantile the bucket bounds it lies between (it is
    interpolated inside them: "0.4 in (0.25, 0.5]")."""
    if e.bucket is None:
        return _num(e.value)
    return f"{_num(e.value)} in ({_num(e.bucket[0])}, {_num(e.bucket[1])}]"


def table(evidence: Iterable[Evidence], indent: str = "    ") -> list[str]:
    """Evidence as aligned columns: metric, labels, value, threshold, baseline."""
    rows = [("metric", "labels", "value", "threshold", "baseline")]
    rows += [(e.metric, _labels(dict(e.labels)), _value(e), _num(e.threshold),
              _num(e.baseline)) for e in evidence]
    if len(rows) == 1:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


def budget(rows: Iterable[Budget]) -> list[str]:
    """Each probe's mean first token by part, then its mean time per output token by part,
    in milliseconds: one column per part."""
    out = [("probe", "carrier", "ttft", *(str(p) for p in BudgetPart),
            "tpot", *(f"tpot {p}" for p in StreamPart))]
    out += [(b.probe, b.carrier or "-", _ms(b.ttft), *(_ms(b.parts.get(p)) for p in BudgetPart),
             _ms(b.tpot, 1), *(_ms(b.stream.get(p), 1) for p in StreamPart)) for b in rows]
    if len(out) == 1:
        return []
    widths = [max(len(r[i]) for r in out) for i in range(len(out[0]))]
    return ["  " + "  ".join(c.rjust(w) if i > 1 else c.ljust(w)
                             for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
            for r in out]


def _ms(seconds: float | None, digits: int = 0) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.{digits}f}"


def _scope(v: Verdict) -> str:
    return " ".join(f"{k}={val}" for k, val in v.scope.items()) or "everywhere"


def render(d: Diagnosis) -> str:
    at = d.at.isoformat(timespec="seconds")
    head = f"Diagnosis at {at} over {d.window} ({d.source}): {d.status.upper()}"
    lines = [head, ""]
    if d.pending is not None:
        p = d.pending
        what = f"{p.verdict.layer}/{p.verdict.cause}" if p.verdict else p.status
        lines += [f"Not yet confirmed: {what}, {p.evaluations} of {p.confirm} evaluations in a "
                  f"row since {p.since.isoformat(timespec='seconds')}", ""]
    if not d.verdicts:
        if d.status == "unknown":
            lines.append("No data: no check gave the chain enough to judge in this window.")
            lines.append("Make sure probes, engine, path and GPU checks are running "
                         "(/-/ready, llm_exporter_check_runs_total).")
        else:
            lines.append("Healthy: every probe meets its SLO and nothing is drifting "
                         "from its off-peak baseline.")
    for i, v in enumerate(d.verdicts):
        rank = "Primary" if i == 0 else "Also"
        lines.append(f"{rank}: {v.layer}/{v.cause} ({_scope(v)}), confidence "
                     f"{v.confidence:.2f}")
        lines.append(f"  {v.summary}")
        if v.symptoms:
            lines.append(f"  Symptoms: {', '.join(v.symptoms)}")
        rows = table(v.evidence)
        if rows:
            lines += ["  Evidence:", *rows]
        if v.actions:
            lines.append("  Next:")
            lines += [f"    - {a}" for a in v.actions]
        lines.append("")
    cleared = [s for s in d.steps if s.result is StepResult.RULED_OUT]
    if cleared:
        lines.append("Ruled out:")
        for s in cleared:
            lines.append(f"  {s.step}")
            lines += table(s.evidence[:8])
        lines.append("")
    rows = budget(d.budget)
    if rows:
        lines += ["First token, mean ms by part (- not measured: in the remainder):", *rows, ""]
    for result, what in ((StepResult.NO_DATA, "No data for"),
                         (StepResult.NOT_CONFIGURED, "Not configured")):
        steps = [s.step for s in d.steps if s.result is result]
        if steps:
            lines.append(f"{what}: {', '.join(steps)}")
    return "\n".join(lines).rstrip() + "\n"
