"""JSON responses as every simulator endpoint sends them."""

from __future__ import annotations

import json

from aiohttp import web

from exporter.simulator.openai import error_body


def dumps(payload: object) -> str:
    # Compact, as vLLM's FastAPI responses are.
    return json.dumps(payload, separators=(",", ":"))


def json_reply(payload: object, status: int = 200, headers: dict[str, str] | None = None
               ) -> web.Response:
    return web.json_response(payload, status=status, headers=headers, dumps=dumps)


def error_reply(message: str, status: int, param: str | None = None,
                headers: dict[str, str] | None = None) -> web.Response:
    return json_reply(error_body(message, status, param), status=status, headers=headers)
