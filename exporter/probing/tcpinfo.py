"""The kernel's own statistics of a probe's TCP connection (Linux ``TCP_INFO``).

``getsockopt(IPPROTO_TCP, TCP_INFO)`` copies ``struct tcp_info`` (include/uapi/linux/tcp.h)
up to the length asked for and returns what the running kernel has; an older kernel returns
a shorter struct, so every field is read only where the returned bytes reach it, and is
``None`` beyond (absent, never 0). Offsets are those of ``struct tcp_info`` on every Linux
ABI (the struct has fixed-size members only; checked with offsetof() against the headers of
Linux 6.x): the counters are ``__u32`` and wrap, so a delta is taken modulo 2**32.

What a probe reads and why:

* ``tcpi_rtt``, ``tcpi_rttvar``, ``tcpi_min_rtt`` (microseconds): the kernel's smoothed RTT,
  its mean deviation and the lowest RTT seen on the connection: the network as the stream's
  own packets measured it, not as an ICMP echo to some router did.
* ``tcpi_segs_out`` and ``tcpi_total_retrans``: segments this end sent and retransmitted
  (the request, the ACKs of the stream), counted from the end of the connection's
  handshake: a SYN retransmit is the setup's, which its phase times.
* ``tcpi_data_segs_in`` and ``tcpi_rcv_ooopack``: data segments received and those that
  arrived out of order. A stream's data flows from the server, so a lost segment of it is
  retransmitted by the server and counted there; what the client sees of that loss is the
  segments after the gap arriving out of order until the retransmission fills it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import weakref
from dataclasses import dataclass
from typing import Protocol

#: Bytes asked for: up to tcpi_rcv_ooopack (Linux 5.4) and a little beyond, so a newer
#: kernel's extra fields cost nothing and an older kernel's shorter struct still parses.
REQUEST_BYTES = 256

# (offset, struct format) of each field read, in struct tcp_info (linux/tcp.h), with the
# kernel version that added it.
_U32 = "=I"
FIELDS: dict[str, tuple[int, str]] = {
    "rtt": (68, _U32),  # tcpi_rtt, usec (2.6)
    "rttvar": (72, _U32),  # tcpi_rttvar, usec (2.6)
    "total_retrans": (100, _U32),  # tcpi_total_retrans (2.6.33)
    "segs_out": (136, _U32),  # tcpi_segs_out, RFC 4898 tcpEStatsPerfSegsOut (4.2)
    "min_rtt": (148, _U32),  # tcpi_min_rtt, usec (4.6)
    "data_segs_in": (152, _U32),  # tcpi_data_segs_in, RFC 4898 tcpEStatsDataSegsIn (4.6)
    "rcv_ooopack": (224, _U32),  # tcpi_rcv_ooopack, out-of-order packets received (5.4)
}
_WRAP = 1 << 32
_USEC = 1e-6


class _Socket(Protocol):
    def getsockopt(self, level: int, option: int, buflen: int, /) -> bytes: ...


@dataclass(frozen=True)
class TcpInfo:
    """One reading of a connection's counters; seconds for times, None where the kernel's
    struct stops short of the field."""

    rtt: float | None = None
    rttvar: float | None = None
    min_rtt: float | None = None
    total_retrans: int | None = None
    segs_out: int | None = None
    data_segs_in: int | None = None
    rcv_ooopack: int | None = None


#: The counters of a connection before its first segment: what a new connection's first
#: request is measured from where its handshake was not read (``Connections.opened``).
ZERO = TcpInfo(total_retrans=0, segs_out=0, data_segs_in=0, rcv_ooopack=0)


def parse(raw: bytes) -> TcpInfo:
    """``struct tcp_info`` as the kernel returned it, however long."""
    values: dict[str, int] = {}
    for name, (offset, fmt) in FIELDS.items():
        end = offset + struct.calcsize(fmt)
        if len(raw) >= end:
            values[name] = struct.unpack_from(fmt, raw, offset)[0]

    def seconds(name: str) -> float | None:
        v = values.get(name)
        return None if v is None else v * _USEC

    # A connection with no RTT sample yet reports min_rtt as ~0U (the kernel's "none").
    min_rtt = values.get("min_rtt")
    return TcpInfo(
        rtt=seconds("rtt"),
        rttvar=seconds("rttvar"),
        min_rtt=None if min_rtt is None or min_rtt == _WRAP - 1 else min_rtt * _USEC,
        total_retrans=values.get("total_retrans"),
        segs_out=values.get("segs_out"),
        data_segs_in=values.get("data_segs_in"),
        rcv_ooopack=values.get("rcv_ooopack"),
    )


def read(sock: _Socket | None) -> TcpInfo | None:
    """The socket's TCP_INFO now; None off Linux, for a socket that is not TCP or is closed."""
    option = getattr(socket, "TCP_INFO", None)
    if sock is None or option is None:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, option, REQUEST_BYTES)
    except (OSError, ValueError):
        return None
    return parse(raw) if raw else None


