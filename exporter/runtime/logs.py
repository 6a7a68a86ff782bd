"""logfmt (default) or JSON log lines on stderr.

Checks log state changes, not runs, never a prompt or a body; every value passes through
:mod:`exporter.redact` on its way out, so no configured secret or URL credential is written.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from exporter import redact

# Attributes every LogRecord has; anything else came in through ``extra=`` and is a field.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    for key, value in record.__dict__.items():
        if key not in _STANDARD and not key.startswith("_"):
            out[key] = value
    if record.exc_info and record.exc_info[1] is not None:
        out["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
    return {k: redact.text(v) if isinstance(v, str) else v for k, v in out.items()}


def _logfmt_value(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\\') or any(ord(c) < 32 for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(record), default=str, ensure_ascii=False)


def setup_logging(fmt: str = "logfmt", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log is one line per scrape: noise, not state changes.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class Throttle:
    """At most ``burst`` lines per ``per`` seconds for one kind of event (anyone on the
    network can cause as many bad requests as they like); the next line allowed says how
    many were left out."""

    def __init__(self, burst: int = 5, per: float = 60.0) -> None:
        self.burst, self.per = burst, per
        self._window = -per
        self._lines = 0
        self._dropped = 0

    def allow(self) -> dict[str, int] | None:
        """None to drop this line, else the ``extra`` fields to log it with."""
        now = time.monotonic()
        if now - self._window >= self.per:
            self._window, self._lines = now, 0
        if self._lines >= self.burst:
            self._dropped += 1
            return None
        self._lines += 1
        extra = {"suppressed": self._dropped} if self._dropped else {}
        self._dropped = 0
        return extra
