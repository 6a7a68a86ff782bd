"""Userspace TCP delay proxy for the scenario lab (this kernel has no netem qdisc).

Listens on one port and relays every connection to one upstream address. Each direction's
data is held ``delay / 2`` +- uniform ``jitter / 2`` seconds, so a request and its answer
cross one round trip of ``delay`` +- ``jitter``: the same RTT the ICMP responder of the
carrier gives its echoes. Within a direction the data keeps its order (a chunk is never
released before the one read before it), as TCP would deliver it. Loss is not done here:
nftables drops packets on the listening port, so the kernel's retransmissions are real.

``--stall S --stall-after N`` holds the N-th chunk answering each burst of client data for S
more seconds: a gap in the middle of a streamed answer that the engine never saw (a
middlebox or a congested last mile), without parsing HTTP.

It imports nothing from the exporter on purpose: the lab's ground truth shares no code with
what it measures.

    python tests/support/lab/delay_proxy.py --listen 0.0.0.0:8000 --upstream 198.18.20.2:8800 \\
        --delay 0.1 --jitter 0.01 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
from dataclasses import dataclass

READ_SIZE = 64 * 1024


@dataclass
class Shape:
    delay: float  # one direction, seconds
    jitter: float  # one direction, +- seconds
    stall: float = 0.0
    stall_after: int = 3


@dataclass
class Conn:
    """State both directions of one connection share: chunks answered since the client
    last sent data (the stall counts answers, not connections)."""

    answered: int = 0


async def relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    shape: Shape,
    rng: random.Random,
    conn: Conn,
    downstream: bool,
) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def pull() -> None:
        last = 0.0
        while True:
            try:
                data = await reader.read(READ_SIZE)
            except (ConnectionError, OSError):
                data = b""
            due = max(last, loop.time() + shape.delay + rng.uniform(-shape.jitter, shape.jitter))
            if data and downstream and shape.stall > 0:
                conn.answered += 1
                if conn.answered == shape.stall_after:
                    due += shape.stall
            elif data:
                conn.answered = 0
            last = due
            queue.put_nowait((due, data))
            if not data:
                return

    async def push() -> None:
        while True:
            due, data = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:  # EOF, delayed like the data before it: pass the half-close on
                with contextlib.suppress(OSError):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    puller = asyncio.create_task(pull())
    try:
        await push()
    finally:
        puller.cancel()


async def serve(listen: tuple[str, int], upstream: tuple[str, int], shape: Shape,
                seed: int) -> None:
    rng = random.Random(seed)

    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            u_reader, u_writer = await asyncio.open_connection(*upstream)
        except OSError:
            c_writer.close()
            return
        conn = Conn()
        tasks = [
            asyncio.create_task(relay(c_reader, u_writer, shape, rng, conn, downstream=False)),
            asyncio.create_task(relay(u_reader, c_writer, shape, rng, conn, downstream=True)),
        ]
        try:
            # Either side resetting ends both; a clean half-close waits for the other half.
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in pending:
                task.cancel()
            for task in done:  # a reset peer is how connections end here, not an error
                if not task.cancelled():
                    task.exception()
        except asyncio.CancelledError:
            for task in tasks:  # shutting down: end quietly, the process is exiting
                task.cancel()
        finally:
            for w in (c_writer, u_writer):
                w.close()

    server = await asyncio.start_server(handle, *listen, backlog=512, reuse_address=True)
    stop = asyncio.Event()
    # SIGTERM ends the loop from inside it, so open relays are cancelled quietly.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    async with server:
        await stop.wait()


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", type=address, required=True, help="host:port")
    ap.add_argument("--upstream", type=address, required=True, help="host:port")
    ap.add_argument("--delay", type=float, default=0.0, help="round trip, seconds")
    ap.add_argument("--jitter", type=float, default=0.0, help="+- seconds of the round trip")
    ap.add_argument("--stall", type=float, default=0.0, help="seconds")
    ap.add_argument("--stall-after", type=int, default=3, help="chunks into each answer")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    with contextlib.suppress(PermissionError):  # real time where allowed: netlab.py says why
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    if args.jitter > args.delay:
        ap.error("jitter must not exceed delay")
    shape = Shape(args.delay / 2, args.jitter / 2, args.stall, args.stall_after)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen, args.upstream, shape, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