@dataclass(frozen=True)
class TcpDelta:
    """What one request's stretch of a connection went through: counter deltas between two
    readings, and the RTT figures of the later one."""

    rtt: float | None
    rttvar: float | None
    min_rtt: float | None
    segs_out: int | None
    retransmitted: int | None
    data_segs_in: int | None
    out_of_order: int | None


def _diff(after: int | None, before: int | None) -> int | None:
    if after is None or before is None:
        return None
    return (after - before) % _WRAP


def delta(before: TcpInfo, after: TcpInfo) -> TcpDelta:
    return TcpDelta(
        rtt=after.rtt,
        rttvar=after.rttvar,
        min_rtt=after.min_rtt,
        segs_out=_diff(after.segs_out, before.segs_out),
        retransmitted=_diff(after.total_retrans, before.total_retrans),
        data_segs_in=_diff(after.data_segs_in, before.data_segs_in),
        out_of_order=_diff(after.rcv_ooopack, before.rcv_ooopack),
    )


class Watch:
    """One request on one connection: the reading it is measured from, and the socket."""

    def __init__(self, book: Connections, key: object, sock: _Socket, before: TcpInfo) -> None:
        self._book = book
        self._key = key
        self._sock = sock
        self.before = before
        self._after: TcpInfo | None = None

    def mark(self) -> None:
        """Take the end reading now, if none was taken: called as the response body ends,
        inside the protocol's callback, before the pool can hand the connection to another
        request."""
        if self._after is None:
            self._after = read(self._sock)

    def end(self) -> TcpDelta | None:
        """What changed between the request's start and its end reading (taken now unless
        mark() took it); the end reading becomes the start of the connection's next
        request."""
        self.mark()
        after = self._after
        if after is None:
            return None
        self._book.remember(self._key, after)
        return delta(self.before, after)


class Connections:
    """The last reading of each open connection of a client. A pooled connection serves one
    request after another, so a request is measured from where the previous one on the
    same socket ended (the kernel's counters are per connection, not per request); a new
    connection from ZERO. Keyed weakly by the connection's protocol object, so a closed
    connection's entry goes with it."""

    def __init__(self) -> None:
        self._last: weakref.WeakKeyDictionary[object, TcpInfo] = weakref.WeakKeyDictionary()

    def remember(self, key: object, info: TcpInfo) -> None:
        # A key that takes no weak reference is not remembered: its next request then
        # counts from its own start (begin reads the socket), never from a stale reading.
        with contextlib.suppress(TypeError):
            self._last[key] = info

    def _get(self, key: object) -> TcpInfo | None:
        try:
            return self._last.get(key)
        except TypeError:  # a key that takes no weak reference was never remembered
            return None

    def opened(self, key: object, sock: _Socket | None) -> None:
        """A new connection's reading as its handshake completes: its first request is
        measured from there, so a SYN the network dropped (a second's wait for the kernel's
        retry) is the connection's setup, timed in its phase, not a loss of the stream."""
        info = read(sock) if sock is not None else None
        if info is not None:
            self.remember(key, info)

    def begin(self, key: object, sock: _Socket | None, new: bool) -> Watch | None:
        """Start watching a request on the connection ``key`` (its socket ``sock``)."""
        if sock is None:
            return None
        if new:
            before: TcpInfo | None = self._get(key) or ZERO
        else:
            # A reused connection nobody read before (its previous request failed before
            # its response): from now on, so nothing of another request is counted here.
            before = self._get(key) or read(sock)
        return None if before is None else Watch(self, key, sock, before)
