"""One ICMP echo socket per paths section, shared by every target (smokeping_prober's way).

A socket per target does not scale: every raw ICMP socket on a host receives every ICMP
packet of the host, so N targets read N^2 replies, overflow their receive buffers and
report loss that never happened (91 % at 1000 targets). Here one socket sends the echoes of
all targets and one reader demultiplexes the replies by (source address, sequence): the
sequence counter is the socket's, so two echoes in flight never share one. On a raw socket
the identifier is ours and tells our replies from other programs' (a kernel ICMP_FILTER
passes echo replies only); on a datagram ("ping") socket the kernel rewrites the identifier
to the socket's own and delivers only the replies to it, so the identifier is not checked.

Replies carry kernel receive timestamps (SO_TIMESTAMPNS), so the event loop's delay does
not inflate the RTT. IPv4 only, like the rest of the path checks.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
import socket
import struct
import sys
import time

log = logging.getLogger("exporter.path")

ICMP_ECHO_REPLY = 0
ICMP_ECHO_REQUEST = 8
#: The usual ping payload size, so routers treat our echoes like anyone's.
PAYLOAD = bytes(56)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
# <linux/icmp.h>: a raw ICMP socket's type filter (a set bit drops that type in the kernel).
SOL_RAW = getattr(socket, "SOL_RAW", 255)
ICMP_FILTER = 1
#: Room for a burst of replies from many targets while the loop is busy elsewhere (the
#: kernel caps it at net.core.rmem_max without privilege).
RCVBUF = 4 << 20
_TIMESPEC = struct.Struct("@qq")
_HEADER = struct.Struct("!BBHHH")
ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size)
MODES = ("dgram", "raw")


def kernel_rtt(ancdata: list[tuple[int, int, bytes]], sent_wall: int, measured: float) -> float:
    """The round trip to the kernel's receive timestamp (SO_TIMESTAMPNS in ``ancdata``) from
    ``sent_wall`` (time.time_ns() at the send), else ``measured`` (this thread's clock)."""
    for level, kind, value in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = _TIMESPEC.unpack_from(value)
            kernel: float = (sec * 1_000_000_000 + nsec - sent_wall) / 1e9
            # Wall clocks can step; the kernel time is used only when it is sane.
            if 0 <= kernel <= measured:
                return kernel
    return measured


def _checksum(ident: int, seq: int) -> int:
    # The payload is zeros, so the sum is the header's words alone (RFC 1071).
    total = (ICMP_ECHO_REQUEST << 8) + ident + seq
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def echo_request(ident: int, seq: int) -> bytes:
    return _HEADER.pack(ICMP_ECHO_REQUEST, 0, _checksum(ident, seq), ident, seq) + PAYLOAD


def open_icmp(mode: str) -> socket.socket:
    kind = socket.SOCK_DGRAM if mode == "dgram" else socket.SOCK_RAW
    return socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP)


def detect_icmp_mode(wanted: str = "auto") -> str | None:
    """'dgram' (ping socket), 'raw', or None when none of ``wanted`` is allowed here.

    ``auto`` tries the ping socket first: the kernel hands it only its own replies, where a
    raw socket reads (and filters) every echo reply of the host.
    """
    for mode in MODES if wanted == "auto" else (wanted,):
        try:
            open_icmp(mode).close()
            return mode
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM):
                raise
    return None


def permission_hint(wanted: str = "auto") -> str:
    gid, exe = os.getgid(), os.path.realpath(sys.executable)
    raw = f"`setcap cap_net_raw+ep {exe}` (raw sockets)"
    dgram = (
        '`sysctl -w net.ipv4.ping_group_range="0 2147483647"` (ping sockets for every group;'
        f' "{gid} {gid}" for this process\'s group only)'
    )
    fixes = {"raw": raw, "dgram": dgram}.get(wanted, f"either {raw} or {dgram}")
    return (
        f"no ICMP socket ({wanted}) is allowed, so ICMP path targets report reason=permission"
        f" (TCP targets keep working); fix with {fixes}"
    )


