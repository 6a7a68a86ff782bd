"""report.md: the same sections and tables as the HTML, without the plots, for pasting
into a ticket or a wiki."""

from __future__ import annotations

from exporter.report import fmt
from exporter.report.model import Report
from exporter.report.tables import Section, Table


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


def _table(t: Table) -> list[str]:
    mark = {"bad": "**", "worse": "", "good": ""}
    lines = [f"**{_esc(t.title)}**", "",
             "| " + " | ".join(_esc(h) for h in t.header) + " |",
             "|" + "|".join("---" for _ in t.header) + "|"]
    for row in t.rows:
        cells = [mark.get(c.mark, "") + _esc(c.text) + mark.get(c.mark, "") if c.text else ""
                 for c in row]
        cells += [""] * (len(t.header) - len(cells))
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _section(s: Section) -> list[str]:
    lines = [f"## {s.title}", "", s.intro, ""]
    if not any(t.rows for t in s.tables):
        lines += ["_No data in the period._", ""]
    for t in s.tables:
        if t.rows:
            lines += _table(t)
    lines += [f"- `{n}`" for n in s.notes]
    return [*lines, ""] if s.notes else lines


def render(r: Report, sections: list[Section]) -> str:
    spans = ", ".join(f"{fmt.class_name(c, r.peak_windows)} {fmt.duration(s)}"
                      for c, s in r.class_seconds.items())
    lines = [
        "# LLM latency acceptance report", "",
        f"{fmt.when(r.start)} → {fmt.when(r.end)}; peak windows in {r.timezone}: {spans}. "
        f"SLO: TTFT P95 {fmt.value(r.slo.ttft_p95_seconds, 's')}, TPOT P95 "
        f"{fmt.value(r.slo.tpot_p95_seconds, 's')}, goodput objective "
        f"{fmt.value(r.slo.objective, 'ratio')}. Source: {r.prometheus}.", "",
    ]
    for s in sections:
        lines += _section(s)
    return "\n".join(lines).rstrip() + "\n"
