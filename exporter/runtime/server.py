"""HTTP endpoints on the exporter's event loop: /metrics, /-/healthy, /-/ready,
/api/v1/diagnosis (the last embedded diagnosis as JSON), / (the live page: verdict, tiles,
checks) and /live (the part of it the page's script refreshes)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from exporter import __version__
from exporter.checks.base import Check
from exporter.config.models import Config
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.result import SCHEMA_ID, Diagnosis
from exporter.diagnosis.trends import Point
from exporter.runtime import page
from exporter.runtime.scheduler import CheckState


class Served(Protocol):
    """What the endpoints read from the running exporter (the app implements it), so this
    module needs nothing of the app's wiring."""

    registry: CollectorRegistry
    config_path: str

    @property
    def checks(self) -> Sequence[Check]: ...

    @property
    def ready(self) -> bool: ...

    @property
    def config(self) -> Config: ...

    @property
    def diagnosis(self) -> Diagnosis | None: ...

    @property
    def observations(self) -> Observations | None: ...

    @property
    def trend(self) -> Sequence[Point]: ...

    def check_state(self, name: str) -> CheckState | None: ...


APP_KEY: web.AppKey[Served] = web.AppKey("exporter")


async def handle_metrics(request: web.Request) -> web.Response:
    app = request.app[APP_KEY]
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encoder(app.registry)
    resp = web.Response(body=body, headers={"Content-Type": content_type})
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        resp.enable_compression()
    return resp


async def handle_healthy(request: web.Request) -> web.Response:
    return web.Response(text="OK\n")


async def handle_ready(request: web.Request) -> web.Response:
    app = request.app[APP_KEY]
    if app.ready:
        return web.Response(text="Ready\n")
    return web.Response(status=503, text="Not ready: waiting for the first run of every check\n")


async def handle_diagnosis(request: web.Request) -> web.Response:
    diagnosis = request.app[APP_KEY].diagnosis
    if diagnosis is None:
        # Same shape as an answer, so a client reads "unknown" rather than a parse error.
        body = {"schema": SCHEMA_ID, "status": "unknown", "source": "exporter", "verdicts": [],
                "steps": [], "reason": "no evaluation yet"}
        return web.json_response(body, status=503)
    return web.json_response(diagnosis.to_json())


def _view(app: Served) -> page.View:
    """What a render reads, taken on the loop; the states are copies, because the render runs
    on a worker thread while the scheduler updates them."""
    diagnosis = app.diagnosis
    states = [(c, app.check_state(c.name)) for c in app.checks]
    return page.View(
        version=__version__,
        config_path=app.config_path,
        config=app.config,
        checks=[(c, dataclasses.replace(st) if st is not None else None) for c, st in states],
        diagnosis=diagnosis.to_json() if diagnosis is not None else None,
        observations=app.observations,
        trend=app.trend,
        now=time.time(),
    )


def _html(request: web.Request, text: str) -> web.Response:
    # A fleet's page is a few hundred KiB of text, refreshed every few seconds: compress it.
    resp = web.Response(text=text, content_type="text/html", headers={"Cache-Control": "no-store"})
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        resp.enable_compression()
    return resp


# A fleet's page takes ~16 ms of pure Python (docs/benchmarks.md): on a worker thread, so the
# loop (and a probe's timing on it) waits at most one GIL switch interval at a time.
async def handle_index(request: web.Request) -> web.Response:
    return _html(request, await asyncio.to_thread(page.document, _view(request.app[APP_KEY])))


async def handle_live(request: web.Request) -> web.Response:
    return _html(request, await asyncio.to_thread(page.live, _view(request.app[APP_KEY])))


def make_web_app(app: Served) -> web.Application:
    web_app = web.Application()
    web_app[APP_KEY] = app
    web_app.router.add_get("/metrics", handle_metrics)
    web_app.router.add_get("/-/healthy", handle_healthy)
    web_app.router.add_get("/-/ready", handle_ready)
    web_app.router.add_get("/api/v1/diagnosis", handle_diagnosis)
    web_app.router.add_get("/", handle_index)
    web_app.router.add_get("/" + page.LIVE_PATH, handle_live)
    return web_app
