"""The exporter's listening socket: a connection cap below the open-file limit, header-read,
idle and response deadlines, TLS per connection from the current web config, and a count of
every connection refused or cut.

Why its own accept path: asyncio hands a TLS server's protocol its connection only after the
handshake, so a cap counted there would let a thousand stalled handshakes hold a thousand
descriptors. Here each accepted socket is counted at once, TLS is started on it
(``loop.start_tls``), and aiohttp's request handler is attached after.

At the cap the longest-idle connection (one that never sent a request first, then a
kept-alive one) is closed to make room, so idle connections cannot lock a scraper out; a new
connection is refused only while every slot is busy answering.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import ssl
import sys
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from prometheus_client import CollectorRegistry

from exporter import metrics
from exporter.config.yamlfile import ConfigError
from exporter.runtime.logs import Throttle

log = logging.getLogger("exporter.http")

#: Descriptors kept for everything but served connections: Python, logs, the checks' own
#: sockets and pipes (per check), and sockets accepted in one loop pass before the cap acts.
RESERVED_FDS = 64
FDS_PER_CHECK = 4
BACKLOG = 128
#: A default cap beyond this buys nothing but memory: Prometheus needs one connection.
MAX_AUTO_CONNECTIONS = 2048
MIN_CONNECTIONS = 16
#: A response the client has not taken after this long is cut (a client that never reads).
REQUEST_TIMEOUT = 60.0
SWEEP_EVERY = 0.5
#: Request bytes kept between the TLS handshake and the handler (aiohttp's header limit).
EARLY_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Limits:
    max_connections: int
    header_timeout: float
    idle_timeout: float
    request_timeout: float = REQUEST_TIMEOUT


def connection_cap(configured: int | None, checks: int) -> int:
    """The cap: what RLIMIT_NOFILE leaves after the reserve, or the configured value if that
    fits under it (a configured value that does not is a config error)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    reserve = RESERVED_FDS + BACKLOG + FDS_PER_CHECK * checks
    room = soft - reserve
    if configured is not None:
        if configured > room:
            raise ConfigError([
                f"server.max_connections {configured}: above what the open-file limit {soft}"
                f" allows ({max(room, 0)}: the limit minus {reserve} kept for {checks} checks"
                " and the listen backlog); raise LimitNOFILE or lower it"
            ])
        return configured
    if room < MIN_CONNECTIONS:
        log.warning(
            "the open-file limit leaves few connections for the listener; raise LimitNOFILE",
            extra={"nofile": soft, "reserved": reserve, "connections": MIN_CONNECTIONS},
        )
    return max(MIN_CONNECTIONS, min(room, MAX_AUTO_CONNECTIONS))


