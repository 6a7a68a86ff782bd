"""Handlers of the admin endpoints: fault settings and the engine knobs that may change at
run time, each read with GET and merged from a JSON object with POST."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

from aiohttp import web

from exporter.simulator.engine_config import EngineConfig
from exporter.simulator.faults import FaultError
from exporter.simulator.replies import json_reply
from exporter.simulator.state import SIM

# The server's logger, as for its start and stop lines: one `logger` value for all that the
# simulator's HTTP side logs.
log = logging.getLogger("exporter.simulator.server")


async def _json_object(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return json_reply({"errors": ["the body is not valid JSON"]}, status=400)
    if not isinstance(body, dict):
        return json_reply({"errors": ["the body must be a JSON object"]}, status=400)
    return body


async def handle_faults(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    if request.method == "POST":
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        try:
            sim.faults = sim.faults.merged(body)
        except FaultError as exc:
            return json_reply({"errors": exc.messages}, status=400)
        log.info("faults changed", extra={"changes": json.dumps(body, sort_keys=True)})
    return json_reply(sim.faults.as_dict())


def _runtime_config(config: EngineConfig) -> dict[str, Any]:
    values = asdict(config)
    return {
        "runtime": {k: values[k] for k in EngineConfig.RUNTIME},
        "fixed": {k: v for k, v in values.items() if k not in EngineConfig.RUNTIME},
    }


async def handle_config(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    if request.method == "POST":
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        try:
            new = sim.config.merged(body)
        except ValueError as exc:
            return json_reply({"errors": str(exc).split("; ")}, status=400)
        # In place: every engine holds this same object.
        for key in body:
            setattr(sim.config, key, getattr(new, key))
        for engine in sim.all_engines():
            engine.wake()
        log.info("engine config changed", extra={"changes": json.dumps(body, sort_keys=True)})
    return json_reply(_runtime_config(sim.config))
