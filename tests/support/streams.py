"""Token-stream-like TCP traffic for the clients lab: a server writing to every connection it
accepted, and clients reading it.

    python streams.py serve --port 8000 --chunk 8192 --period 0.02
    python streams.py read --host 198.18.1.1 --port 8000 --connections 4

``serve`` writes ``chunk`` bytes to each connection every ``period`` s (app-limited, like
an engine streaming tokens, but enough segments for a loss ratio); ``read`` opens the
connections and reads, asking for an immediate ACK after each read (TCP_QUICKACK), so the
server's RTT samples carry no delayed-ACK wait. Both print ``ready`` and run until SIGTERM.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import time


def serve(port: int, chunk: int, period: float) -> None:
    listener = socket.create_server(("0.0.0.0", port), backlog=128)
    listener.setblocking(False)
    conns: list[socket.socket] = []
    data = b"x" * chunk
    print("ready", flush=True)
    due = time.monotonic()
    while True:
        while True:
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                break
            conn.setblocking(False)
            conns.append(conn)
        for conn in list(conns):
            try:
                conn.send(data)  # what does not fit the send buffer is skipped, not queued
            except BlockingIOError:
                pass
            except OSError:
                conns.remove(conn)
                conn.close()
        due += period
        time.sleep(max(0.0, due - time.monotonic()))


def read(host: str, port: int, connections: int) -> None:
    sel = selectors.DefaultSelector()
    for _ in range(connections):
        sock = socket.create_connection((host, port), timeout=10)
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            conn = key.fileobj
            assert isinstance(conn, socket.socket)
            if not conn.recv(1 << 20):
                sel.unregister(conn)
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["serve", "read"])
    parser.add_argument("--host", default="")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunk", type=int, default=8192)
    parser.add_argument("--period", type=float, default=0.02)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    if args.mode == "serve":
        serve(args.port, args.chunk, args.period)
    else:
        read(args.host, args.port, args.connections)


if __name__ == "__main__":
    main()
