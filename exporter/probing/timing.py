"""Where a request's time went, stamped on ``time.monotonic()`` (CLOCK_MONOTONIC on Linux,
the event loop's clock too, system-wide so another process can compare).

Connection phases (waiting for a pooled connection, DNS, TCP connect, TLS, writing the
request, the wait for the response head) come from aiohttp's trace hooks and a TLS hook, so
a new connection never reads as a slow first token. Body bytes are stamped as they come off
the socket (see ``Arrivals``), not when the reading task gets round to them. The tracker
also holds how far the request got, which picks the deadline in force.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp

from exporter.metrics import ProbeOutcome
from exporter.probing.request import Connection, Timeouts


@dataclass
class Tracker:
    """Per-request trace state, filled by aiohttp trace callbacks and the TLS hook."""

    issued: float
    timeouts: Timeouts
    loop_deadline: asyncio.Timeout | None = None
    stage: ProbeOutcome = ProbeOutcome.TIMEOUT_CONNECT
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

    def deadline(self) -> tuple[float, ProbeOutcome]:
        """The current deadline and the outcome if it passes; the tightest limit wins."""
        t = self.timeouts
        limits = [(t.total, ProbeOutcome.TIMEOUT_TOTAL)]
        if self.stage in (ProbeOutcome.TIMEOUT_CONNECT, ProbeOutcome.TIMEOUT_FIRST_TOKEN):
            limits.append((t.first_token, ProbeOutcome.TIMEOUT_FIRST_TOKEN))
        if self.stage is ProbeOutcome.TIMEOUT_CONNECT:
            limits.append((t.connect, ProbeOutcome.TIMEOUT_CONNECT))
        limit, outcome = min(limits, key=lambda x: x[0])
        return self.issued + limit, outcome

    def advance(self, stage: ProbeOutcome) -> None:
        self.stage = stage
        if self.loop_deadline is not None:
            self.loop_deadline.reschedule(self.deadline()[0])

    def on_ready(self, connection: Connection) -> None:
        if self.ready is None:
            self.ready = time.monotonic()
            self.connection = connection
            self.advance(ProbeOutcome.TIMEOUT_FIRST_TOKEN)

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
CURRENT: contextvars.ContextVar[Tracker | None] = contextvars.ContextVar(
    "llm_request_tracker", default=None
)


class TimedSSLContext(ssl.SSLContext):
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
        tracker = CURRENT.get()
        if tracker is not None and tracker.tls_start is None:
            tracker.tls_start = time.monotonic()
        return super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)


def _tracker(ctx: SimpleNamespace) -> Tracker:
    tr = ctx.trace_request_ctx
    assert isinstance(tr, Tracker)
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


def trace_config() -> aiohttp.TraceConfig:
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


class Arrivals:
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
    def install(
        cls, resp: aiohttp.ClientResponse, on_eof: Callable[[], None] | None = None
    ) -> Arrivals | None:
        """Wrap the connection's ``data_received``; ``on_eof`` runs inside the callback that
        ends the body (when aiohttp releases the connection to its pool)."""
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
            if on_eof is not None and content.is_eof():
                on_eof()

        vars(proto)["data_received"] = data_received
        return arrivals

    def remove(self) -> None:
        vars(self.proto).pop("data_received", None)


def pieces(
    data: bytes, offset: int, read_at: float, arrivals: Arrivals | None
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
