"""A hostile "engine" for the engine fault matrix (tests/test_engine_faults.py): each fault is
served at ``/<fault>/metrics`` as a 200 in the Prometheus text format (or, for
``plain-text``, plain text), and every body echoes the request's Authorization header, the
way a misbehaving gateway leaks it (the label bombs into a label value).

    python -m tests.support.hostile_engine PORT

The large bodies are built once at startup, so the server answers as soon as it is up.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from aiohttp import web

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
SUCCESS = "vllm:request_success_total"
TTFT = "vllm:time_to_first_token_seconds"
BOMB = 200_000
LE_BOMB = 150_000


def _lines(template: str, n: int) -> bytes:
    return "".join(template.format(i=i) + "\n" for i in range(n)).encode()


def _echo(auth: str) -> bytes:
    return f'{WAITING}{{engine="0",model_name="{auth}"}} 1\n'.encode()


def _small(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


#: fault -> how to build its body (served after the echo line)
BODIES: dict[str, Callable[[], bytes]] = {
    "engine-values": lambda: _lines(RUNNING + '{{engine="{i}",model_name="m"}} 1', BOMB),
    "finished-reasons": lambda: _lines(
        SUCCESS + '{{engine="0",finished_reason="r{i}",model_name="m"}} 1', BOMB),
    "le-bounds": lambda: _lines(
        TTFT + '_bucket{{engine="0",le="{i}e-3",model_name="m"}} {i}', LE_BOMB) + _small(
        f'{TTFT}_bucket{{engine="0",le="+Inf",model_name="m"}} {LE_BOMB}',
        f'{TTFT}_count{{engine="0",model_name="m"}} {LE_BOMB}',
        f'{TTFT}_sum{{engine="0",model_name="m"}} 12.5'),
    "duplicate": lambda: _small(
        f'{RUNNING}{{engine="0",model_name="m"}} 1', f'{RUNNING}{{engine="1",model_name="m"}} 1',
        f'{RUNNING}{{engine="0",model_name="m"}} 3'),
    "nan-le": lambda: _small(
        f'{TTFT}_bucket{{engine="0",le="0.1",model_name="m"}} 1',
        f'{TTFT}_bucket{{engine="0",le="NaN",model_name="m"}} 2',
        f'{TTFT}_bucket{{engine="0",le="+Inf",model_name="m"}} 2'),
    "non-monotonic": lambda: _small(
        f'{TTFT}_bucket{{engine="0",le="0.1",model_name="m"}} 9',
        f'{TTFT}_bucket{{engine="0",le="0.5",model_name="m"}} 4',
        f'{TTFT}_bucket{{engine="0",le="+Inf",model_name="m"}} 9',
        f'{TTFT}_count{{engine="0",model_name="m"}} 9'),
}
PLAIN_TEXT = "plain-text"
FAULTS = (*BODIES, PLAIN_TEXT)


def make_app() -> web.Application:
    built = {name: build() for name, build in BODIES.items()}

    async def metrics(request: web.Request) -> web.Response:
        fault = request.match_info["fault"]
        auth = request.headers.get("Authorization", "")
        if fault == PLAIN_TEXT:
            return web.Response(text=f"Service Unavailable ({auth})\n")
        body = built.get(fault)
        if body is None:
            return web.Response(status=404, text="no such fault")
        return web.Response(body=_echo(auth) + body,
                            headers={"Content-Type": "text/plain; version=0.0.4"})

    app = web.Application()
    app.router.add_get("/{fault}/metrics", metrics)
    app.router.add_get("/health", lambda _: web.Response(text="ok"))  # type: ignore[arg-type,return-value]
    return app


def main() -> None:
    web.run_app(make_app(), host="127.0.0.1", port=int(sys.argv[1]), print=None,
                access_log=None)


if __name__ == "__main__":
    main()
