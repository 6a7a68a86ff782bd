"""The first token's budget on the ``/`` page, from the diagnosis JSON's ``budget``: one
stacked bar per probe (its carrier first), each part's width its share of the probe's mean
TTFT, the milliseconds in a legend under it. A remainder below zero (the parts add up to
more than the client waited) is said in words, not drawn, and the bar is then the parts'
sum, so no part is cut off."""

from __future__ import annotations

from typing import Any

from exporter.diagnosis.causes import BudgetPart
from exporter.runtime.page.fmt import esc as _e
from exporter.runtime.page.fmt import seconds as _s

#: One colour per part, in the order a request meets them.
COLOURS = dict(zip(BudgetPart, ("#0969da", "#8250df", "#bf8700", "#1b7c83", "#cf222e",
                                "#8c959f"), strict=True))
STYLE = (".budget{display:flex;height:14px;border-radius:3px;overflow:hidden;"
         "background:var(--bg);margin:.2rem 0}.budget span{display:block;height:100%}"
         ".legend{font-size:.8rem;color:var(--muted);margin:0 0 .5rem}"
         ".legend i{display:inline-block;width:.7em;height:.7em;margin:0 .25em 0 .6em}"
         + "".join(f".p-{p}{{background:{c}}}" for p, c in COLOURS.items()))


def _bar(row: dict[str, Any]) -> str:
    ttft = float(row.get("ttft") or 0.0)
    parts: dict[str, Any] = row.get("parts") or {}
    whole = max(ttft, sum(v for v in parts.values() if v is not None and v > 0))
    spans, legend = [], []
    for p in BudgetPart:
        value = parts.get(p)
        if value is None:
            continue
        legend.append(f'<i class="p-{p}"></i>{p} {_e(_s(value))}')
        if value > 0 and whole > 0:
            spans.append(f'<span class="p-{p}" data-part="{p}" title="{p} {_e(_s(value))}" '
                         f'style="width:{100 * value / whole:.2f}%"></span>')
    over = parts.get(BudgetPart.REMAINDER)
    note = (f" (the parts add up to {_e(_s(-over))} more than the client waited)"
            if over is not None and over < 0 else "")
    who = " · ".join(_e(x) for x in (row.get("carrier"), row.get("probe")) if x)
    return (f'<div data-probe="{_e(row.get("probe"))}"><p class="sub">{who}: TTFT '
            f'{_e(_s(ttft))} mean{note}</p><div class="budget">{"".join(spans)}</div>'
            f'<p class="legend">{"".join(legend)}</p></div>')


def html(rows: list[dict[str, Any]]) -> str:
    """The budget block, "" with no probe's TTFT measured yet."""
    if not rows:
        return ""
    ordered = sorted(rows, key=lambda r: (str(r.get("carrier") or "~"), str(r.get("probe"))))
    return ('<h3>First token by part</h3><div id="budget">'
            + "".join(_bar(r) for r in ordered) + "</div>")
