"""The simulator's HTTP server: the routes, their sites, and starting and stopping it all.

Routes (API port):
  POST /v1/chat/completions, POST /v1/completions   streaming (SSE) and not
  GET  /v1/models, GET /health
  GET  /metrics                   vllm, vllm-legacy, sglang: Prometheus text
                                  trtllm: JSON iteration stats (drained on read), as trtllm-serve
  GET  /prometheus/metrics        trtllm: Prometheus text
  GET|POST /admin/faults          current fault settings; a JSON object merges into them
  GET|POST /admin/config          engine knobs that may change at run time
Triton's metrics are on their own port (default API port + 2, as Triton's 8002) at /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

from exporter.simulator.admin import handle_config, handle_faults
from exporter.simulator.api import (
    handle_chat,
    handle_completions,
    handle_health,
    handle_models,
)
from exporter.simulator.scrape import handle_iteration_stats, handle_metrics_text
from exporter.simulator.state import SIM, Settings, Simulator

log = logging.getLogger(__name__)

# vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE default: probes more than 5 s apart reconnect.
KEEPALIVE_SECONDS = 5.0


def make_app(sim: Simulator) -> web.Application:
    app = web.Application()
    app[SIM] = sim
    app.router.add_post("/v1/chat/completions", handle_chat)
    app.router.add_post("/v1/completions", handle_completions)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    if sim.format == "trtllm":
        app.router.add_get("/metrics", handle_iteration_stats)
        app.router.add_get("/prometheus/metrics", handle_metrics_text)
    elif sim.format != "triton":
        app.router.add_get("/metrics", handle_metrics_text)
    app.router.add_route("*", "/admin/faults", handle_faults)
    app.router.add_route("*", "/admin/config", handle_config)
    return app


def make_metrics_app(sim: Simulator) -> web.Application:
    """Triton's separate metrics service."""
    app = web.Application()
    app[SIM] = sim
    app.router.add_get("/metrics", handle_metrics_text)
    return app


class Running:
    """A started simulator: its URLs, and how to stop it."""

    def __init__(self, sim: Simulator, runners: list[web.AppRunner], urls: dict[str, str]):
        self.sim = sim
        self.urls = urls
        self._runners = runners

    async def close(self) -> None:
        # Engines first: their abort events end open streams, so handlers return promptly.
        await self.sim.stop()
        for runner in self._runners:
            await runner.cleanup()


async def _site(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        keepalive_timeout=KEEPALIVE_SECONDS,
        shutdown_timeout=2.0,
        access_log=None,
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def start(settings: Settings) -> Running:
    problems = settings.problems()
    if problems:
        raise ValueError("; ".join(problems))
    sim = Simulator(settings)
    sim.start()
    base = f"http://{_url_host(settings.host)}:{settings.port}"
    runners: list[web.AppRunner] = []
    try:
        runners.append(await _site(make_app(sim), settings.host, settings.port))
        urls = {"api": f"{base}/v1", "admin": f"{base}/admin/faults"}
        if settings.format == "triton":
            port = settings.triton_metrics_port
            runners.append(await _site(make_metrics_app(sim), settings.host, port))
            urls["metrics"] = f"http://{_url_host(settings.host)}:{port}/metrics"
        elif settings.format == "trtllm":
            urls["metrics"] = f"{base}/prometheus/metrics"
            urls["iteration stats"] = f"{base}/metrics"
        else:
            urls["metrics"] = f"{base}/metrics"
    except BaseException:
        await sim.stop()
        for runner in runners:
            await runner.cleanup()
        raise
    return Running(sim, runners, urls)


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set (the CLI sets it on SIGTERM/SIGINT)."""
    running = await start(settings)
    for what, url in running.urls.items():
        print(f"{what:<16} {url}", flush=True)
    log.info(
        "simulator started",
        extra={"format": settings.format, "models": ",".join(settings.models), **running.urls},
    )
    try:
        await stop.wait()
    finally:
        log.info("simulator stopping")
        with contextlib.suppress(Exception):
            await running.close()
