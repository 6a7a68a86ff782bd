"""What one probe or bench request is and what came of it: the endpoint URL, the request
body and headers, the timeouts, and the result the client hands back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from exporter import __version__
from exporter.metrics import ProbeOutcome
from exporter.probing.stream import StreamResult
from exporter.probing.tcpinfo import TcpDelta

Api = Literal["chat", "completions"]
Connection = Literal["new", "reused"]

API_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def endpoint_url(url: str, api: Api) -> str:
    """The full endpoint URL: a base URL (``http://host:8000`` or ``.../v1``) gets the API's
    standard path; a URL with any other path is used as given."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if path in ("", "/v1"):
        return urlunsplit(parts._replace(path=API_PATHS[api]))
    return url


def target_of(url: str) -> str:
    """``host:port`` of a URL, the ``target`` label (no scheme, path or credentials)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Timeouts:
    connect: float
    first_token: float
    total: float


@dataclass(frozen=True)
class RequestSpec:
    url: str
    api: Api
    model: str
    prompt: str
    max_tokens: int
    api_key: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = ()
    extra_body: tuple[tuple[str, Any], ...] = ()

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "stream": True,
            # The usage chunk gives the real token count; chunks are not tokens.
            "stream_options": {"include_usage": True},
        }
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": self.prompt}]
        else:
            body["prompt"] = self.prompt
        body.update(self.extra_body)
        return body

    def request_headers(self) -> dict[str, str]:
        headers = {
            "Accept": "text/event-stream",
            # A compressing proxy buffers the stream into clumps; ask for none.
            "Accept-Encoding": "identity",
            "User-Agent": f"llm-latency-exporter/{__version__}",
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.headers)
        return headers


@dataclass
class RequestResult:
    outcome: ProbeOutcome
    #: Monotonic time the request was handed to the client (before any connection work).
    issued_at: float
    #: Monotonic time the connection was ready and the request about to be written: the
    #: origin of TTFT/E2E. None if no connection was obtained.
    started_at: float | None
    stream: StreamResult | None
    phases: dict[str, float]
    connection: Connection | None
    status: int | None
    #: Short, safe description of a failure (never a body, prompt or header).
    detail: str = ""
    #: Seconds a 429 or 503 asked the client to wait (its Retry-After), else None.
    retry_after: float | None = None
    #: The first bytes of a non-2xx response body, only for a client built with
    #: ``error_body_bytes`` (bench shows the server's message; probes never keep it).
    error_body: bytes | None = None
    #: What the kernel's TCP_INFO of the connection saw during the request: from the end
    #: of the previous request on a reused connection, from the handshake on a new one, to
    #: the end of the body. None without a response, or off Linux.
    tcp: TcpDelta | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is ProbeOutcome.OK
