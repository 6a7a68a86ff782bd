"""Established TCP connections on local ports, with their ``tcp_info``, from the kernel's
netlink ``sock_diag`` (what ``ss -ti sport = :PORT`` reads; no root needed).

A small client of our own rather than pyroute2: pyroute2's ``DiagSocket.get_sock_stats``
sends no ``INET_DIAG_REQ_BYTECODE`` filter (every TCP socket of the namespace comes back,
the exporter's own included) and decodes each reply into NLA objects, while this one asks
the kernel to filter by local port and unpacks only the five ``tcp_info`` fields it needs
(docs/benchmarks.md has what 10,000 connections cost). Blocking: call it on a worker thread.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_ESTABLISHED = 1
INET_DIAG_INFO = 2
INET_DIAG_REQ_BYTECODE = 1
# Bytecode ops (include/uapi/linux/inet_diag.h): >= and <= on the local port, and a jump.
BC_JMP, BC_S_GE, BC_S_LE = 1, 2, 3

_NLMSGHDR = struct.Struct("=IHHII")
# inet_diag_req_v2: family, protocol, ext, pad, states, then a zero inet_diag_sockid.
_REQ = struct.Struct("=BBBxI48x")
_NLATTR = struct.Struct("=HH")
_OP = struct.Struct("=BBH")
# inet_diag_msg up to the sockid's addresses and cookie: family, state, timer, retrans,
# sport (big-endian), dport, src[16], dst[16], if, cookie[8].
_MSG = struct.Struct("=BBBB2s2x16s16s4x8s")
_MSG_LEN = 72
# tcp_info: the app-limited flag byte (7), rtt (68), total_retrans (100), data_segs_out
# (156) and delivery_rate (160); the struct has grown by appending, so older kernels send
# a shorter one and the later fields are then absent.
_APP_LIMITED_AT = 7
_RTT = struct.Struct("=I")
_RTT_AT = 68
_RETRANS_AT = 100
_SEGS_OUT_AT = 156
_RATE = struct.Struct("=Q")
_RATE_AT = 160
_INFO_MIN = _SEGS_OUT_AT + 4
_V4_MAPPED = b"\0" * 10 + b"\xff\xff"


class Connection(NamedTuple):
    """One established connection, as the kernel's counters say now."""

    cookie: bytes  # unique while the network namespace lives: the connection's identity
    port: int  # local (listening) port
    remote: bytes  # 4 bytes for IPv4 (also a v4-mapped IPv6 peer), 16 for IPv6
    rtt: float  # smoothed RTT, seconds
    retransmitted: int  # segments retransmitted since the connection opened
    sent: int  # data segments sent (retransmissions included) since it opened
    delivery_rate: float | None  # bytes per second; None where the kernel predates it
    app_limited: bool  # the delivery rate was limited by the application, not the path


class DiagError(OSError):
    """The kernel refused the dump, or its reply could not be read."""


def port_filter(ports: Sequence[int]) -> bytes:
    """Bytecode accepting a socket whose local port is one of ``ports``: per port a
    ``>= p``, a ``<= p`` and a jump to the end (accept); a failed test falls through to the
    next port, and past the last one (4 bytes beyond the end) means reject."""
    block = 2 * (_OP.size * 2) + _OP.size
    out = bytearray()
    for i, port in enumerate(ports):
        left = (len(ports) - i) * block  # bytes from this block's start to the end
        for j, code in enumerate((BC_S_GE, BC_S_LE)):
            at = j * 2 * _OP.size
            out += _OP.pack(code, 2 * _OP.size, block - at + (4 if i == len(ports) - 1 else 0))
            out += _OP.pack(0, 0, port)
        out += _OP.pack(BC_JMP, _OP.size, left - 2 * 2 * _OP.size)
    return bytes(out)


def request(family: int, ports: Sequence[int], seq: int) -> bytes:
    bytecode = port_filter(ports)
    attr = _NLATTR.pack(_NLATTR.size + len(bytecode), INET_DIAG_REQ_BYTECODE) + bytecode
    body = _REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 1 << TCP_ESTABLISHED)
    length = _NLMSGHDR.size + len(body) + len(attr)
    head = _NLMSGHDR.pack(length, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
    return head + body + attr


def _parse(msg: memoryview) -> Connection | None:
    family, _, _, _, sport, remote, _, cookie = _MSG.unpack_from(msg, 0)
    if family == socket.AF_INET:
        remote = remote[:4]
    elif remote[:12] == _V4_MAPPED:
        remote = remote[12:]
    info: memoryview | None = None
    at, end = _MSG_LEN, len(msg)
    while at + 4 <= end:
        alen, atype = _NLATTR.unpack_from(msg, at)
        if alen < 4:
            break
        if atype == INET_DIAG_INFO:
            info = msg[at + 4 : at + alen]
            break
        at += (alen + 3) & ~3
    if info is None or len(info) < _INFO_MIN:
        return None  # a socket that closed while being dumped, or a kernel older than 4.6
    rate = _RATE.unpack_from(info, _RATE_AT)[0] if len(info) >= _RATE_AT + 8 else None
    return Connection(
        cookie,
        int.from_bytes(sport, "big"),
        remote,
        _RTT.unpack_from(info, _RTT_AT)[0] / 1e6,
        _RTT.unpack_from(info, _RETRANS_AT)[0],
        _RTT.unpack_from(info, _SEGS_OUT_AT)[0],
        None if rate is None else float(rate),
        bool(info[_APP_LIMITED_AT] & 1),
    )


def _dump_family(sock: socket.socket, family: int, ports: Sequence[int], seq: int,
                 buf: bytearray) -> Iterator[Connection]:
    sock.send(request(family, ports, seq))
    view = memoryview(buf)
    while True:
        n = sock.recv_into(buf)
        at = 0
        while at + _NLMSGHDR.size <= n:
            length, mtype, _, mseq, _ = _NLMSGHDR.unpack_from(buf, at)
            if length < _NLMSGHDR.size or at + length > n:
                raise DiagError(f"sock_diag: truncated message ({length} bytes at {at} of {n})")
            if mseq == seq:
                if mtype == NLMSG_DONE:
                    return
                if mtype == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", buf, at + _NLMSGHDR.size)[0]
                    name = errno.errorcode.get(code, str(code))
                    raise DiagError(code, f"sock_diag dump refused: {name}")
                if mtype == SOCK_DIAG_BY_FAMILY:
                    conn = _parse(view[at + _NLMSGHDR.size : at + length])
                    if conn is not None:
                        yield conn
            at += (length + 3) & ~3


def established(ports: Sequence[int], timeout: float) -> Iterator[Connection]:
    """Every established TCP connection (IPv4, then IPv6) whose local port is in ``ports``.

    The kernel walks its socket tables while we read, so a connection that opens or closes
    meanwhile may be missing from this dump; it is in the next one (or closed)."""
    if not hasattr(socket, "AF_NETLINK"):
        raise DiagError("the clients check reads netlink sock_diag, which only Linux has")
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                       NETLINK_SOCK_DIAG) as sock:
        sock.settimeout(timeout)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sock.bind((0, 0))
        buf = bytearray(1 << 16)
        try:
            for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), 1):
                yield from _dump_family(sock, family, ports, seq, buf)
        except TimeoutError:
            raise DiagError(f"sock_diag: no reply within {timeout:g}s") from None
