"""The TCP_INFO reader on real loopback connections of this kernel."""

from __future__ import annotations

import socket
import struct
import sys
import threading
from collections.abc import Iterator

import pytest

from exporter.probing import tcpinfo
from exporter.probing.tcpinfo import Connections, TcpInfo

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="TCP_INFO is Linux's")


class _Protocol:
    """Stands for the key the client uses: aiohttp's protocol object of the connection."""


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected loopback TCP pair: (client, server side)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    try:
        yield client, server
    finally:
        client.close()
        server.close()


def exchange(client: socket.socket, server: socket.socket, chunks: int, size: int) -> None:
    """The client sends a request; the server answers with ``chunks`` writes of ``size``."""
    client.sendall(b"GET\n")
    assert server.recv(16) == b"GET\n"

    def answer() -> None:
        for _ in range(chunks):
            server.sendall(b"x" * size)

    writer = threading.Thread(target=answer)
    writer.start()
    got = 0
    while got < chunks * size:
        got += len(client.recv(65536))
    writer.join()


def test_reads_a_live_connection(pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = pair
    before = tcpinfo.read(client)
    assert before is not None
    exchange(client, server, chunks=20, size=100)
    after = tcpinfo.read(client)
    assert after is not None
    # Loopback: the kernel's RTT is microseconds, never zero once a sample exists, and its
    # floor is at most the smoothed value.
    assert after.rtt is not None and 0 < after.rtt < 0.05
    assert after.min_rtt is not None and 0 < after.min_rtt <= after.rtt
    assert after.rttvar is not None and after.rttvar >= 0
    assert after.total_retrans == 0  # nothing is lost on lo
    d = tcpinfo.delta(before, after)
    # The request is one data segment out; the rest are ACKs of what came in.
    assert d.segs_out is not None and d.segs_out >= 1
    assert d.data_segs_in is not None and 1 <= d.data_segs_in <= 20
    assert d.retransmitted == 0 and d.out_of_order == 0


def test_the_server_side_counts_the_data_it_sent(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, server = pair
    before = tcpinfo.read(server)
    assert before is not None
    exchange(client, server, chunks=5, size=50_000)
    after = tcpinfo.read(server)
    assert after is not None and after.segs_out is not None and before.segs_out is not None
    # 250 kB left the server; loopback's MSS is ~65 kB, so at least 4 segments.
    assert after.segs_out - before.segs_out >= 4


def test_shorter_struct_of_an_older_kernel(pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = pair
    exchange(client, server, chunks=2, size=10)
    raw = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, tcpinfo.REQUEST_BYTES)
    assert len(raw) >= 228, "this kernel has tcpi_rcv_ooopack (5.4+)"
    full = tcpinfo.parse(raw)
    # 104 bytes ends after tcpi_total_retrans (2.6.33); 152 after tcpi_min_rtt (4.6).
    old = tcpinfo.parse(raw[:104])
    assert (old.rtt, old.rttvar, old.total_retrans) == (full.rtt, full.rttvar, full.total_retrans)
    assert old.segs_out is None and old.min_rtt is None and old.rcv_ooopack is None
    mid = tcpinfo.parse(raw[:152])
    assert mid.segs_out == full.segs_out and mid.min_rtt == full.min_rtt
    assert mid.data_segs_in is None
    assert tcpinfo.parse(b"") == TcpInfo()
    # A delta with a field the kernel lacks is None for that field only.
    d = tcpinfo.delta(tcpinfo.ZERO, old)
    assert d.retransmitted == 0 and d.segs_out is None


def test_offsets_are_the_headers() -> None:
    """The named offsets read the bytes at those offsets of struct tcp_info."""
    raw = bytearray(232)
    for offset, fmt in tcpinfo.FIELDS.values():
        struct.pack_into(fmt, raw, offset, 1000 + offset)
    info = tcpinfo.parse(bytes(raw))
    assert info.rtt == pytest.approx((1000 + 68) * 1e-6)
    assert info.rttvar == pytest.approx((1000 + 72) * 1e-6)
    assert info.total_retrans == 1000 + 100
    assert info.segs_out == 1000 + 136
    assert info.min_rtt == pytest.approx((1000 + 148) * 1e-6)
    assert info.data_segs_in == 1000 + 152
    assert info.rcv_ooopack == 1000 + 224
    # No RTT sample yet: the kernel's ~0U minimum is no minimum.
    struct.pack_into("=I", raw, 148, 0xFFFFFFFF)
    assert tcpinfo.parse(bytes(raw)).min_rtt is None


def test_counters_wrap_at_32_bits() -> None:
    d = tcpinfo.delta(TcpInfo(segs_out=2**32 - 2, total_retrans=5),
                      TcpInfo(segs_out=3, total_retrans=5))
    assert d.segs_out == 5 and d.retransmitted == 0


def test_requests_on_a_reused_connection_add_up_to_the_connection(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Each request is measured from where the previous one on the socket ended, so the
    deltas of all requests are the connection's counters: nothing counted twice or lost."""
    client, server = pair
    book = Connections()
    key = _Protocol()
    totals = {"segs_out": 0, "data_segs_in": 0}
    for i in range(3):
        watch = book.begin(key, client, new=i == 0)
        assert watch is not None
        exchange(client, server, chunks=3, size=1000)
        d = watch.end()
        assert d is not None and d.segs_out is not None and d.data_segs_in is not None
        totals["segs_out"] += d.segs_out
        totals["data_segs_in"] += d.data_segs_in
    final = tcpinfo.read(client)
    assert final is not None
    assert totals == {"segs_out": final.segs_out, "data_segs_in": final.data_segs_in}


def test_a_closed_or_foreign_socket_reads_as_none() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.close()
    assert tcpinfo.read(sock) is None
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        assert tcpinfo.read(udp) is None
    finally:
        udp.close()
    assert tcpinfo.read(None) is None
    assert Connections().begin(_Protocol(), None, new=True) is None
    # A key without weak references is simply not remembered.
    with socket.create_server(("127.0.0.1", 0)) as listener, \
            socket.create_connection(listener.getsockname()) as client:
        watch = Connections().begin(object(), client, new=True)
        assert watch is not None and watch.end() is not None