class ServerLog:
    """What aiohttp's request handler logs through, tamed: a malformed request (anyone on the
    network can send one) is a debug line, an error of ours stays an error, both throttled."""

    def __init__(self) -> None:
        self._throttles: dict[int, Throttle] = {}

    def _log(self, level: int, msg: str, *args: Any, exc_info: Any = None) -> None:
        if not log.isEnabledFor(level):
            return
        extra = self._throttles.setdefault(level, Throttle()).allow()
        if extra is not None:
            log.log(level, msg, *args, exc_info=exc_info, extra=extra)

    def exception(self, msg: str, *args: Any, exc_info: Any = True, **_: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        bad_request = isinstance(exc, HttpProcessingError | ConnectionError)
        self._log(logging.DEBUG if bad_request else logging.ERROR, msg, *args, exc_info=exc)

    def debug(self, msg: str, *args: Any, exc_info: Any = None, **_: Any) -> None:
        self._log(logging.DEBUG, msg, *args, exc_info=exc_info)

    def warning(self, msg: str, *args: Any, **_: Any) -> None:
        self._log(logging.WARNING, msg, *args)

    def error(self, msg: str, *args: Any, **_: Any) -> None:
        self._log(logging.ERROR, msg, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(log, name)


class _Conn(asyncio.Protocol):
    """One accepted connection: the raw socket's protocol until TLS replaces it (then the TLS
    layer's application protocol), forwarding everything to aiohttp's handler."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.raw: asyncio.Transport | None = None
        self.handler: RequestHandler | None = None
        # What TLS decrypted before start_tls returned and the handler was attached.
        self._early: list[bytes] = []
        self._early_eof = False
        self.cut = False
        self.since = gate.loop.time()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = cast(asyncio.Transport, transport)
        self.gate.admit(self)

    def attach(self, transport: asyncio.Transport) -> None:
        self.handler = self.gate.make_handler()
        self.gate.handlers[self.handler] = self
        self.handler.connection_made(transport)
        for data in self._early:
            self.handler.data_received(data)
        self._early.clear()
        if self._early_eof:
            self.handler.eof_received()

    def data_received(self, data: bytes) -> None:
        if self.handler is not None:
            self.handler.data_received(data)
        elif sum(map(len, self._early)) < EARLY_LIMIT:
            self._early.append(data)

    def eof_received(self) -> None:
        if self.handler is not None:
            self.handler.eof_received()  # aiohttp's returns None: the transport closes
        else:
            self._early_eof = True

    def pause_writing(self) -> None:
        if self.handler is not None:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.handler is not None:
            self.handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.handler is not None:
            self.handler.connection_lost(exc)
            self.gate.handlers.pop(self.handler, None)
        self.gate.release(self)

    def abort(self) -> None:
        self.cut = True
        if self.raw is not None:
            self.raw.abort()


class Gate:
    """Admission, deadlines and eviction for every connection of one listener."""

    def __init__(
        self,
        registry: CollectorRegistry,
        limits: Limits,
        make_handler: Callable[[], RequestHandler],
        tls: Callable[[], ssl.SSLContext | None],
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.limits = limits
        self.make_handler = make_handler
        self._tls = tls
        self.handlers: dict[RequestHandler, _Conn] = {}
        self._open: set[_Conn] = set()
        # Idle connections in the order they went idle: never-used first, then kept-alive.
        self._fresh: OrderedDict[_Conn, None] = OrderedDict()
        self._kept: OrderedDict[_Conn, None] = OrderedDict()
        self._busy: set[_Conn] = set()
        self._refused = metrics.EXPORTER_HTTP_CONNECTIONS_REFUSED.counter(registry)
        for reason in metrics.REFUSE_REASONS:
            self._refused.labels(reason)
        metrics.EXPORTER_HTTP_CONNECTIONS_OPEN.gauge(registry).set_function(
            lambda: len(self._open))
        metrics.EXPORTER_HTTP_CONNECTIONS_LIMIT.gauge(registry).set_function(
            lambda: self.limits.max_connections)
        self._handshake_log = Throttle()
        self._handshakes: set[asyncio.Task[None]] = set()  # the loop holds tasks weakly
        self._sweeper = self.loop.create_task(self._sweep())

    # --- admission ----------------------------------------------------------------------
    def admit(self, conn: _Conn) -> None:
        assert conn.raw is not None
        if len(self._open) >= self.limits.max_connections and not self._evict():
            self._refused.labels(metrics.REFUSED_LIMIT).inc()
            conn.abort()
            return
        self._open.add(conn)
        self._fresh[conn] = None
        context = self._tls()
        if context is None:
            conn.attach(conn.raw)
            return
        # Nothing may reach the protocol before the TLS layer is in place.
        conn.raw.pause_reading()
        task = self.loop.create_task(self._upgrade(conn, context))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _upgrade(self, conn: _Conn, context: ssl.SSLContext) -> None:
        assert conn.raw is not None
        if conn.cut:  # evicted before its turn came
            return
        try:
            transport = await self.loop.start_tls(
                conn.raw, conn, context, server_side=True,
                # The sweeper's header deadline cuts a slow handshake; this is its backstop.
                ssl_handshake_timeout=self.limits.header_timeout + 1,
            )
        except Exception as exc:  # whatever the peer did; start_tls closed the socket
            # A connection lost mid-handshake never reaches its protocol: release it here.
            self.release(conn)
            if not conn.cut:
                self._refused.labels(metrics.REFUSED_TLS_HANDSHAKE).inc()
                extra = self._handshake_log.allow()
                if extra is not None:
                    log.debug("TLS handshake failed", extra={**extra, "error": repr(exc)})
            conn.abort()
            return
        if transport is None or conn.cut:  # lost or evicted mid-handshake (start_tls says None)
            self.release(conn)
            conn.abort()
            return
        conn.attach(transport)

    def _evict(self) -> bool:
        for idle in (self._fresh, self._kept):
            if idle:
                victim, _ = idle.popitem(last=False)
                self._refused.labels(metrics.REFUSED_EVICTED).inc()
                victim.abort()
                return True
        return False

    def release(self, conn: _Conn) -> None:
        self._open.discard(conn)
        self._fresh.pop(conn, None)
        self._kept.pop(conn, None)
        self._busy.discard(conn)

    # --- request state (the middleware tells) -------------------------------------------
    def busy(self, conn: _Conn) -> None:
        if conn in self._open:
            self._fresh.pop(conn, None)
            self._kept.pop(conn, None)
            self._busy.add(conn)
            conn.since = self.loop.time()

    def idle(self, conn: _Conn) -> None:
        if conn in self._busy:
            self._busy.discard(conn)
            self._kept[conn] = None
            conn.since = self.loop.time()

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        conn = self.handlers.get(request.protocol)
        if conn is None:
            return await handler(request)
        self.busy(conn)
        try:
            response = await handler(request)
            # Busy until the client took the answer, so a slow reader is bounded too.
            await response.prepare(request)
            await response.write_eof()
            return response
        finally:
            self.idle(conn)

    # --- deadlines ----------------------------------------------------------------------
    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            self.sweep()

    def sweep(self) -> None:
        now, limits = self.loop.time(), self.limits
        for idle, timeout, reason in (
            (self._fresh, limits.header_timeout, metrics.REFUSED_HEADER_TIMEOUT),
            (self._kept, limits.idle_timeout, None),
        ):
            # In the order they went idle, so the first one still in time ends the pass.
            while idle:
                conn = next(iter(idle))
                if now - conn.since < timeout:
                    break
                del idle[conn]
                if conn.cut:
                    continue
                if reason is not None:
                    self._refused.labels(reason).inc()
                    conn.abort()
                elif conn.handler is not None and conn.handler.transport is not None:
                    conn.handler.transport.close()  # a polite end to keep-alive
        for conn in [c for c in self._busy if now - c.since >= limits.request_timeout]:
            self._busy.discard(conn)
            self._refused.labels(metrics.REFUSED_REQUEST_TIMEOUT).inc()
            conn.abort()

    def close(self) -> None:
        self._sweeper.cancel()


class GatedSite(web.BaseSite):
    """An aiohttp site whose connections go through a Gate (see the module docstring)."""

    def __init__(self, runner: web.BaseRunner, host: str | None, port: int, gate: Gate) -> None:
        super().__init__(runner, backlog=BACKLOG)
        self._host, self._port, self._gate = host, port, gate

    @property
    def name(self) -> str:
        return f"{self._host or '0.0.0.0'}:{self._port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        _quiet_accept_errors(loop)
        self._server = await loop.create_server(
            lambda: _Conn(self._gate), self._host, self._port,
            backlog=self._backlog, reuse_address=True,
        )

    async def stop(self) -> None:
        self._gate.close()
        await super().stop()


def _quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Out of descriptors, asyncio logs a full error and retries every second, for ever: a
    line a second per listener. The cap should prevent it; if the checks used the reserve
    up, one line a minute says so instead."""
    throttle = Throttle(burst=1)
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            extra = throttle.allow()
            if extra is not None:
                log.error("cannot accept connections: out of file descriptors; raise"
                          " LimitNOFILE or lower server.max_connections", extra=extra)
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)


def make_runner(app: web.Application) -> web.AppRunner:
    return web.AppRunner(app, handle_signals=False, access_log=None,
                         logger=cast(logging.Logger, ServerLog()))
