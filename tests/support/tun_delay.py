"""Delay every IP packet between two TUN devices: a path with a round trip the kernels'
TCP stacks measure (the lab has no netem qdisc, and a TCP proxy would end the connection
at the proxy, so the server's tcp_info would see the proxy's RTT, not the path's).

    python tun_delay.py --a lltunA --b lltunB --delay 0.06

creates the two devices in the namespace it runs in, prints ``ready``, then relays: what
the stack sends out of one is written into the other ``delay / 2`` later, both ways (a
round trip of ``delay``), in order and without a rate limit. Move a device to another
namespace (``ip link set lltunA netns NS``) after ``ready``; its file stays this relay's.
Stopped by SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import heapq
import itertools
import os
import select
import struct
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--delay", type=float, required=True, help="round trip, seconds")
    args = parser.parse_args()
    with contextlib.suppress(PermissionError):  # real time where allowed: netlab.py says why
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    a, b = open_tun(args.a), open_tun(args.b)
    peer = {a: b, b: a}
    half = args.delay / 2
    queue: list[tuple[float, int, int, bytes]] = []  # (due, order, out fd, packet)
    order = itertools.count()
    print("ready", flush=True)
    while True:
        wait = max(0.0, queue[0][0] - time.monotonic()) if queue else None
        readable, _, _ = select.select([a, b], [], [], wait)
        now = time.monotonic()
        for fd in readable:
            while True:
                try:
                    packet = os.read(fd, 65536)
                except BlockingIOError:
                    break
                heapq.heappush(queue, (now + half, next(order), peer[fd], packet))
        while queue and queue[0][0] <= time.monotonic():
            _, _, out, packet = heapq.heappop(queue)
            with contextlib.suppress(OSError):  # a device down or moving: lost, as on a wire
                os.write(out, packet)


if __name__ == "__main__":
    main()
