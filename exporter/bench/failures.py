"""What went wrong, per failed outcome: the count and the first request's detail (for an
HTTP error, its status and the server's own message), so a run that failed says why without
opening the ``--json`` file.

The server's message is the only response text bench ever prints: taken from the JSON error
shapes OpenAI-compatible servers send, made one printable line, and cut to a bound, so a
misbehaving proxy's HTML page or a multi-megabyte body never lands on the terminal.
"""

from __future__ import annotations

import json
from typing import Any

from exporter import redact
from exporter.metrics import ProbeOutcome

#: How much of an error body the client keeps: every error JSON we know fits in it.
ERROR_BODY_BYTES = 4096
#: How much of the server's message a detail line shows.
MESSAGE_MAX = 160


def _one_line(text: str) -> str:
    # Control characters (an escape sequence from a hostile body) become spaces.
    cleaned = "".join(c if c.isprintable() else " " for c in text)
    line = " ".join(cleaned.split())
    return line if len(line) <= MESSAGE_MAX else line[: MESSAGE_MAX - 3] + "..."


def server_message(body: bytes) -> str:
    """The message of an error body: OpenAI/vLLM ``{"error": {"message": ...}}``, older
    vLLM ``{"object": "error", "message": ...}``, FastAPI ``{"detail": ...}``, or
    ``{"error": "..."}``; a body that is none of these, as bounded text."""
    text = body.decode("utf-8", errors="replace")
    try:
        obj: Any = json.loads(text)
    except ValueError:
        return _one_line(text)
    if isinstance(obj, dict):
        err = obj.get("error")
        for candidate in (
            err.get("message") if isinstance(err, dict) else err,
            obj.get("message"),
            obj.get("detail"),
        ):
            if isinstance(candidate, str) and candidate.strip():
                return _one_line(candidate)
            if isinstance(candidate, list) and candidate:  # FastAPI validation errors
                return _one_line(json.dumps(candidate[0]))
    return _one_line(text)


def record_detail(detail: str, error_body: bytes | None) -> str:
    """A request's detail with the server's message appended when it sent one."""
    message = server_message(error_body) if error_body else ""
    return redact.text(f"{detail}: {message}" if message else detail)


def failures(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per failed outcome (in the order of ProbeOutcome): its count and the first failed
    request's status and detail (records are in request order)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["outcome"] == ProbeOutcome.OK.value:
            continue
        entry = out.setdefault(
            r["outcome"],
            {"count": 0, "first_id": r.get("id"), "status": r.get("status"),
             "detail": r.get("detail") or ""},
        )
        entry["count"] += 1
    order = [o.value for o in ProbeOutcome]
    return {k: out[k] for k in sorted(out, key=order.index)}


def failure_lines(summary_failures: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for outcome, f in summary_failures.items():
        detail = f["detail"] or "no detail"
        first = "" if f["first_id"] is None else f" (request {f['first_id']})"
        lines.append(f"{'failed':<14}{outcome} {f['count']}, first{first}: {detail}")
    return lines
