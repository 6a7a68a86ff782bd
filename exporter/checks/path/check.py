"""Path check: pipelined bursts of ICMP echoes or TCP connects per carrier target.

A burst sends ``burst`` probes ``spacing`` apart whatever the replies do; each probe has its
own deadline ``timeout`` after it left, so a slow, lossy path does not stretch the burst
(icmplib's ping is stop-and-wait). One engine, ``run_burst``, drives both protocols through
a per-protocol "send one probe" function that returns a future of the RTT.

A packet is counted, as sent and maybe received, only once its fate is known: its reply
came, or its deadline passed. Packets in flight are never counted as lost (smokeping_prober
counts them, which biases its loss up).

ICMP uses an unprivileged datagram ("ping") socket where net.ipv4.ping_group_range allows
it, else a raw socket (root or CAP_NET_RAW). Replies carry kernel receive timestamps
(SO_TIMESTAMPNS), so event-loop delay does not inflate the RTT. Targets are IPv4.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import random
import socket
import statistics
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from exporter import metrics
from exporter.checks.base import Check
from exporter.checks.path.jitter import rfc3550, rtt_diffs
from exporter.checks.path.route import RouteCheck, RouteMetrics, Tracer, resolve_ipv4
from exporter.checks.path.routes import RouteTableError, load_table
from exporter.config.models import Config, PathsConfig, PathTarget
from exporter.config.yamlfile import ConfigError

log = logging.getLogger("exporter.path")

ICMP_ECHO_REPLY = 0
ICMP_ECHO_REQUEST = 8
#: The usual ping payload size, so routers treat our echoes like anyone's.
PAYLOAD = bytes(56)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@qq")
REASONS = {
    "icmp": ("permission", "resolve", "unreachable", "send"),
    "tcp": ("resolve", "unreachable", "refused", "send"),
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


# --- ICMP ---------------------------------------------------------------------------------


def detect_icmp_mode() -> str | None:
    """'dgram' (ping socket), 'raw', or None when neither is allowed here."""
    for kind, mode in ((socket.SOCK_DGRAM, "dgram"), (socket.SOCK_RAW, "raw")):
        try:
            socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP).close()
            return mode
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM):
                raise
    return None


def permission_hint() -> str:
    gid, exe = os.getgid(), os.path.realpath(sys.executable)
    return (
        "no ICMP socket is allowed, so ICMP path targets report reason=permission (TCP targets"
        f" keep working); fix with either `setcap cap_net_raw+ep {exe}`"
        ' (raw sockets) or `sysctl -w net.ipv4.ping_group_range="0 2147483647"` (ping sockets'
        f' for every group; "{gid} {gid}" for this process\'s group only)'
    )


class IcmpAccess:
    """The ICMP mode, detected once at the first ICMP burst and shared by a section."""

    def __init__(self) -> None:
        self._detected = False
        self._mode: str | None = None

    @property
    def mode(self) -> str | None:
        if not self._detected:
            self._mode = detect_icmp_mode()
            self._detected = True
            if self._mode is None:
                log.error(permission_hint())
            else:
                log.info("ICMP mode detected", extra={"icmp_mode": self._mode})
        return self._mode


def _checksum(data: bytes | bytearray) -> int:
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


class EchoSocket:
    """One ICMP socket of one target: sends echoes, resolves each one's future on reply."""

    def __init__(self, mode: str) -> None:
        kind = socket.SOCK_DGRAM if mode == "dgram" else socket.SOCK_RAW
        self._raw = mode == "raw"
        self._sock = socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)
        self._sock.setblocking(False)
        self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        # A ping socket's kernel rewrites the id to its own and filters replies by it; on a
        # raw socket every ICMP packet of the host arrives and the id tells ours apart.
        self._ident = random.getrandbits(16)
        self._seq = random.getrandbits(16)
        self._waiting: dict[int, tuple[asyncio.Future[float], int, float]] = {}
        self._addr = ""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._sock.fileno(), self._readable)

    def send(self, addr: str) -> asyncio.Future[float]:
        self._addr = addr
        self._seq = seq = (self._seq + 1) & 0xFFFF
        header = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, self._ident, seq)
        packet = bytearray(header + PAYLOAD)
        struct.pack_into("!H", packet, 2, _checksum(packet))
        fut: asyncio.Future[float] = self._loop.create_future()
        sent_wall, sent_mono = time.time_ns(), time.perf_counter()
        try:
            self._sock.sendto(packet, (addr, 0))
        except OSError as exc:
            fut.set_exception(exc)
            return fut
        self._waiting[seq] = (fut, sent_wall, sent_mono)
        fut.add_done_callback(lambda _: self._waiting.pop(seq, None))
        return fut

    def _readable(self) -> None:
        while True:
            try:
                data, ancdata, _, src = self._sock.recvmsg(2048, 64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # an ICMP error reported on the socket; its echo times out
            now_mono = time.perf_counter()
            if self._raw:
                if src[0] != self._addr:
                    continue
                data = data[(data[0] & 0x0F) * 4 :]
            if len(data) < 8 or data[0] != ICMP_ECHO_REPLY:
                continue
            ident, seq = struct.unpack_from("!HH", data, 4)
            if self._raw and ident != self._ident:
                continue
            entry = self._waiting.pop(seq, None)
            if entry is None or entry[0].done():
                continue
            fut, sent_wall, sent_mono = entry
            rtt = now_mono - sent_mono
            for level, kind, value in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack_from(value)
                    kernel = (sec * 1_000_000_000 + nsec - sent_wall) / 1e9
                    # Wall clocks can step; the kernel time is used only when it is sane.
                    if 0 <= kernel <= rtt:
                        rtt = kernel
            fut.set_result(rtt)

    def close(self) -> None:
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for fut, _, _ in list(self._waiting.values()):
            fut.cancel()


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


def tcp_send(addr: str, port: int) -> asyncio.Future[float]:
    return asyncio.ensure_future(tcp_connect_time(addr, port))


# --- the check ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PathMetrics:
    sent: Counter
    received: Counter
    loss: Gauge
    rtt: Histogram
    jitter: Gauge
    last_success: Gauge
    errors: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> PathMetrics:
        return cls(
            metrics.PATH_PACKETS_SENT.counter(registry),
            metrics.PATH_PACKETS_RECEIVED.counter(registry),
            metrics.PATH_LOSS.gauge(registry),
            metrics.PATH_RTT.histogram(registry),
            metrics.PATH_JITTER.gauge(registry),
            metrics.PATH_LAST_SUCCESS.gauge(registry),
            metrics.PATH_ERRORS.counter(registry),
        )


Resolver = Callable[[str], Awaitable[str]]


class PathCheck(Check):
    kind = "path"

    def __init__(
        self,
        carrier: str,
        target: PathTarget,
        paths: PathsConfig,
        fams: PathMetrics,
        icmp: IcmpAccess,
        resolve: Resolver = resolve_ipv4,
    ) -> None:
        super().__init__(f"{carrier}/{target.name}", paths.interval, paths.interval)
        self.spec = target
        self.burst, self.spacing, self.probe_timeout = paths.burst, paths.spacing, paths.timeout
        self.icmp = icmp
        self._resolve = resolve
        labels = (carrier, target.name, target.region, target.protocol)
        self._labels = labels
        self._fams = fams
        self._sent = fams.sent.labels(*labels)
        self._received = fams.received.labels(*labels)
        self._rtt = fams.rtt.labels(*labels)
        self._errors = {r: fams.errors.labels(*labels, r) for r in REASONS[target.protocol]}
        self._socket: EchoSocket | None = None
        self._addr: str | None = None
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
            return functools.partial(tcp_send, addr, self.spec.tcp_port)
        mode = self.icmp.mode
        if mode is None:
            self._errors["permission"].inc()
            raise PathError("permission", "no ICMP socket allowed (see the startup log line)")
        if self._socket is None:
            self._socket = EchoSocket(mode)
        return functools.partial(self._socket.send, addr)

    def _settled(self, _: int, rtt: float | None, reason: str | None) -> None:
        self._sent.inc()
        if rtt is not None:
            self._received.inc()
            self._rtt.observe(rtt)
        if reason is not None:
            self._errors[reason].inc()

    async def run(self) -> None:
        addr = await self._address()
        send = self._sender(addr)
        rtts = await run_burst(send, self.burst, self.spacing, self.probe_timeout, self._settled)
        answered = sum(r is not None for r in rtts)
        self._fams.loss.labels(*self._labels).set(1 - answered / len(rtts))
        diffs = rtt_diffs(rtts)
        self.jitter = rfc3550(self.jitter, diffs)
        if self.jitter is not None:
            self._fams.jitter.labels(*self._labels, metrics.PATH_JITTER_RFC3550).set(self.jitter)
        if diffs:
            mean_abs = self._fams.jitter.labels(*self._labels, metrics.PATH_JITTER_MEAN_ABS_DIFF)
            mean_abs.set(statistics.fmean(diffs))
        else:
            with contextlib.suppress(KeyError):  # undefined for this burst: absent
                self._fams.jitter.remove(*self._labels, metrics.PATH_JITTER_MEAN_ABS_DIFF)
        if not answered:
            raise PathError(None, f"no answer from {addr} to any of {len(rtts)} probes")
        self._fams.last_success.labels(*self._labels).set(time.time())

    async def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


#: The config key this check reads (the registry orders and finds checks by it).
SECTION = "paths"


def build(config: Config, registry: CollectorRegistry) -> list[Check]:
    """Path and route checks for every target of the ``paths`` section."""
    paths = config.paths
    if paths is None:
        return []
    fams = PathMetrics.create(registry)
    route_fams = RouteMetrics.create(registry)
    try:
        table = load_table(paths.route_table)
    except RouteTableError as exc:
        raise ConfigError([f"{config.where('paths', 'route_table')}: {exc}"]) from None
    icmp, tracer = IcmpAccess(), Tracer()
    checks: list[Check] = []
    for carrier, targets in paths.carriers.items():
        for target in targets:
            checks.append(PathCheck(carrier, target, paths, fams, icmp))
            checks.append(
                RouteCheck(
                    carrier, target, paths.route_interval, paths.timeout, table, tracer, route_fams
                )
            )
    return checks
