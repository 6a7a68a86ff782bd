"""The first token's and the stream's budget on the ``/`` page, from the diagnosis JSON's
``budget``: per probe (its carrier first) one stacked bar of its mean TTFT by part and one of
its mean time per output token (the engine's time per token, the delivery after it), each
part's width its share, the milliseconds in a legend under it. A last part below zero (the
parts add up to more than the client waited) is said in words, not drawn, and the bar is
then the parts' sum, so no part is cut off."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from exporter.diagnosis.parts import BudgetPart, StreamPart
from exporter.runtime.page.fmt import esc as _e
from exporter.runtime.page.fmt import seconds as _s

#: One colour per part, in the order a request meets them; the stream's engine part is the
#: first token's prefill colour (both are the engine computing), its delivery the network's.
COLOURS: dict[StrEnum, str] = {
    **dict(zip(BudgetPart, ("#0969da", "#8250df", "#bf8700", "#1b7c83", "#cf222e",
                            "#8c959f"), strict=True)),
    StreamPart.ENGINE: "#cf222e", StreamPart.DELIVERY: "#0969da"}
STYLE = (".budget{display:flex;height:14px;border-radius:3px;overflow:hidden;"
         "background:var(--bg);margin:.2rem 0}.budget span{display:block;height:100%}"
         ".legend{font-size:.8rem;color:var(--muted);margin:0 0 .5rem}"
         ".legend i{display:inline-block;width:.7em;height:.7em;margin:0 .25em 0 .6em}"
         + "".join(f".p-{p}{{background:{c}}}" for p, c in COLOURS.items()))


def _stacked(what: str, total: float, parts: dict[str, Any], order: type[StrEnum],
             last: StrEnum) -> str:
    """One bar of ``total`` split into ``parts`` in ``order``; ``last`` is the part that
    may fall below zero."""
    whole = max(total, sum(v for v in parts.values() if v is not None and v > 0))
    spans, legend = [], []
    for p in order:
        value = parts.get(p)
        if value is None:
            continue
        legend.append(f'<i class="p-{p}"></i>{p} {_e(_s(value))}')
        if value > 0 and whole > 0:
            spans.append(f'<span class="p-{p}" data-part="{p}" title="{p} {_e(_s(value))}" '
                         f'style="width:{100 * value / whole:.2f}%"></span>')
    # Said where it shows: a hundredth of the whole is the bar's own resolution.
    over = parts.get(last)
    note = (f" (the parts add up to {_e(_s(-over))} more than the client waited)"
            if over is not None and over < -0.01 * whole else "")
    return (f'<p class="sub">{what} {_e(_s(total))} mean{note}</p><div class="budget" '
            f'data-bar="{order.__name__}">{"".join(spans)}</div>'
            f'<p class="legend">{"".join(legend)}</p>')


def _bar(row: dict[str, Any]) -> str:
    who = " · ".join(_e(x) for x in (row.get("carrier"), row.get("probe")) if x)
    out = _stacked(f"{who}: TTFT", float(row.get("ttft") or 0.0), row.get("parts") or {},
                   BudgetPart, BudgetPart.REMAINDER)
    if row.get("tpot") is not None and row.get("stream"):
        out += _stacked("per output token", float(row["tpot"]), row["stream"], StreamPart,
                        StreamPart.DELIVERY)
    return f'<div data-probe="{_e(row.get("probe"))}">{out}</div>'


def html(rows: list[dict[str, Any]]) -> str:
    """The budget block, "" with no probe's TTFT measured yet."""
    if not rows:
        return ""
    ordered = sorted(rows, key=lambda r: (str(r.get("carrier") or "~"), str(r.get("probe"))))
    return ('<h3>First token and stream by part</h3><div id="budget">'
            + "".join(_bar(r) for r in ordered) + "</div>")
