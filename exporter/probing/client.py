"""The one request path of probes and bench: build the request, send it with connection
tracing, feed the stream reader, classify the outcome.

Clock: every stamp is ``time.monotonic()`` (CLOCK_MONOTONIC on Linux, the event loop's clock
too, system-wide so another process can compare). Body bytes are stamped as they come off
the socket (see ``_Arrivals``), not when the reading task gets round to them, and handed to
the stream reader with those stamps. TTFT, TTFC and E2E run from the moment the
connection is ready and the request is about to be written; what came before (waiting for a
pooled connection, DNS, TCP connect, TLS) is reported as phases, so a new connection never
reads as a slow first token. Timeouts, by contrast, all count from when the request was
issued, as a user would count them: ``connect`` bounds getting a connection, ``first_token``
the wait for the first token, ``total`` the whole request.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from exporter import __version__
from exporter.probing.stream import Outcome, StreamReader, StreamResult

Api = Literal["chat", "completions"]
Connection = Literal["new", "reused"]

API_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
#: After [DONE], how long to wait for the end of the HTTP body so the connection can be
#: reused; a server that keeps the stream open longer just loses the connection.
DRAIN_GRACE = 0.5
#: aiohttp's default 64 KiB read buffer stalls fast streams under load (sglang raised it to
#: 10 MiB for the same reason); reads are bounded by max_response_bytes anyway.
READ_BUFSIZE = 1 << 20
_DETAIL_MAX = 200


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
    outcome: Outcome
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

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


@dataclass
class _Tracker:
    """Per-request trace state, filled by aiohttp trace callbacks and the TLS hook."""

    issued: float
    timeouts: Timeouts
    loop_deadline: asyncio.Timeout | None = None
    stage: Outcome = Outcome.TIMEOUT_CONNECT
    queued: tuple[float, float] | None = None
    queued_start: float | None = None
    dns_start: float | None = None
    dns_end: float | None = None
    create_start: float | None = None
    tls_start: float | None = None
    ready: float | None = None
    connection: Connection | None = None
    sent: float | None = None
    headers_at: float | None = None

    def deadline(self) -> tuple[float, Outcome]:
        """The current deadline and the outcome if it passes; the tightest limit wins."""
        t = self.timeouts
        limits = [(t.total, Outcome.TIMEOUT_TOTAL)]
        if self.stage in (Outcome.TIMEOUT_CONNECT, Outcome.TIMEOUT_FIRST_TOKEN):
            limits.append((t.first_token, Outcome.TIMEOUT_FIRST_TOKEN))
        if self.stage is Outcome.TIMEOUT_CONNECT:
            limits.append((t.connect, Outcome.TIMEOUT_CONNECT))
        limit, outcome = min(limits, key=lambda x: x[0])
        return self.issued + limit, outcome

    def advance(self, stage: Outcome) -> None:
        self.stage = stage
        if self.loop_deadline is not None:
            self.loop_deadline.reschedule(self.deadline()[0])

    def on_ready(self, connection: Connection) -> None:
        if self.ready is None:
            self.ready = time.monotonic()
            self.connection = connection
            self.advance(Outcome.TIMEOUT_FIRST_TOKEN)

    def phases(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.queued is not None:
            out["pool_wait"] = self.queued[1] - self.queued[0]
        if self.dns_start is not None and self.dns_end is not None:
            out["dns"] = self.dns_end - self.dns_start
        if self.connection == "new" and self.create_start is not None and self.ready:
            tcp_start = self.dns_end if self.dns_end is not None else self.create_start
            tcp_end = self.tls_start if self.tls_start is not None else self.ready
            out["connect"] = tcp_end - tcp_start
            if self.tls_start is not None:
                out["tls"] = self.ready - self.tls_start
        if self.ready is not None and self.sent is not None:
            out["request_sent"] = self.sent - self.ready
        if self.sent is not None and self.headers_at is not None:
            out["first_byte"] = self.headers_at - self.sent
        return out


# The TLS hook has no request argument; the request's task context carries its tracker
# (asyncio runs the handshake callbacks in a copy of the connecting task's context).
_CURRENT: contextvars.ContextVar[_Tracker | None] = contextvars.ContextVar(
    "llm_request_tracker", default=None
)


class _TimedSSLContext(ssl.SSLContext):
    """Notes when the TLS handshake starts: TCP is connected by then, so connect and TLS
    time separate without reaching into aiohttp's connector."""

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        tracker = _CURRENT.get()
        if tracker is not None and tracker.tls_start is None:
            tracker.tls_start = time.monotonic()
        return super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)


