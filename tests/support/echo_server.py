"""A hostile OpenAI-compatible server for the secret tests: it echoes whatever credentials
reach it back into its error replies (an Authorization header, the query string), the way
a misbehaving gateway leaks them.

    python -m tests.support.echo_server PORT
"""

from __future__ import annotations

import json
import sys

from aiohttp import web


def _leak(request: web.Request) -> str:
    return f"auth={request.headers.get('Authorization', '')} query={request.query_string}"


async def chat(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    event = {"error": {"message": _leak(request), "type": _leak(request),
                       "code": _leak(request)}}
    await resp.write(f"data: {json.dumps(event)}\n\n".encode())
    await resp.write_eof()
    return resp


async def metrics(request: web.Request) -> web.Response:
    return web.Response(status=500, text=_leak(request))


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", lambda _: web.Response(text="ok"))  # type: ignore[arg-type,return-value]
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)


if __name__ == "__main__":
    main()
