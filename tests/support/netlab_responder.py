"""Userspace ICMP echo responder for the network-namespace lab (this kernel has no netem).

Runs inside a namespace whose kernel ignores echoes (net.ipv4.icmp_echo_ignore_all=1) and
answers each echo request after ``delay`` +- uniform ``jitter`` seconds, or drops it with
probability ``loss``; a seeded RNG makes the drop and delay sequence reproducible. Every
echo is logged as one line, the ground truth that tests and benchmarks compare against:

    <source> <ident> <seq> <received_ns> replied|dropped <applied_delay_ns>

``applied_delay_ns`` runs from the kernel's receive timestamp of the request to just after
the reply left, so it is the delay actually applied, scheduling lateness included.
With ``--tcp-port`` it also accepts (and closes) TCP connections on that port. It imports
nothing from the exporter on purpose: the ground truth shares no code with the prober.

    python tests/support/netlab_responder.py --delay 0.15 --jitter 0.005 --loss 0.001 --seed 1 \\
        --log /tmp/echoes.log [--tcp-port 8443]
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)


def from_address(addr: bytes) -> list[tuple[int, int, bytes]]:
    """sendmsg ancillary data that makes the reply leave from ``addr`` (4 bytes), as a
    kernel's own echo reply does: from the address that was pinged, whichever interface
    the reply leaves by (``struct in_pktinfo``: ifindex, spec_dst, addr)."""
    return [(socket.IPPROTO_IP, IP_PKTINFO, struct.pack("@I4s4s", 0, addr, bytes(4)))]


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delay", type=float, required=True, help="seconds")
    ap.add_argument("--jitter", type=float, default=0.0, help="+- seconds, uniform")
    ap.add_argument("--loss", type=float, default=0.0, help="drop probability 0..1")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", required=True)
    ap.add_argument("--tcp-port", type=int)
    args = ap.parse_args(argv)
    with contextlib.suppress(PermissionError):  # real time where allowed: netlab.py says why
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    if args.jitter > args.delay:
        ap.error("jitter must not exceed delay")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    rng = random.Random(args.seed)

    icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    icmp.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    icmp.setblocking(False)
    readers: list[socket.socket] = [icmp]
    listener = None
    if args.tcp_port:
        listener = socket.create_server(("0.0.0.0", args.tcp_port), backlog=512)
        listener.setblocking(False)
        readers.append(listener)
    # due, n, reply, dst, the address pinged, rx_ns, key
    pending: list[tuple[float, int, bytes, str, bytes, int, str]] = []
    n = 0
    with open(args.log, "a", buffering=1) as log:
        print("ready", flush=True)
        while True:
            timeout = max(0.0, pending[0][0] - time.monotonic()) if pending else None
            ready, _, _ = select.select(readers, [], [], timeout)
            if listener is not None and listener in ready:
                try:
                    conn, _ = listener.accept()
                    conn.close()
                except BlockingIOError:
                    pass
            while icmp in ready:
                try:
                    data, ancdata, _, src = icmp.recvmsg(2048, 64)
                except BlockingIOError:
                    break
                now_mono, now_wall = time.monotonic(), time.time_ns()
                rx_ns = now_wall
                for level, kind, value in ancdata:
                    if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                        sec, nsec = struct.unpack_from("@qq", value)
                        rx_ns = sec * 1_000_000_000 + nsec
                echo = data[(data[0] & 0x0F) * 4 :]
                if len(echo) < 8 or echo[0] != 8:
                    continue
                ident, seq = struct.unpack_from("!HH", echo, 4)
                key = f"{src[0]} {ident} {seq} {rx_ns}"
                if rng.random() < args.loss:
                    log.write(f"{key} dropped 0\n")
                    continue
                delay = args.delay + rng.uniform(-args.jitter, args.jitter)
                reply = bytearray(echo)
                reply[0] = 0
                reply[2:4] = b"\0\0"
                struct.pack_into("!H", reply, 2, checksum(bytes(reply)))
                # Due relative to the kernel's receive time, not to when we got round to it.
                due = now_mono - (now_wall - rx_ns) / 1e9 + delay
                n += 1
                pinged = data[16:20]
                heapq.heappush(pending, (due, n, bytes(reply), src[0], pinged, rx_ns, key))
            now = time.monotonic()
            while pending and pending[0][0] <= now:
                _, _, reply_bytes, dst, pinged, rx_ns, key = heapq.heappop(pending)
                icmp.sendmsg([reply_bytes], from_address(pinged), 0, (dst, 0))
                log.write(f"{key} replied {time.time_ns() - rx_ns}\n")


if __name__ == "__main__":
    raise SystemExit(main())
