"""Handlers of the simulator's metrics endpoints: Prometheus text in the chosen format, and
TensorRT-LLM's JSON iteration stats."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from exporter.simulator.replies import json_reply
from exporter.simulator.state import SIM

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


async def handle_metrics_text(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    rate = sim.faults.metrics_error_rate
    # No draw at rate 0, so seeded request outcomes stay what they were without the fault.
    if rate > 0 and sim.rng.random() < rate:
        return web.Response(status=500, text="metrics unavailable (simulated fault)\n")
    return web.Response(body=sim.exposition(), headers={"Content-Type": PROMETHEUS_TEXT})


async def handle_iteration_stats(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    records: list[dict[str, Any]] = []
    for engine in sim.all_engines():
        records.extend(engine.iteration_stats)
        engine.iteration_stats.clear()
    return json_reply(records)
