"""Manners toward endpoints: a 429/503 with Retry-After holds the probe's next runs until
then, and a redirect is its own outcome (probes never follow one; an engine's redirect loop
is named, not called a connection error), against real HTTP on loopback."""

from __future__ import annotations

import email.utils
from collections.abc import AsyncIterator

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.checks.base import RunSkipped
from exporter.checks.engine import check as engine
from exporter.checks.engine.check import ScrapeError
from exporter.checks.probe import check as probe
from exporter.checks.probe.check import ProbeCheck, ProbeFailed
from exporter.config.load import parse_config
from exporter.probing.client import MAX_RETRY_AFTER, parse_retry_after
from tests.support.samples import published_value


class Endpoint:
    """Answers every chat request with ``status`` and ``headers``; counts requests."""

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status, self.headers, self.requests = status, headers, 0

    async def chat(self, request: web.Request) -> web.Response:
        self.requests += 1
        return web.Response(status=self.status, headers=self.headers, text="no")


@pytest.fixture
async def endpoint(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Endpoint, str]]:
    status, headers = request.param
    ep = Endpoint(status, headers)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", ep.chat)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield ep, f"http://127.0.0.1:{server.port}/v1/chat/completions"
    finally:
        await server.close()


def make_probe(url: str) -> ProbeCheck:
    entry = {"name": "p", "url": url, "model": "m", "min_spacing": "1ms"}
    [check] = probe.build(parse_config(yaml.safe_dump({"probes": [entry]})))
    assert isinstance(check, ProbeCheck)
    return check


def sample(name: str, check: ProbeCheck, **labels: str) -> float:
    return published_value(check, name, **{**check.series_labels, **labels})


def test_retry_after_forms() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("99999999") == MAX_RETRY_AFTER
    date = email.utils.formatdate(1_000_030.0, usegmt=True)
    assert parse_retry_after(date, now=1_000_000.0) == pytest.approx(30.0)
    assert parse_retry_after(email.utils.formatdate(10.0, usegmt=True), now=1e6) == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None


@pytest.mark.parametrize("endpoint", [(429, {"Retry-After": "120"}),
                                      (503, {"Retry-After": "120"})], indirect=True)
async def test_retry_after_holds_the_next_runs(endpoint: tuple[Endpoint, str]) -> None:
    ep, url = endpoint
    check = make_probe(url)
    try:
        with pytest.raises(ProbeFailed):
            await check.run()
        for _ in range(3):
            with pytest.raises(RunSkipped, match="Retry-After"):
                await check.run()  # held: no request, no failure
    finally:
        await check.close()
    assert ep.requests == 1
    assert sample("llm_probe_held_off_total", check) == 3


@pytest.mark.parametrize("endpoint", [(429, {})], indirect=True)
async def test_429_without_retry_after_keeps_probing(endpoint: tuple[Endpoint, str]) -> None:
    ep, url = endpoint
    check = make_probe(url)
    try:
        for _ in range(3):
            with pytest.raises(ProbeFailed):
                await check.run()
    finally:
        await check.close()
    assert ep.requests == 3
    assert sample("llm_probe_requests_total", check, outcome="rate_limited") == 3


@pytest.mark.parametrize("endpoint", [(302, {"Location": "/v1/chat/completions"})],
                         indirect=True)
async def test_redirect_loop_is_its_own_outcome(endpoint: tuple[Endpoint, str]) -> None:
    ep, url = endpoint
    check = make_probe(url)
    try:
        with pytest.raises(ProbeFailed, match="redirect: HTTP 302 redirect"):
            await check.run()
    finally:
        await check.close()
    assert ep.requests == 1  # not followed, so not looped
    assert sample("llm_probe_requests_total", check, outcome="redirect") == 1


async def test_engine_redirect_loop_is_not_a_connection_error() -> None:
    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/metrics")

    app = web.Application()
    app.router.add_get("/metrics", loop)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    config = parse_config(yaml.safe_dump({"engines": [
        {"name": "e", "url": f"http://127.0.0.1:{server.port}/metrics", "type": "vllm"}]}))
    [check] = engine.build(config)
    try:
        with pytest.raises(ScrapeError, match="redirect loop"):
            await check.run()
    finally:
        await check.close()
        await server.close()
    assert published_value(check, "llm_engine_scrape_errors_total", target="e",
                           reason="redirect") == 1
    assert published_value(check, "llm_engine_scrape_errors_total", target="e",
                           reason="connection") == 0