def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
    ctx = _TimedSSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names
    if ca_file:
        ctx.load_verify_locations(cafile=ca_file)
    else:
        ctx.load_default_certs()
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def _tracker(ctx: SimpleNamespace) -> _Tracker:
    tr = ctx.trace_request_ctx
    assert isinstance(tr, _Tracker)
    return tr


async def _on_queued_start(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    _tracker(ctx).queued_start = time.monotonic()


async def _on_queued_end(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    tr = _tracker(ctx)
    if tr.queued_start is not None:
        tr.queued = (tr.queued_start, time.monotonic())


async def _on_create_start(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    _tracker(ctx).create_start = time.monotonic()


async def _on_create_end(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    _tracker(ctx).on_ready("new")


async def _on_reuse(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    _tracker(ctx).on_ready("reused")


async def _on_dns_start(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    _tracker(ctx).dns_start = time.monotonic()


async def _on_dns_end(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    _tracker(ctx).dns_end = time.monotonic()


async def _on_sent(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    # Headers, then body chunks: the last of them is when the request was fully written.
    _tracker(ctx).sent = time.monotonic()


def _trace_config() -> aiohttp.TraceConfig:
    tc = aiohttp.TraceConfig()
    tc.on_connection_queued_start.append(_on_queued_start)
    tc.on_connection_queued_end.append(_on_queued_end)
    tc.on_connection_create_start.append(_on_create_start)
    tc.on_connection_create_end.append(_on_create_end)
    tc.on_connection_reuseconn.append(_on_reuse)
    tc.on_dns_resolvehost_start.append(_on_dns_start)
    tc.on_dns_resolvehost_end.append(_on_dns_end)
    tc.on_request_headers_sent.append(_on_sent)
    tc.on_request_chunk_sent.append(_on_sent)
    return tc


def _status_outcome(status: int) -> Outcome:
    if status == 429:
        return Outcome.RATE_LIMITED
    if 400 <= status < 500:
        return Outcome.HTTP_4XX
    if status >= 500:
        return Outcome.HTTP_5XX
    return Outcome.PROTOCOL_ERROR  # 1xx/3xx: not a stream (redirects are not followed)


def _exc_detail(exc: BaseException) -> str:
    # Only the exception class and OS error text: aiohttp messages can embed the URL.
    os_error = getattr(exc, "os_error", None)
    text = type(exc).__name__
    if isinstance(os_error, OSError) and os_error.strerror:
        text += f": {os_error.strerror}"
    return text[:_DETAIL_MAX]


class Client:
    """An aiohttp session with tracing, created on first use (it needs a running loop)."""

    def __init__(
        self,
        *,
        limit: int = 0,
        keepalive: float = 2.5,
        max_response_bytes: int = 4 * 1024 * 1024,
        ca_file: str | None = None,
    ) -> None:
        self._limit = limit
        # Below vLLM's 5 s server keep-alive, so the client never reuses a socket the server
        # is closing at that moment (a spurious reset on a healthy endpoint).
        self._keepalive = keepalive
        self._max_bytes = max_response_bytes
        self._ca_file = ca_file
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None

    async def _get_session(self, url: str) -> aiohttp.ClientSession:
        if self._session is None:
            if urlsplit(url).scheme == "https":
                # Loading CA certificates reads files: keep it off the event loop.
                self._ssl = await asyncio.to_thread(_ssl_context, self._ca_file)
            connector = aiohttp.TCPConnector(
                limit=self._limit,
                keepalive_timeout=self._keepalive,
                ssl=self._ssl if self._ssl is not None else True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trace_configs=[_trace_config()],
                # Deadlines are ours (see module docstring); aiohttp's would blur outcomes.
                timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_read=None,
                                              sock_connect=None),
                read_bufsize=READ_BUFSIZE,
                auto_decompress=True,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, spec: RequestSpec, timeouts: Timeouts) -> RequestResult:
        """Send one streaming request; never raises for what the endpoint does."""
        session = await self._get_session(spec.url)
        tr = _Tracker(issued=time.monotonic(), timeouts=timeouts)
        token = _CURRENT.set(tr)
        reader: StreamReader | None = None
        status: int | None = None
        outcome: Outcome | None = None
        detail = ""
        deadline, _ = tr.deadline()
        try:
            async with asyncio.timeout_at(deadline) as cm:
                tr.loop_deadline = cm
                async with session.post(
                    spec.url,
                    json=spec.body(),
                    headers=spec.request_headers(),
                    trace_request_ctx=tr,
                    allow_redirects=False,
                ) as resp:
                    tr.headers_at = time.monotonic()
                    status = resp.status
                    if not 200 <= status < 300:
                        outcome, detail = _status_outcome(status), f"HTTP {status}"
                    else:
                        reader = StreamReader(start=tr.ready or tr.issued)
                        outcome, detail = await self._read(resp, reader, tr)
        except TimeoutError:
            if reader is not None and reader.finished:
                outcome = None  # the stream had ended; only the drain ran late
            else:
                outcome = tr.deadline()[1]
                detail = f"no {_WAITING[outcome]} within {_limit(timeouts, outcome):g}s"
        except aiohttp.ClientConnectorError as exc:
            outcome, detail = Outcome.CONNECT_ERROR, _exc_detail(exc)
        except aiohttp.ClientResponseError as exc:
            # The response did not parse as HTTP (its text is the server's: not quoted).
            outcome, detail = Outcome.PROTOCOL_ERROR, f"malformed HTTP response ({exc.status})"
        except (aiohttp.ClientError, OSError) as exc:
            # Disconnects and resets: before a connection existed it never connected.
            outcome = Outcome.STREAM_RESET if tr.ready is not None else Outcome.CONNECT_ERROR
            detail = _exc_detail(exc)
        finally:
            _CURRENT.reset(token)
            tr.loop_deadline = None
        result = reader.close() if reader is not None else None
        if outcome is None:
            assert result is not None
            outcome = result.outcome
            detail = _stream_detail(result)
        elif outcome is Outcome.STREAM_RESET and result is not None and result.outcome in (
            Outcome.STREAM_ERROR,
            Outcome.PROTOCOL_ERROR,
        ):
            # An error event or garbage, then the server hung up: the earlier cause is news.
            outcome, detail = result.outcome, _stream_detail(result)
        return RequestResult(
            outcome=outcome,
            issued_at=tr.issued,
            started_at=tr.ready,
            stream=result,
            phases=tr.phases(),
            connection=tr.connection,
            status=status,
            detail=detail[:_DETAIL_MAX],
        )

    async def _read(
        self, resp: aiohttp.ClientResponse, reader: StreamReader, tr: _Tracker
    ) -> tuple[Outcome | None, str]:
        """Read the body into ``reader``; (None, "") lets the stream decide the outcome."""
        content = resp.content
        arrivals = _Arrivals.install(resp)
        total = 0
        try:
            while True:
                data = await content.readany()
                read_at = time.monotonic()
                if not data:
                    return None, ""
                if total + len(data) > self._max_bytes:
                    return Outcome.PROTOCOL_ERROR, f"response over {self._max_bytes} bytes"
                first = not reader.result.token_times
                # Each piece carries the time its bytes came off the socket; parsing comes
                # after, so decoding never delays a timestamp.
                for piece, at in _pieces(data, total, read_at, arrivals):
                    reader.feed(piece, at)
                total += len(data)
                if first and reader.result.token_times:
                    tr.advance(Outcome.TIMEOUT_TOTAL)
                if reader.finished:
                    break
            if reader.result.done and not content.at_eof():
                # Read to the end of the body (usually here already) so the connection can be
                # reused.
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    async with asyncio.timeout(DRAIN_GRACE):
                        while (data := await content.readany()) and total <= self._max_bytes:
                            total += len(data)
            return None, ""
        finally:
            if arrivals is not None:
                arrivals.remove()


class _Arrivals:
    """When each stretch of the response body came off the socket.

    A timestamp taken after ``readany()`` returns is as late as the event loop is busy: with
    32 streams, one read waits for the other tasks' parsing. So the connection's
    ``data_received`` is wrapped for the life of the response: it stamps the clock as bytes
    arrive and notes how far the body reached (``StreamReader.total_bytes``, counted after
    HTTP chunk framing is removed). Bytes that arrived before the wrapper (with the
    headers) or by another path keep their read time.
    """

    def __init__(self, proto: Any, start: int) -> None:
        self.proto = proto
        self.start = start
        self.marks: collections.deque[tuple[int, float]] = collections.deque()

    @classmethod
    def install(cls, resp: aiohttp.ClientResponse) -> _Arrivals | None:
        conn = resp.connection
        proto = conn.protocol if conn is not None else None
        content = resp.content
        if proto is None or not hasattr(proto, "__dict__") or "data_received" in vars(proto):
            return None
        arrivals = cls(proto, content.total_bytes)
        original = proto.data_received
        marks = arrivals.marks

        def data_received(data: bytes) -> None:
            now = time.monotonic()
            original(data)
            marks.append((content.total_bytes, now))

        vars(proto)["data_received"] = data_received
        return arrivals

    def remove(self) -> None:
        vars(self.proto).pop("data_received", None)


def _pieces(
    data: bytes, offset: int, read_at: float, arrivals: _Arrivals | None
) -> Iterator[tuple[bytes, float]]:
    """Split ``data`` (body bytes from ``offset`` on) at arrival marks, with their times."""
    end = offset + len(data)
    pos = offset
    if arrivals is not None:
        marks = arrivals.marks
        while marks and marks[0][0] <= pos:
            marks.popleft()  # nothing new arrived with that read (or already consumed)
        # Bytes from before the wrapper was installed are stamped with the read time.
        if pos < arrivals.start:
            cut = min(arrivals.start, end)
            yield data[: cut - offset], read_at
            pos = cut
        while marks and pos < end:
            mark, at = marks[0]
            cut = min(mark, end)
            if cut > pos:
                yield data[pos - offset : cut - offset], at
                pos = cut
            if mark <= end:
                marks.popleft()
            else:
                break
    if pos < end:
        yield data[pos - offset :], read_at


_WAITING = {
    Outcome.TIMEOUT_CONNECT: "connection",
    Outcome.TIMEOUT_FIRST_TOKEN: "first token",
    Outcome.TIMEOUT_TOTAL: "end of stream",
}


def _limit(t: Timeouts, outcome: Outcome) -> float:
    return {
        Outcome.TIMEOUT_CONNECT: t.connect,
        Outcome.TIMEOUT_FIRST_TOKEN: t.first_token,
    }.get(outcome, t.total)


def _stream_detail(result: StreamResult) -> str:
    outcome = result.outcome
    if outcome is Outcome.PROTOCOL_ERROR:
        return result.protocol_error or ""
    if outcome is Outcome.STREAM_ERROR:
        return f"error event in stream ({result.error})"
    if outcome is Outcome.STREAM_RESET:
        return "stream closed before [DONE]"
    if outcome is Outcome.EMPTY:
        return "stream ended without a token"
    return ""
