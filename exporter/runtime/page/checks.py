"""The checks table: what runs, how often, how its last run went and how long ago.

Intervals and timeouts are written as the config writes durations; the outcome is coloured
(``o-<outcome>``); on a narrow screen each row stacks into a card (the CSS reads each cell's
``data-label``), so the table never makes a phone scroll sideways.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.checks.base import Check
from exporter.runtime.page import fmt
from exporter.runtime.page.fmt import esc
from exporter.runtime.scheduler import CheckState

PENDING = "pending"
HEADERS = ("check", "target", "interval", "timeout", "last outcome", "last run", "duration",
           "runs", "last error")


def _cells(check: Check, st: CheckState | None, now: float) -> list[tuple[str, str]]:
    ran = st is not None and st.runs > 0
    outcome = st.last_outcome if st is not None and ran else PENDING
    return [
        (esc(check.name), ""),
        (esc(check.describe()), "target"),
        (esc(fmt.duration(check.interval)), ""),
        (esc(fmt.duration(check.timeout)), ""),
        (f'<span class="o o-{esc(outcome)}">{esc(outcome)}</span>', ""),
        (esc(fmt.age(now - st.last_run_at)) if st is not None and ran else "", ""),
        (esc(fmt.seconds(st.last_duration)) if st is not None and ran else "", ""),
        (esc(st.runs if st is not None else 0), ""),
        (esc(st.last_error if st is not None else ""), "error"),
    ]


def table(checks: Sequence[tuple[Check, CheckState | None]], now: float) -> str:
    if not checks:
        return "<p>No checks are configured.</p>"
    head = "".join(f"<th>{esc(h)}</th>" for h in HEADERS)
    body = "".join(
        '<tr data-check="' + esc(check.name) + '">' + "".join(
            f'<td data-label="{esc(h)}"{f" class={c!r}" if c else ""}>{v}</td>'
            for h, (v, c) in zip(HEADERS, _cells(check, st, now), strict=True)
        ) + "</tr>"
        for check, st in checks
    )
    return f'<table class="checks"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
