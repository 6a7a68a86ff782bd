"""A hostile OpenAI-compatible endpoint for the probe fault matrix (tests/test_probe_faults.py)
and the bench canary test: one loopback port per fault, so each fault is its own endpoint
(probes sharing an endpoint share its concurrency gate, and a hanging one would hold the
others). Every reply echoes the request's credentials back — the Authorization header and
the query string, at the start of a field so no truncation hides them — the way a
misbehaving gateway leaks them.

    python -m tests.support.hostile_probe PORTS.json

Once every port listens it writes ``{fault: port}`` to PORTS.json (atomically), and serves
``GET /stats`` on each port: ``{fault: requests seen}``. ``refused`` is a port bound but not
listening (the kernel answers its SYNs with a reset); ``garbage-http`` answers with bytes
that are not HTTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

SSE = {"Content-Type": "text/event-stream"}
#: The oversize fault stops after this much, whether or not the client gave up.
OVERSIZE_BYTES = 8 * 1024 * 1024
REFUSED, GARBAGE = "refused", "garbage-http"

Handler = Callable[[web.Request, str], Awaitable[web.StreamResponse]]


def leak(request: web.Request) -> str:
    return f"{request.headers.get('Authorization', '')} {request.query_string}".strip()


def event(obj: object) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def token(text: str = "hi") -> bytes:
    return event({"choices": [{"index": 0, "delta": {"content": text}}]})


async def stream(request: web.Request, *chunks: bytes) -> web.StreamResponse:
    resp = web.StreamResponse(headers={**SSE, "X-Echo": leak(request)})
    await resp.prepare(request)
    for chunk in chunks:
        await resp.write(chunk)
    return resp


async def error_event(request: web.Request, secret: str) -> web.StreamResponse:
    auth = request.headers.get("Authorization", "").partition(" ")[2]  # after "Bearer"
    resp = await stream(request, token(), event(
        {"error": {"message": secret, "type": auth or secret,
                   "code": request.query_string or secret}}))
    await resp.write_eof()
    return resp


def status(code: int, **headers: str) -> Handler:
    async def reply(request: web.Request, secret: str) -> web.StreamResponse:
        body = {"error": {"message": secret, "type": secret, "code": secret}}
        return web.json_response(body, status=code, headers={**headers, "X-Echo": secret})
    return reply


async def redirect_loop(request: web.Request, secret: str) -> web.StreamResponse:
    return web.Response(status=302, headers={"Location": request.path_qs, "X-Echo": secret})


async def reset(request: web.Request, secret: str) -> web.StreamResponse:
    resp = await stream(request, token(secret))
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        # Linger 0: close() sends a TCP reset, not a FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    if request.transport is not None:
        request.transport.abort()
    return resp


async def hang(request: web.Request, secret: str) -> web.StreamResponse:
    await asyncio.Event().wait()  # cancelled when the client hangs up
    raise AssertionError("unreachable")


async def stall(request: web.Request, secret: str) -> web.StreamResponse:
    await stream(request, token(secret))
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def drip(request: web.Request, secret: str) -> web.StreamResponse:
    """Bytes keep coming, never a token: SSE comments (keep-alives), then a field no SSE
    stream has."""
    resp = await stream(request)
    while True:
        await resp.write(f": {secret}\n".encode())
        await asyncio.sleep(0.2)


async def malformed(request: web.Request, secret: str) -> web.StreamResponse:
    resp = await stream(request, token(), f'data: {{"{secret}": [\n\n'.encode(),
                        b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def oversize(request: web.Request, secret: str) -> web.StreamResponse:
    resp = await stream(request)
    chunk = token(secret + " " + "x" * 4000)
    sent = 0
    while sent < OVERSIZE_BYTES:
        await resp.write(chunk)
        sent += len(chunk)
    await resp.write_eof()
    return resp


async def empty(request: web.Request, secret: str) -> web.StreamResponse:
    resp = await stream(request, event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
                        b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def not_sse(request: web.Request, secret: str) -> web.StreamResponse:
    # The query value first: what a stream parser quotes of a bad line is its start.
    query = request.query_string.partition("=")[2]
    return web.Response(text=f"{query}: {secret}\n<html>{secret}</html>\n",
                        content_type="text/html")


#: fault -> handler (refused and garbage-http are served below the HTTP layer)
FAULTS: dict[str, Handler] = {
    "error-event": error_event,
    "http-401": status(401),
    "http-500": status(500),
    "rate-limited": status(429, **{"Retry-After": "3"}),
    "unavailable": status(503, **{"Retry-After": "3"}),
    "redirect-loop": redirect_loop,
    "reset": reset,
    "hang": hang,
    "stall": stall,
    "drip": drip,
    "malformed": malformed,
    "oversize": oversize,
    "empty": empty,
    "not-sse": not_sse,
}
ALL_FAULTS = (*FAULTS, REFUSED, GARBAGE)


async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  seen: Counter[str]) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        seen[GARBAGE] += 1
        auth = next((line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                     if line.lower().startswith(b"authorization:")), b"")
        writer.write(b"HTTP/1.1 200 OK\r\n" + auth + b" no colon in this header\r\n\r\n")
        await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(ports_file: Path) -> None:
    seen: Counter[str] = Counter()
    by_port: dict[int, str] = {}

    async def dispatch(request: web.Request) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        fault = by_port[sockname[1]] if sockname else ""
        seen[fault] += 1
        return await FAULTS[fault](request, leak(request))

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(dict(seen))

    app = web.Application()
    app.router.add_get("/stats", stats)
    app.router.add_route("*", "/{tail:.*}", dispatch)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    ports: dict[str, int] = {}
    for fault in FAULTS:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        ports[fault] = sock.getsockname()[1]
        by_port[ports[fault]] = fault
    server = await asyncio.start_server(lambda r, w: garbage(r, w, seen), "127.0.0.1", 0)
    ports[GARBAGE] = server.sockets[0].getsockname()[1]
    closed = socket.socket()  # bound, never listening: held so no one else takes the port
    closed.bind(("127.0.0.1", 0))
    ports[REFUSED] = closed.getsockname()[1]
    tmp = ports_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(ports))
    os.replace(tmp, ports_file)
    await asyncio.Event().wait()


def main() -> None:
    asyncio.run(serve(Path(sys.argv[1])))


if __name__ == "__main__":
    main()