class EchoSocket:
    """The shared socket: sends echoes to any address, resolves each one's future on reply."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._raw = mode == "raw"
        self._sock = open_icmp(mode)
        self._sock.setblocking(False)
        self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        if self._raw:
            # Only echo replies reach us; requests (ours, on loopback), errors, and other
            # types are dropped in the kernel before costing a wakeup.
            dropped = ~(1 << ICMP_ECHO_REPLY) & 0xFFFFFFFF
            self._sock.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("I", dropped))
        self._ident = random.getrandbits(16)
        self._seq = random.getrandbits(16)
        # (address, sequence) -> (future, wall-clock ns and perf_counter s at send)
        self._waiting: dict[tuple[str, int], tuple[asyncio.Future[float], int, float]] = {}
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._sock.fileno(), self._readable)

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    def send(self, addr: str) -> asyncio.Future[float]:
        fut: asyncio.Future[float] = self._loop.create_future()
        seq = self._seq
        for _ in range(0x10000):  # skip a sequence still waiting on this address
            seq = (seq + 1) & 0xFFFF
            if (addr, seq) not in self._waiting:
                break
        else:
            fut.set_exception(OSError(errno.ENOBUFS, "every ICMP sequence is in flight"))
            return fut
        self._seq = seq
        sent_wall, sent_mono = time.time_ns(), time.perf_counter()
        try:
            self._sock.sendto(echo_request(self._ident, seq), (addr, 0))
        except OSError as exc:
            fut.set_exception(exc)
            return fut
        key = (addr, seq)
        self._waiting[key] = (fut, sent_wall, sent_mono)
        fut.add_done_callback(lambda _: self._forget(key, fut))
        return fut

    def _forget(self, key: tuple[str, int], fut: asyncio.Future[float]) -> None:
        entry = self._waiting.get(key)
        if entry is not None and entry[0] is fut:
            del self._waiting[key]

    def _readable(self) -> None:
        while True:
            try:
                data, ancdata, _, src = self._sock.recvmsg(512, ANCILLARY)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue  # an ICMP error reported once on the socket; its echo times out
            now_mono = time.perf_counter()
            if self._raw:
                data = data[(data[0] & 0x0F) * 4 :]
            if len(data) < 8 or data[0] != ICMP_ECHO_REPLY:
                continue
            ident, seq = struct.unpack_from("!HH", data, 4)
            if self._raw and ident != self._ident:
                continue  # another program's ping
            entry = self._waiting.pop((src[0], seq), None)
            if entry is None or entry[0].done():
                continue  # late (its deadline passed), or a duplicate
            fut, sent_wall, sent_mono = entry
            fut.set_result(kernel_rtt(ancdata, sent_wall, now_mono - sent_mono))

    def close(self) -> None:
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for fut, _, _ in list(self._waiting.values()):
            fut.cancel()
        self._waiting.clear()


class IcmpAccess:
    """A section's ICMP: the mode, detected once at the first ICMP burst, and the one
    shared socket, opened then and closed when the last target using it closes."""

    def __init__(self, wanted: str = "auto") -> None:
        self.wanted = wanted
        self._detected = False
        self._mode: str | None = None
        self._socket: EchoSocket | None = None
        self._users = 0

    @property
    def mode(self) -> str | None:
        if not self._detected:
            self._mode = detect_icmp_mode(self.wanted)
            self._detected = True
            if self._mode is None:
                log.error(permission_hint(self.wanted))
            else:
                log.info("ICMP mode detected", extra={"icmp_mode": self._mode})
        return self._mode

    def acquire(self) -> EchoSocket | None:
        """The shared socket (None when no ICMP socket is allowed); release() once done."""
        mode = self.mode
        if mode is None:
            return None
        if self._socket is None:
            self._socket = EchoSocket(mode)
        self._users += 1
        return self._socket

    def release(self) -> None:
        self._users -= 1
        if self._users <= 0 and self._socket is not None:
            self._socket.close()
            self._socket = None
            self._users = 0
