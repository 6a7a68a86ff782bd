"""Route check: a traceroute per target, its hops classified by the CIDR route table.

The trace sends UDP probes with rising TTL and reads the routers' ICMP answers from the
socket's error queue (IP_RECVERR, as tracepath does), so it needs no privilege at all. It
blocks, so it runs on a worker thread: ``paths.route_parallelism`` threads per paths section
run that many traces at once, and a trace still queued when its check times out is dropped
rather than run late (a late round is counted and logged, see ``Tracer``). Only the class,
the hop count and a change counter are exported: hop addresses never become labels.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import select
import socket
import statistics
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from exporter import metrics
from exporter.checks.base import Check
from exporter.checks.batch import Batch, Ledger, Named
from exporter.checks.path.routes import UNKNOWN, RouteTable
from exporter.config.models import PathTarget

log = logging.getLogger("exporter.route")

MAX_HOPS = 30
#: Probes per TTL: a hop that drops one answer (routers rate-limit ICMP) is still seen,
#: so one lost answer does not flip GT to GIA and count a route change.
QUERIES = 2
#: TTLs probed at once. A wave ends when every probe is answered or its timeout passes.
WAVE = 8
#: traceroute(8)'s base port; each (ttl, query) gets its own port to match the answers.
BASE_PORT = 33434
#: Pause between two traces. Routers and targets rate-limit the ICMP errors they send to one
#: address (Linux: a burst of 6, then 1 per second), and a trace spends QUERIES of them at
#: every hop: back to back, the next trace would find them spent and lose hops, or see the
#: target answer only a probe with a higher TTL than its distance.
TRACE_GAP = 2.0

# Linux <linux/errqueue.h>, <linux/in.h>; Python's socket module lacks some of them.
IP_RECVERR = getattr(socket, "IP_RECVERR", 11)
SO_EE_ORIGIN_ICMP = 2
ICMP_DEST_UNREACH = 3
ICMP_TIME_EXCEEDED = 11
_EE = struct.Struct("=IBBBBII")  # struct sock_extended_err; the offender sockaddr follows


@dataclass(frozen=True)
class Trace:
    hops: dict[int, frozenset[str]]  # ttl -> addresses that answered at that ttl
    reached: int | None  # ttl at which the target itself answered


async def resolve_ipv4(host: str) -> str:
    """The first IPv4 address of ``host`` (a literal is returned as is)."""
    try:
        if ipaddress.ip_address(host).version == 4:
            return host
        raise OSError(f"{host}: only IPv4 targets are supported")
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, None, family=socket.AF_INET, type=socket.SOCK_DGRAM)
    return str(infos[0][4][0])


def udp_trace(
    addr: str, timeout: float, max_hops: int = MAX_HOPS, wave: int = WAVE, queries: int = QUERIES
) -> Trace:
    """Blocking traceroute to the IPv4 ``addr``; each wave of TTLs waits up to ``timeout``."""
    hops: dict[int, set[str]] = {}
    ttl_of: dict[int, int] = {}  # destination port -> ttl
    answered: set[int] = set()
    reached: int | None = None
    stop = False

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        sock.setblocking(False)
        poller = select.poll()
        poller.register(sock, select.POLLERR)

        def drain() -> None:
            nonlocal reached, stop
            while True:
                try:
                    _, ancdata, _, dest = sock.recvmsg(512, 512, socket.MSG_ERRQUEUE)
                except (BlockingIOError, InterruptedError):
                    return
                ttl = ttl_of.get(dest[1])
                for level, kind, data in ancdata:
                    if ttl is None or level != socket.IPPROTO_IP or kind != IP_RECVERR:
                        continue
                    _, origin, icmp_type, _, _, _, _ = _EE.unpack_from(data)
                    if origin != SO_EE_ORIGIN_ICMP or len(data) < _EE.size + 8:
                        continue
                    offender = socket.inet_ntoa(data[_EE.size + 4 : _EE.size + 8])
                    hops.setdefault(ttl, set()).add(offender)
                    answered.add(dest[1])
                    if icmp_type == ICMP_DEST_UNREACH:
                        # The path ends here: the target's port unreachable, or a router
                        # with no route; higher TTLs would only get the same answer.
                        stop = True
                        if offender == addr:
                            reached = ttl if reached is None else min(reached, ttl)

        def send(port: int) -> None:
            for _ in range(3):
                try:
                    sock.sendto(b"", (addr, port))
                    return
                except OSError:
                    # A queued ICMP error fails the next send (sk_err); read it, send again.
                    drain()

        first = 1
        while first <= max_hops and not stop:
            ports = []
            for ttl in range(first, min(first + wave, max_hops + 1)):
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
                for q in range(queries):
                    port = BASE_PORT + (ttl - 1) * queries + q
                    ttl_of[port] = ttl
                    ports.append(port)
                    send(port)
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                if all(p in answered for p in ports):
                    break
                if reached is not None and all(t in hops for t in range(1, reached)):
                    break
                if poller.poll(left * 1000):
                    drain()
                    # An error not from the queue would keep poll() returning at once.
                    sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            first += wave
    return Trace({ttl: frozenset(a) for ttl, a in sorted(hops.items())}, reached)


class Tracer:
    """Runs a section's traces on ``parallelism`` worker threads, and keeps count of rounds.

    Each worker pauses ``gap`` between its own traces. A *round* is every target traced
    once; it starts with the first trace after the last round ended. A round still open
    ``route_interval`` after it started is late: counted, and logged once with what it
    would take (the scheduler then drops the traces still queued when their check times
    out, so without this the tail targets would just never be traced).
    """

    def __init__(
        self, parallelism: int = 1, route_interval: float = 600.0, gap: float = TRACE_GAP
    ) -> None:
        self.parallelism = parallelism
        self.route_interval = route_interval
        # The section's own series; the first route check registered publishes them.
        self._own = Ledger()
        self._rounds_late = self._own.counter(metrics.PATH_ROUTE_ROUNDS_LATE)
        self._round = self._own.gauge(metrics.PATH_ROUTE_ROUND_DURATION)
        self._pool: ThreadPoolExecutor | None = None
        self._gap = gap
        self._local = threading.local()
        self._guard = threading.Lock()
        self._addr_locks: dict[str, threading.Lock] = {}
        self._addr_last_end: dict[str, float] = {}
        self._targets: set[str] = set()
        self._traced: set[str] = set()
        self._round_start: float | None = None
        self._late_timer: asyncio.TimerHandle | None = None
        self._durations: list[float] = []  # of this round's traces, gap included
        self._warned = False

    def register(self, target: str) -> bool:
        """Adds ``target`` to the rounds; True for the first, which publishes ``batch()``."""
        self._targets.add(target)
        return len(self._targets) == 1

    def batch(self) -> Batch:
        return self._own.batch()

    def _paced(self, addr: str, timeout: float) -> tuple[Trace, float]:
        # One trace at a time per address, the gap apart: the destination answers the last
        # probe with a port-unreachable, and kernels rate-limit those per peer (Linux: one
        # a second after a small burst), so two traces of one host at once (a TCP and an
        # ICMP path to the same server) would each lose answers and end "not reached".
        with self._guard:
            lock = self._addr_locks.setdefault(addr, threading.Lock())
        with lock:
            last_end = max(getattr(self._local, "last_end", -self._gap),
                           self._addr_last_end.get(addr, -self._gap))
            time.sleep(max(0.0, last_end + self._gap - time.monotonic()))
            started = time.monotonic()
            try:
                return udp_trace(addr, timeout), time.monotonic() - started + self._gap
            finally:
                self._local.last_end = self._addr_last_end[addr] = time.monotonic()

    async def trace(self, addr: str, timeout: float, target: str = "") -> Trace:
        # Created on first use, from the event loop's thread, so the workers are born in the
        # same network namespace as the loop (the test lab relies on this).
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.parallelism, thread_name_prefix="traceroute")
        loop = asyncio.get_running_loop()
        if self._round_start is None:
            self._round_start = loop.time()
            self._late_timer = loop.call_later(self.route_interval, self._late)
        try:
            trace, took = await loop.run_in_executor(self._pool, self._paced, addr, timeout)
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._done(target, loop.time(), None)
            raise
        self._done(target, loop.time(), took)
        return trace

    def skipped(self, target: str) -> None:
        """``target`` will not be traced this round (its host did not resolve)."""
        self._done(target, asyncio.get_running_loop().time(), None)

    def _done(self, target: str, now: float, took: float | None) -> None:
        self._traced.add(target)
        if took is not None:
            self._durations.append(took)
        if self._round_start is None or not self._traced >= self._targets:
            return
        self._round.set(now - self._round_start)
        if self._late_timer is not None:
            self._late_timer.cancel()
        if self._warned and now - self._round_start <= self.route_interval:
            log.info("traceroute rounds finish within route_interval again")
            self._warned = False
        self._round_start, self._late_timer = None, None
        self._traced.clear()
        self._durations.clear()

    def _late(self) -> None:
        self._rounds_late.inc()
        mean = statistics.fmean(self._durations) if self._durations else self._gap
        targets = len(self._targets)
        needed = math.ceil(targets / self.parallelism) * mean
        enough = math.ceil(targets * mean / (self.route_interval * 0.8))
        if not self._warned:
            log.warning(
                "traceroute round not done within route_interval",
                extra={
                    "traced": len(self._traced & self._targets),
                    "targets": targets,
                    "route_interval": self.route_interval,
                    "route_parallelism": self.parallelism,
                    "mean_trace_seconds": round(mean, 2),
                    "round_needs_seconds": round(needed),
                    "hint": f"raise paths.route_parallelism to {enough} or paths.route_interval"
                    f" to {math.ceil(needed * 1.25)}s, or trace fewer targets",
                },
            )
            self._warned = True

    def close(self) -> None:
        if self._late_timer is not None:
            self._late_timer.cancel()
            self._late_timer = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class RouteCheck(Check):
    kind = "route"

    def __init__(
        self,
        carrier: str,
        target: PathTarget,
        interval: float,
        probe_timeout: float,
        table: RouteTable,
        tracer: Tracer,
    ) -> None:
        # A queued trace waits behind the others, so the run may take up to its interval.
        super().__init__(f"{carrier}/{target.name}", interval, interval)
        self.carrier = carrier
        self.host = target.host
        self._probe_timeout = probe_timeout
        self._table = table
        self._tracer = tracer
        self._publishes_tracer = tracer.register(self.name)
        self._labels: Named = {"carrier": carrier, "target": target.name}
        self._own = Ledger()
        self._changes = self._own.counter(metrics.PATH_ROUTE_CHANGES, self._labels)
        self._shown: str | None = None  # route_class of the info series now exported
        self._known: str | None = None  # last class from a trace that saw hops

    def describe(self) -> str:
        return f"udp traceroute to {self.host}, {len(self._table.rules)} route rules"

    @property
    def route_class(self) -> str | None:
        return self._shown

    async def run(self) -> None:
        try:
            addr = await resolve_ipv4(self.host)
        except OSError:
            self._tracer.skipped(self.name)  # this round is not waiting for it
            raise
        trace = await self._tracer.trace(addr, self._probe_timeout, self.name)
        new = self._table.classify(a for hop in trace.hops.values() for a in hop)
        own = self._own
        if new != self._shown:
            if self._shown is not None:
                own.remove(metrics.PATH_ROUTE_INFO, {**self._labels, "route_class": self._shown})
            own.gauge(metrics.PATH_ROUTE_INFO, {**self._labels, "route_class": new}).set(1)
            self._shown = new
        if trace.reached is not None:
            own.gauge(metrics.PATH_HOPS, self._labels).set(trace.reached)
        else:
            own.remove(metrics.PATH_HOPS, self._labels)  # absent, not zero, while unknown
        log.debug(
            "traceroute",
            extra={"check": self.name, "route_class": new, "hops": _render(trace)},
        )
        if new == UNKNOWN:
            raise RuntimeError(f"no hop answered a traceroute to {addr}")
        if self._known is not None and new != self._known:
            self._changes.inc()
            log.info(
                "route class changed",
                extra={"check": self.name, "old": self._known, "new": new},
            )
        self._known = new

    def batch(self) -> Batch:
        mine = self._own.batch()
        return mine + self._tracer.batch() if self._publishes_tracer else mine

    async def close(self) -> None:
        self._tracer.close()


def _render(trace: Trace) -> str:
    return " ".join(f"{ttl}:{','.join(sorted(a))}" for ttl, a in trace.hops.items())
