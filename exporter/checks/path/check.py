"""Path check: pipelined bursts of ICMP echoes or TCP connects per carrier target.

A burst sends ``burst`` probes ``spacing`` apart whatever the replies do; each probe has its
own deadline ``timeout`` after it left, so a slow, lossy path does not stretch the burst
(icmplib's ping is stop-and-wait). One engine, ``run_burst``, drives both protocols through
a per-protocol "send one probe" function that returns a future of the RTT.

A packet is counted, as sent and maybe received, only once its fate is known: its reply
came, or its deadline passed. Packets in flight are never counted as lost (smokeping_prober
counts them, which biases its loss up).

All ICMP targets of a section share one echo socket (``icmp``); TCP connects in flight are
capped per section (``TcpSlots``). Targets are IPv4.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import socket
import statistics
import time
from collections.abc import Awaitable, Callable

from exporter import metrics
from exporter.checks.base import Check, Registration
from exporter.checks.batch import Batch, Ledger, Named
from exporter.checks.path.icmp import EchoSocket, IcmpAccess
from exporter.checks.path.jitter import rfc3550, rtt_diffs
from exporter.checks.path.route import RouteCheck, Tracer, resolve_ipv4
from exporter.checks.path.routes import RouteTableError, load_table
from exporter.config.models import Config, PathsConfig, PathTarget
from exporter.config.yamlfile import ConfigError

log = logging.getLogger("exporter.path")

REASONS = {
    "icmp": ("permission", "resolve", "unreachable", "send"),
    "tcp": ("resolve", "unreachable", "refused", "send", "busy"),
}
_UNREACHABLE = {
    errno.ENETUNREACH,
    errno.EHOSTUNREACH,
    errno.ENETDOWN,
    errno.EHOSTDOWN,
    errno.EADDRNOTAVAIL,
}


class PathError(Exception):
    """A burst that could not run, or got no answer; ``reason`` labels the error counter."""

    def __init__(self, reason: str | None, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# --- the burst engine --------------------------------------------------------------------

#: Sends one probe now; the future resolves with its RTT in seconds, or fails.
SendOne = Callable[[], asyncio.Future[float]]
#: Told once per packet, when its fate is known: (index, rtt or None, error reason or None).
Settled = Callable[[int, float | None, str | None], None]


def reason_of(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, Busy):
        return "busy"
    if isinstance(exc, OSError) and exc.errno in _UNREACHABLE:
        return "unreachable"
    return "send"


async def run_burst(
    send: SendOne, count: int, spacing: float, timeout: float, settled: Settled
) -> list[float | None]:
    """Send ``count`` probes ``spacing`` apart, each lost ``timeout`` after it was sent.

    Returns the RTTs in send order (None for lost). If cancelled, packets not yet settled
    are abandoned uncounted: they were neither answered nor past their deadline.
    """
    loop = asyncio.get_running_loop()
    rtts: list[float | None] = [None] * count
    open_: dict[int, tuple[asyncio.Future[float], asyncio.TimerHandle]] = {}
    all_settled: asyncio.Future[None] = loop.create_future()
    remaining = count

    def settle(i: int, fut: asyncio.Future[float]) -> None:
        nonlocal remaining
        entry = open_.pop(i, None)
        if entry is None:  # the burst was abandoned
            return
        entry[1].cancel()
        rtt, reason = None, None
        if not fut.cancelled():  # cancelled: its deadline passed
            if (exc := fut.exception()) is not None:
                reason = reason_of(exc)
                if isinstance(exc, Refused):
                    rtt = rtts[i] = exc.rtt
            else:
                rtt = rtts[i] = fut.result()
        settled(i, rtt, reason)
        remaining -= 1
        if remaining == 0:
            all_settled.set_result(None)

    start = loop.time()
    try:
        for i in range(count):
            wait = start + i * spacing - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            fut = send()
            open_[i] = (fut, loop.call_later(timeout, fut.cancel))
            fut.add_done_callback(functools.partial(settle, i))
        await all_settled
    finally:
        abandoned = list(open_.values())
        open_.clear()
        for fut, timer in abandoned:
            timer.cancel()
            fut.cancel()
    return rtts


# --- TCP ----------------------------------------------------------------------------------


class Refused(ConnectionRefusedError):
    """A TCP reset: the host answered (the port is closed), so not a lost packet; ``rtt``
    is SYN to RST, a round trip like any other."""

    def __init__(self, rtt: float) -> None:
        super().__init__("connection refused")
        self.rtt = rtt


async def tcp_connect_time(addr: str, port: int) -> float:
    """SYN to established (or to the reset), in seconds; the connection is closed at once."""
    loop = asyncio.get_running_loop()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setblocking(False)
        start = time.perf_counter()
        try:
            await loop.sock_connect(sock, (addr, port))
        except ConnectionRefusedError:
            raise Refused(time.perf_counter() - start) from None
        return time.perf_counter() - start


class Busy(Exception):
    """A probe not sent: the section's connects in flight were at their cap. It is neither
    sent nor lost; ``llm_path_errors_total{reason="busy"}`` counts it."""


class TcpSlots:
    """The cap on a section's TCP connects in flight, shared by its targets.

    Each connect holds a socket (a file descriptor) until it is answered or its deadline
    passes; a thousand black-holed targets would otherwise hold ``timeout / spacing``
    sockets each. A probe finding no slot is skipped (Busy), never queued: waiting would
    shift its send time and eat into its deadline.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.in_flight = 0

    def send(self, addr: str, port: int) -> asyncio.Future[float]:
        if self.in_flight >= self.cap:
            fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
            fut.set_exception(Busy(f"{self.cap} TCP connects in flight (paths.max_tcp_connects)"))
            return fut
        self.in_flight += 1
        task = asyncio.ensure_future(tcp_connect_time(addr, port))
        task.add_done_callback(self._done)
        return task

    def _done(self, _: object) -> None:
        self.in_flight -= 1


