"""report.html: one self-contained file (styles inline, plots as data: URIs, no script, no
external request), readable offline and printable."""

from __future__ import annotations

from html import escape

from exporter import __version__
from exporter.report import fmt
from exporter.report.model import Report
from exporter.report.tables import Cell, Section, Table

CSS = """
:root{--fg:#1d2430;--muted:#5f6b7a;--line:#dde2e8;--bg:#f6f7f9;--card:#fff;
--worse:#b35c00;--bad:#b42318;--good:#1e7b4a;--accent:#2f6db5}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
color:var(--fg);background:var(--bg)}
header{background:#1d2430;color:#fff;padding:20px 28px}
header h1{margin:0 0 4px;font-size:20px;font-weight:600}
header p{margin:2px 0;color:#c9d1dc}
.meta{display:flex;flex-wrap:wrap;gap:8px;margin-top:10px}
.meta span{background:#2c3645;border-radius:4px;padding:3px 8px;font-size:12px}
nav{padding:8px 28px;background:#fff;border-bottom:1px solid var(--line);font-size:13px}
nav a{color:var(--accent);margin-right:14px;text-decoration:none}
main{max-width:1200px;margin:0 auto;padding:8px 20px 40px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;
margin:18px 0;padding:14px 18px}
h2{font-size:16px;margin:0 0 4px}
.intro{color:var(--muted);margin:0 0 10px;font-size:13px}
figure{margin:8px 0;overflow-x:auto}
figure img{max-width:100%;height:auto;display:block}
table{border-collapse:collapse;margin:10px 0;font-size:13px;width:100%}
caption{text-align:left;font-weight:600;padding:4px 0}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left}
th{white-space:nowrap}
th.num{text-align:right}
th{color:var(--muted);font-weight:500;font-size:12px}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.worse{color:var(--worse)} .bad{color:var(--bad);font-weight:600} .good{color:var(--good)}
.empty{color:var(--muted);font-style:italic}
.wrap{overflow-x:auto}
ul.notes{font-size:12px;color:var(--muted);font-family:ui-monospace,monospace}
footer{color:var(--muted);font-size:12px;text-align:center;padding:10px}
@media (max-width:700px){header,nav{padding-left:12px;padding-right:12px}
main{padding:4px 8px}section{padding:10px}}
"""


def _cell(c: Cell, tag: str = "td") -> str:
    classes = " ".join(x for x in ("num" if c.path else "", c.mark) if x)
    attrs = f' class="{classes}"' if classes else ""
    if c.path is not None:
        attrs += f' data-path="{escape(c.path)}"'
        if c.value is not None:
            attrs += f' data-value="{c.value!r}"'
    return f"<{tag}{attrs}>{escape(c.text)}</{tag}>"


def _table(t: Table) -> str:
    first = t.rows[0] if t.rows else []
    head = "".join(f'<th class="num">{escape(h)}</th>' if i < len(first) and first[i].path
                   else f"<th>{escape(h)}</th>" for i, h in enumerate(t.header))
    rows = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in t.rows)
    return (f'<div class="wrap"><table><caption>{escape(t.title)}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>")


def _section(s: Section, plots: dict[str, str]) -> str:
    parts = [f'<section id="{s.key}"><h2>{escape(s.title)}</h2>',
             f'<p class="intro">{escape(s.intro)}</p>']
    for key in s.plots:
        if key in plots:
            parts.append(f'<figure><img src="{plots[key]}" alt="{escape(s.title)}: {key}" '
                         f'data-plot="{key}"></figure>')
    if not any(t.rows for t in s.tables):
        parts.append('<p class="empty">No data in the period.</p>')
    parts += [_table(t) for t in s.tables if t.rows]
    if s.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in s.notes)
                     + "</ul>")
    return "".join(parts) + "</section>"


def render(r: Report, sections: list[Section], plots: dict[str, str]) -> str:
    spans = " · ".join(f"{fmt.class_name(c, r.peak_windows)} {fmt.duration(s)}"
                       for c, s in r.class_seconds.items())
    meta = [f"Prometheus {r.prometheus}", f"peak windows in {r.timezone}", spans,
            f"SLO TTFT P95 {fmt.value(r.slo.ttft_p95_seconds, 's')}",
            f"TPOT P95 {fmt.value(r.slo.tpot_p95_seconds, 's')}",
            f"goodput objective {fmt.value(r.slo.objective, 'ratio')}"]
    if r.baseline is not None:
        n = len(r.baseline.regressions)
        meta.append(f"{n} regression(s) against {r.baseline.source}" if n else
                    f"no regression against {r.baseline.source}")
    nav = "".join(f'<a href="#{s.key}">{escape(s.title)}</a>' for s in sections)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>LLM latency acceptance report {fmt.when(r.start)}</title>"
        f"<style>{CSS}</style></head><body>"
        "<header><h1>LLM latency acceptance report</h1>"
        f"<p>{escape(fmt.when(r.start))} → {escape(fmt.when(r.end))}</p>"
        '<div class="meta">' + "".join(f"<span>{escape(m)}</span>" for m in meta) + "</div>"
        f"</header><nav>{nav}</nav><main>"
        + "".join(_section(s, plots) for s in sections)
        + f"</main><footer>llm-latency-exporter {escape(__version__)} report, generated "
        f"{escape(fmt.when(r.generated_at))}; the numbers are in report.json</footer>"
        "</body></html>\n"
    )
