"""The one request path of probes and bench: build the request, send it with connection
tracing, feed the stream reader, classify the outcome.

TTFT, TTFC and E2E run from the moment the connection is ready and the request is about to
be written; what came before is reported as phases (:mod:`exporter.probing.timing`). Body
bytes reach the stream reader with the times they came off the socket. Timeouts, by
contrast, all count from when the request was issued, as a user would count them:
``connect`` bounds getting a connection, ``first_token`` the wait for the first token,
``total`` the whole request.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import ClientRequest, ClientTimeout
from aiohttp.connector import Connection
from aiohttp.tracing import Trace

from exporter import redact
from exporter.metrics import ProbeOutcome
from exporter.probing.request import RequestResult, RequestSpec, Timeouts
from exporter.probing.stream import StreamReader, StreamResult
from exporter.probing.tcpinfo import Connections, TcpDelta, Watch
from exporter.probing.timing import (
    CURRENT,
    Arrivals,
    TimedSSLContext,
    Tracker,
    pieces,
    trace_config,
)

#: After [DONE], how long to wait for the end of the HTTP body so the connection can be
#: reused; a server that keeps the stream open longer just loses the connection.
DRAIN_GRACE = 0.5
#: How long an error body may take to arrive (bench only): its status is already known, so
#: a server that stalls mid-body costs this much of a worker's time, not a timeout's worth.
ERROR_BODY_GRACE = 1.0
#: aiohttp's default 64 KiB read buffer stalls fast streams under load (sglang raised it to
#: 10 MiB for the same reason); reads are bounded by max_response_bytes anyway.
READ_BUFSIZE = 1 << 20
_DETAIL_MAX = 200


def _ssl_context(ca_file: str | None) -> ssl.SSLContext:
    ctx = TimedSSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names
    if ca_file:
        ctx.load_verify_locations(cafile=ca_file)
    else:
        ctx.load_default_certs()
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


#: A Retry-After longer than this is capped: a typo on the server must not silence a probe
#: for days.
MAX_RETRY_AFTER = 3600.0


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delay-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    wait = when.timestamp() - (time.time() if now is None else now)
    return min(max(wait, 0.0), MAX_RETRY_AFTER)


def _status_outcome(status: int) -> ProbeOutcome:
    if status == 429:
        return ProbeOutcome.RATE_LIMITED
    if 400 <= status < 500:
        return ProbeOutcome.HTTP_4XX
    if 300 <= status < 400:
        return ProbeOutcome.REDIRECT
    if status >= 500:
        return ProbeOutcome.HTTP_5XX
    return ProbeOutcome.PROTOCOL_ERROR  # 1xx: not a stream


def _exc_detail(exc: BaseException) -> str:
    # Only the exception class and OS error text: aiohttp messages can embed the URL.
    os_error = getattr(exc, "os_error", None)
    text = type(exc).__name__
    if isinstance(os_error, OSError) and os_error.strerror:
        text += f": {os_error.strerror}"
    return text[:_DETAIL_MAX]


#: Seconds an idle connection is kept for the next request: below vLLM's 5 s server
#: keep-alive, so the client never reuses a socket the server is closing at that moment (a
#: spurious reset on a healthy endpoint).
KEEPALIVE = 2.5


class _Connector(aiohttp.TCPConnector):
    """Reads each new connection's TCP counters as its handshake completes
    (``Connections.opened``)."""

    def __init__(self, connections: Connections, **kw: Any) -> None:
        super().__init__(**kw)
        self._opened = connections

    async def connect(self, req: ClientRequest, traces: list[Trace], timeout: ClientTimeout
                      ) -> Connection:
        conn = await super().connect(req, traces, timeout)
        tr = CURRENT.get()
        if tr is not None and tr.connection == "new" and conn.transport is not None:
            self._opened.opened(conn.protocol, conn.transport.get_extra_info("socket"))
        return conn


class Client:
    """An aiohttp session with tracing, created on first use (it needs a running loop)."""

    def __init__(
        self,
        *,
        limit: int = 0,
        keepalive: float = KEEPALIVE,
        max_response_bytes: int = 4 * 1024 * 1024,
        ca_file: str | None = None,
        error_body_bytes: int = 0,
    ) -> None:
        self._limit = limit
        self._keepalive = keepalive
        self._max_bytes = max_response_bytes
        self._ca_file = ca_file
        self._error_body_bytes = error_body_bytes
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None
        self._connections = Connections()

    async def _get_session(self, url: str) -> aiohttp.ClientSession:
        if self._session is None:
            if urlsplit(url).scheme == "https":
                # Loading CA certificates reads files: keep it off the event loop.
                self._ssl = await asyncio.to_thread(_ssl_context, self._ca_file)
            connector = _Connector(
                self._connections,
                limit=self._limit,
                keepalive_timeout=self._keepalive,
                ssl=self._ssl if self._ssl is not None else True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trace_configs=[trace_config()],
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
        tr = Tracker(issued=time.monotonic(), timeouts=timeouts)
        token = CURRENT.set(tr)
        reader: StreamReader | None = None
        status: int | None = None
        retry_after: float | None = None
        outcome: ProbeOutcome | None = None
        detail = ""
        error_body: bytes | None = None
        tcp: TcpDelta | None = None
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
                    watch = self._watch(resp, tr)
                    try:
                        if not 200 <= status < 300:
                            outcome, detail = _status_outcome(status), f"HTTP {status}"
                            if status in (429, 503):
                                retry_after = parse_retry_after(
                                    resp.headers.get("Retry-After"))
                            if 300 <= status < 400:
                                detail += " redirect (not followed)"
                            if self._error_body_bytes:
                                error_body = await _read_prefix(resp, self._error_body_bytes)
                        else:
                            reader = StreamReader(start=tr.ready or tr.issued)
                            outcome, detail = await self._read(resp, reader, tr, watch)
                    finally:
                        # Still inside the response: the socket is this request's and open,
                        # even when the request failed (a stream that timed out while
                        # retransmitting is the news).
                        if watch is not None:
                            tcp = watch.end()
        except TimeoutError:
            if reader is not None and reader.finished:
                outcome = None  # the stream had ended; only the drain ran late
            elif outcome is not None and reader is None:
                pass  # an error status had come; only reading its body ran late
            else:
                outcome = tr.deadline()[1]
                detail = f"no {_WAITING[outcome]} within {_limit(timeouts, outcome):g}s"
        except aiohttp.ClientConnectorError as exc:
            outcome, detail = ProbeOutcome.CONNECT_ERROR, _exc_detail(exc)
        except aiohttp.ClientResponseError as exc:
            # The response did not parse as HTTP (its text is the server's: not quoted).
            outcome, detail = ProbeOutcome.PROTOCOL_ERROR, f"malformed HTTP response ({exc.status})"
        except (aiohttp.ClientError, OSError) as exc:
            # Disconnects and resets: before a connection existed it never connected.
            connected = tr.ready is not None
            outcome = ProbeOutcome.STREAM_RESET if connected else ProbeOutcome.CONNECT_ERROR
            detail = _exc_detail(exc)
        finally:
            CURRENT.reset(token)
            tr.loop_deadline = None
        result = reader.close() if reader is not None else None
        if outcome is None:
            assert result is not None
            outcome = result.outcome
            detail = _stream_detail(result)
        elif outcome is ProbeOutcome.STREAM_RESET and result is not None and result.outcome in (
            ProbeOutcome.STREAM_ERROR,
            ProbeOutcome.PROTOCOL_ERROR,
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
            detail=redact.text(detail)[:_DETAIL_MAX],
            retry_after=retry_after,
            error_body=error_body,
            tcp=tcp,
        )

    def _watch(self, resp: aiohttp.ClientResponse, tr: Tracker) -> Watch | None:
        """Start reading the kernel's statistics of the response's connection."""
        conn = resp.connection
        transport = conn.transport if conn is not None else None
        if conn is None or transport is None:
            return None
        sock = transport.get_extra_info("socket")  # the TCP socket under TLS too
        return self._connections.begin(conn.protocol, sock, new=tr.connection != "reused")

    async def _read(
        self, resp: aiohttp.ClientResponse, reader: StreamReader, tr: Tracker,
        watch: Watch | None,
    ) -> tuple[ProbeOutcome | None, str]:
        """Read the body into ``reader``; (None, "") lets the stream decide the outcome."""
        content = resp.content
        arrivals = Arrivals.install(resp, watch.mark if watch is not None else None)
        total = 0
        try:
            while True:
                data = await content.readany()
                read_at = time.monotonic()
                if not data:
                    return None, ""
                if total + len(data) > self._max_bytes:
                    return ProbeOutcome.PROTOCOL_ERROR, f"response over {self._max_bytes} bytes"
                first = not reader.result.token_times
                # Each piece carries the time its bytes came off the socket; parsing comes
                # after, so decoding never delays a timestamp.
                for piece, at in pieces(data, total, read_at, arrivals):
                    reader.feed(piece, at)
                total += len(data)
                if first and reader.result.token_times:
                    tr.advance(ProbeOutcome.TIMEOUT_TOTAL)
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


async def _read_prefix(resp: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of an error response, what arrived within ERROR_BODY_GRACE;
    None if nothing could be read (the status alone is then the detail)."""
    data = b""
    try:
        async with asyncio.timeout(ERROR_BODY_GRACE):
            while len(data) < limit and (chunk := await resp.content.read(limit - len(data))):
                data += chunk
    except (aiohttp.ClientError, OSError, TimeoutError):
        return data or None
    return data


_WAITING = {
    ProbeOutcome.TIMEOUT_CONNECT: "connection",
    ProbeOutcome.TIMEOUT_FIRST_TOKEN: "first token",
    ProbeOutcome.TIMEOUT_TOTAL: "end of stream",
}


def _limit(t: Timeouts, outcome: ProbeOutcome) -> float:
    return {
        ProbeOutcome.TIMEOUT_CONNECT: t.connect,
        ProbeOutcome.TIMEOUT_FIRST_TOKEN: t.first_token,
    }.get(outcome, t.total)


def _stream_detail(result: StreamResult) -> str:
    outcome = result.outcome
    if outcome is ProbeOutcome.PROTOCOL_ERROR:
        return result.protocol_error or ""
    if outcome is ProbeOutcome.STREAM_ERROR:
        return f"error event in stream ({result.error})"
    if outcome is ProbeOutcome.STREAM_RESET:
        return "stream closed before [DONE]"
    if outcome is ProbeOutcome.EMPTY:
        return "stream ended without a token"
    return ""