# --- the check ----------------------------------------------------------------------------


Resolver = Callable[[str], Awaitable[str]]


class PathCheck(Check):
    kind = "path"

    def __init__(
        self,
        carrier: str,
        target: PathTarget,
        paths: PathsConfig,
        icmp: IcmpAccess,
        tcp: TcpSlots | None = None,
        resolve: Resolver = resolve_ipv4,
    ) -> None:
        super().__init__(f"{carrier}/{target.name}", paths.interval, paths.interval)
        self.spec = target
        self.burst, self.spacing, self.probe_timeout = paths.burst, paths.spacing, paths.timeout
        self.icmp = icmp
        self.tcp = tcp or TcpSlots(paths.max_tcp_connects)
        self._resolve = resolve
        labels: Named = {
            "carrier": carrier, "target": target.name, "region": target.region,
            "protocol": target.protocol,
        }
        self._labels = labels
        self._own = own = Ledger()
        self._sent = own.counter(metrics.PATH_PACKETS_SENT, labels)
        self._received = own.counter(metrics.PATH_PACKETS_RECEIVED, labels)
        self._rtt = own.histogram(metrics.PATH_RTT, labels, paths.rtt_buckets)
        self._errors = {
            r: own.counter(metrics.PATH_ERRORS, {**labels, "reason": r})
            for r in REASONS[target.protocol]
        }
        # The jitter series come and go with the bursts; their labels are fixed here.
        self._rfc3550: Named = {**labels, "method": metrics.PATH_JITTER_RFC3550}
        self._mean_abs: Named = {**labels, "method": metrics.PATH_JITTER_MEAN_ABS_DIFF}
        self._socket: EchoSocket | None = None
        self._addr: str | None = None
        self._unsent = 0  # probes of this burst skipped as busy
        self.jitter: float | None = None  # the RFC 3550 state, kept across bursts

    def describe(self) -> str:
        t = self.spec
        where = f"{t.host}:{t.tcp_port}" if t.protocol == "tcp" else t.host
        return (
            f"{t.protocol} {where} ({t.region}), {self.burst} x {self.spacing * 1000:g}ms,"
            f" timeout {self.probe_timeout:g}s"
        )

    async def _address(self) -> str:
        """Re-resolved every run, so a moved host is followed (and said)."""
        try:
            addr = await self._resolve(self.spec.host)
        except OSError as exc:
            self._errors["resolve"].inc()
            raise PathError("resolve", f"cannot resolve {self.spec.host}: {exc}") from None
        if self._addr is not None and addr != self._addr:
            log.info(
                "path target address changed",
                extra={"check": self.name, "host": self.spec.host, "old": self._addr, "new": addr},
            )
        self._addr = addr
        return addr

    def _sender(self, addr: str) -> SendOne:
        if self.spec.protocol == "tcp":
            return functools.partial(self.tcp.send, addr, self.spec.tcp_port)
        if self._socket is None:
            self._socket = self.icmp.acquire()
        if self._socket is None:
            self._errors["permission"].inc()
            raise PathError("permission", "no ICMP socket allowed (see the startup log line)")
        return functools.partial(self._socket.send, addr)

    def _settled(self, _: int, rtt: float | None, reason: str | None) -> None:
        if reason == "busy":
            self._unsent += 1
            self._errors[reason].inc()
            return
        self._sent.inc()
        if rtt is not None:
            self._received.inc()
            self._rtt.observe(rtt)
        if reason is not None:
            self._errors[reason].inc()

    async def run(self) -> None:
        addr = await self._address()
        send = self._sender(addr)
        self._unsent = 0
        rtts = await run_burst(send, self.burst, self.spacing, self.probe_timeout, self._settled)
        answered = sum(r is not None for r in rtts)
        if self._unsent == len(rtts):
            raise PathError("busy", f"no probe sent: {self.tcp.cap} TCP connects in flight")
        own, labels = self._own, self._labels
        own.gauge(metrics.PATH_LOSS, labels).set(1 - answered / (len(rtts) - self._unsent))
        diffs = rtt_diffs(rtts)
        self.jitter = rfc3550(self.jitter, diffs)
        if self.jitter is not None:
            own.gauge(metrics.PATH_JITTER, self._rfc3550).set(self.jitter)
        if diffs:
            own.gauge(metrics.PATH_JITTER, self._mean_abs).set(statistics.fmean(diffs))
        else:
            own.remove(metrics.PATH_JITTER, self._mean_abs)  # undefined for this burst: absent
        if not answered:
            raise PathError(None, f"no answer from {addr} to any of {len(rtts)} probes")
        own.gauge(metrics.PATH_LAST_SUCCESS, labels).set(time.time())

    def batch(self) -> Batch:
        return self._own.batch()

    async def close(self) -> None:
        if self._socket is not None:
            self._socket = None
            self.icmp.release()


def build(config: Config) -> list[Check]:
    """Path and route checks for every target of the ``paths`` section."""
    paths = config.paths
    if paths is None:
        return []
    try:
        table = load_table(paths.route_table)
    except RouteTableError as exc:
        raise ConfigError([f"{config.where('paths', 'route_table')}: {exc}"]) from None
    icmp, tcp = IcmpAccess(paths.icmp_socket), TcpSlots(paths.max_tcp_connects)
    tracer = Tracer(paths.route_parallelism, paths.route_interval)
    checks: list[Check] = []
    for carrier, targets in paths.carriers.items():
        for target in targets:
            checks.append(PathCheck(carrier, target, paths, icmp, tcp))
            checks.append(
                RouteCheck(carrier, target, paths.route_interval, paths.timeout, table, tracer)
            )
    return checks


REGISTRATION = Registration("paths", build)
