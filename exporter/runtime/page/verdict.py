"""The verdict at the top of the ``/`` page, from the diagnosis JSON (``Diagnosis.to_json``,
the same document /api/v1/diagnosis serves): status, the primary verdict's summary, its
evidence table and actions, the secondary verdicts, what was ruled out, and each probe's
first token by part; "healthy" when
the chain found nothing; a candidate verdict not yet confirmed in one line under the status."""

from __future__ import annotations

from typing import Any

from exporter.diagnosis.result import StepResult
from exporter.runtime.page import budget
from exporter.runtime.page.fmt import esc as _e
from exporter.runtime.page.fmt import number as _num

EVIDENCE = ("metric", "labels", "value", "threshold", "baseline", "window")


def _evidence(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    body = "".join(
        "<tr>" + "".join(f'<td data-label="{h}">{c}</td>' for h, c in zip(EVIDENCE, (
            _e(r.get("metric")),
            _e(", ".join(f"{k}={v}" for k, v in (r.get("labels") or {}).items())),
            _num(r.get("value")), _num(r.get("threshold")), _num(r.get("baseline")),
            _e(r.get("window")),
        ), strict=True)) + "</tr>"
        for r in rows
    )
    head = "".join(f"<th>{h}</th>" for h in EVIDENCE)
    return f'<table class="evidence"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _scope(scope: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in scope.items())


def _pending(p: dict[str, Any] | None) -> str:
    """The candidate the hold has not confirmed yet (``stability.py``), in one line."""
    if not p:
        return ""
    v = p.get("verdict")
    what = f"{v.get('layer')} / {v.get('cause')}" if v else str(p.get("status"))
    return (f'<p class="pending">Not yet confirmed: {_e(what)}, {_e(p.get("evaluations"))} of '
            f'{_e(p.get("confirm"))} evaluations in a row since {_e(p.get("since"))}</p>')


def verdict_html(doc: dict[str, Any] | None) -> str:
    """The inside of ``<section id="diagnosis">`` for one diagnosis JSON (None: not yet)."""
    if doc is None or not doc.get("at"):
        return '<h2 class="unknown">Diagnosis: waiting for the first evaluation</h2>'
    status = str(doc.get("status", "unknown"))
    parts = [
        f'<h2 class="{_e(status)}">Diagnosis: {_e(status)}</h2>',
        f"<p>{_e(doc.get('source'))} windows of {_e(doc.get('window'))}, at {_e(doc.get('at'))}"
        "</p>",
        _pending(doc.get("pending")),
    ]
    verdicts = doc.get("verdicts") or []
    if not verdicts:
        parts.append("<p>healthy: no verdict</p>" if status == "healthy" else
                     "<p>No verdict.</p>")
    else:
        v = verdicts[0]
        parts.append(
            f'<h3 id="verdict" data-layer="{_e(v.get("layer"))}" data-cause="{_e(v.get("cause"))}">'
            f"{_e(v.get('layer'))} / {_e(v.get('cause'))}: {_e(v.get('summary'))}</h3>"
            f"<p>{_e(_scope(v.get('scope') or {}))}</p>"
            + _evidence(v.get("evidence") or [])
        )
        if v.get("actions"):
            parts.append("<ul>" + "".join(f"<li>{_e(a)}</li>" for a in v["actions"]) + "</ul>")
        if len(verdicts) > 1:
            parts.append("<h3>Also</h3><ul>" + "".join(
                f"<li>{_e(s.get('layer'))} / {_e(s.get('cause'))}: {_e(s.get('summary'))}</li>"
                for s in verdicts[1:]
            ) + "</ul>")
    cleared = [s for s in doc.get("steps") or [] if s.get("result") == StepResult.RULED_OUT]
    if cleared:
        parts.append("<h3>Ruled out</h3><ul>" + "".join(
            f"<li>{_e(s.get('step'))}"
            # One name per metric: the evidence holds a row per carrier or target.
            + (": " + _e(", ".join(dict.fromkeys(
                str(e.get("metric")) for e in s.get("evidence") or [])))
               if s.get("evidence") else "")
            + "</li>"
            for s in cleared
        ) + "</ul>")
    for result, what in ((StepResult.NO_DATA, "No data for"),
                         (StepResult.NOT_CONFIGURED, "Not configured")):
        steps = [str(s.get("step")) for s in doc.get("steps") or [] if s.get("result") == result]
        if steps:
            parts.append(f"<p>{what}: {_e(', '.join(steps))}</p>")
    parts.append(budget.html(doc.get("budget") or []))
    return "".join(parts)


def section(doc: dict[str, Any] | None) -> str:
    """The verdict section, its border in the status's colour."""
    status = str(doc.get("status", "unknown")) if doc and doc.get("at") else "unknown"
    at = _e(doc.get("at")) if doc else ""
    return (f'<section id="diagnosis" class="s-{_e(status)}" data-at="{at}">'
            f"{verdict_html(doc)}</section>")
