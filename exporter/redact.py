"""The one boundary secrets do not cross: every log line, every check error shown on `/`,
every config message passes through here first.

Configured secret values are remembered when their reference is resolved, so a server that
echoes an Authorization header back into an error is caught too; URL user-info and
query-string values are redacted wherever a URL is shown.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"
#: Shorter values are too likely to occur by chance (and are not credentials anyway).
_MIN_SECRET = 4
_secrets: set[str] = set()
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+")


def remember(values: Iterable[str]) -> None:
    """Values to redact from now on (the process's configured secrets)."""
    _secrets.update(v for v in values if len(v) >= _MIN_SECRET)


def remember_url(value: str) -> None:
    """A configured URL's credentials, to redact from now on wherever they turn up (a server
    echoing its query string or Authorization header into an error): the user-info password
    and its Basic-auth form (what the HTTP client sends), and every query value, raw and
    decoded."""
    try:
        parts = urlsplit(value)
        user, password = parts.username, parts.password
    except ValueError:
        return
    found: list[str] = []
    if password:
        pair = f"{unquote(user or '')}:{unquote(password)}"
        found += [password, unquote(password), base64.b64encode(pair.encode("latin-1",
                                                                          "replace")).decode()]
    for raw in parts.query.split("&"):
        _, _, val = raw.partition("=")
        found += [val, unquote(val.replace("+", " "))]
    remember(found)


def url(value: str) -> str:
    """``value`` without user:password, and with every query value replaced."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return REDACTED  # unparseable: it may be anything, show none of it
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    if parts.username is None and parts.password is None:
        netloc = parts.netloc
    query = urlencode([(k, REDACTED) for k, _ in parse_qsl(parts.query, keep_blank_values=True)],
                      safe="<>")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def secrets(value: str) -> str:
    """``value`` with remembered secrets redacted and nothing else changed: cheap on a large
    body (one C-level search per secret), for server-supplied data such as an engine
    exposition whose label values could echo a token."""
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in value:
            value = value.replace(secret, REDACTED)
    return value


def text(value: str) -> str:
    """Free text with remembered secrets and URL credentials redacted."""
    return _URL.sub(lambda m: url(m.group(0)), secrets(value))
