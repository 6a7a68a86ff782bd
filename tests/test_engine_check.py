"""The engine check over real HTTP: loopback aiohttp servers play the engines.

Each test runs the real check (built by the real factory from YAML) and reads its batch as
/metrics renders it, through prometheus_client's parser.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from exporter.checks import FACTORIES, build_checks
from exporter.checks.engine import check as engine_mod
from exporter.checks.engine.check import EngineCheck, ScrapeError
from exporter.config.load import parse_config
from exporter.metrics import ENGINE_SCRAPE_ERROR_REASONS as REASONS
from exporter.runtime.app import App
from exporter.runtime.exposition import Store
from exporter.runtime.scheduler import Scheduler
from tests.support.engine_fixtures import (
    assert_same,
    expected_samples,
    triton_fixture_blocks,
    vllm_fixture,
)
from tests.support.procs import free_port
from tests.support.samples import exposed_samples, find, parse, value

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PROM_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def text(body: str, content_type: str = PROM_TEXT, status: int = 200) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            body=body.encode(), status=status, headers={"Content-Type": content_type}
        )

    return handler


async def hang(request: web.Request) -> web.Response:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


def stream(total: int | None) -> Handler:
    """A chunked body of valid but unmapped exposition lines; endless when total is None."""
    line = b'process_filler_metric{pad="' + b"x" * 200 + b'"} 1\n'
    chunk = line * (256 * 1024 // len(line))

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": PROM_TEXT})
        await resp.prepare(request)
        sent = 0
        try:
            while total is None or sent < total:
                await resp.write(chunk)
                sent += len(chunk)
        except (ConnectionResetError, ConnectionError):
            return resp
        await resp.write_eof()
        return resp

    return handler


class FakeEngine:
    """A loopback HTTP server whose answer per path the test sets and changes."""

    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.seen: list[tuple[str, str | None]] = []
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.path, request.headers.get("Authorization")))
        handler = self.routes.get(request.path)
        if handler is None:
            return web.Response(status=404, text="404: Not Found")
        return await handler(request)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@pytest.fixture
async def engine() -> AsyncIterator[FakeEngine]:
    server = FakeEngine()
    await server.start()
    yield server
    await server.stop()


def config(*entries: str) -> str:
    """Engines only: the host check, on by default, off."""
    return "host: {enabled: false}\nengines:\n" + "".join(entries)


def entry(name: str, url: str, extra: str = "") -> str:
    return f"  - name: {name}\n    url: {url}\n    timeout: 1s\n{extra}"


def build(yaml: str) -> list[EngineCheck]:
    checks = build_checks(parse_config(yaml))
    assert all(isinstance(c, EngineCheck) for c in checks)
    return checks  # type: ignore[return-value]


def exposition(checks: list[EngineCheck]) -> str:
    """The checks' batches as /metrics renders them."""
    store = Store()
    for check in checks:
        store.publish(check.name, check.batch())
    return store.text(False).decode()


def data_series(text_: str, target: str) -> list[str]:
    """Engine data samples of one target (everything but up/duration/errors/dropped/info)."""
    return [
        f"{name}{dict(labels)}"
        for (name, labels) in parse(text_)
        if dict(labels).get("target") == target and "engine" in dict(labels)
    ]


async def close_all(checks: list[EngineCheck]) -> None:
    for check in checks:
        await check.close()


# --- the fixtures over HTTP -------------------------------------------------------------------


async def test_vllm_fixture_over_http_equals_source(engine: FakeEngine) -> None:
    fixture = vllm_fixture()
    engine.routes["/v1/metrics"] = text(fixture)
    engine.routes["/v1/version"] = text('{"version": "0.11.2"}', "application/json")
    checks = build(config(entry("vllm-a", engine.url("/v1/metrics"))))
    try:
        await checks[0].run()
        out = exposition(checks)
        oracle = "\n".join(line for line in fixture.splitlines() if ",...}" not in line)
        assert_same(exposed_samples(out), expected_samples(oracle, "vllm", "vllm-a"))
        assert value(out, "llm_engine_up", target="vllm-a") == 1.0
        assert value(out, "llm_engine_info", target="vllm-a", family="vllm",
                     version="0.11.2") == 1.0
        for reason in REASONS:
            assert value(out, "llm_engine_scrape_errors_total", reason=reason) == 0.0
        assert value(out, "llm_engine_dropped_series_total", target="vllm-a",
                     reason="model") == 0.0
        duration = value(out, "llm_engine_scrape_duration_seconds", target="vllm-a")
        assert duration is not None and duration > 0
        # The histogram's bounds are the engine's own, written the Prometheus way.
        les = [labels["le"] for labels, _ in find(out, "llm_engine_time_to_first_token_seconds_bucket")]
        assert les == ["0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "+Inf"]
        # Never-seen families are absent, not zero.
        assert "llm_engine_kv_cache_usage_ratio" not in out
        assert "llm_engine_e2e_request_latency_seconds" not in out
    finally:
        await close_all(checks)


async def test_triton_fixture_blocks_over_http_equal_source(engine: FakeEngine) -> None:
    blocks = triton_fixture_blocks()
    engine.routes["/a/metrics"] = text(blocks["A"])
    engine.routes["/b/metrics"] = text(blocks["B"])
    checks = build(config(
        entry("triton-a", engine.url("/a/metrics"), "    type: triton\n"),
        entry("triton-b", engine.url("/b/metrics")),  # detected from the names
    ))
    try:
        for check in checks:
            await check.run()
        out = exposition(checks)
        want = {
            **expected_samples(blocks["A"], "triton", "triton-a"),
            **expected_samples(blocks["B"], "triton", "triton-b"),
        }
        assert_same(exposed_samples(out), want)
        for target in ("triton-a", "triton-b"):
            assert value(out, "llm_engine_info", target=target, family="triton", version="") == 1
        assert value(out, "llm_engine_requests_waiting", target="triton-a") is None
        assert value(out, "llm_engine_requests_waiting", target="triton-b") == 1.0
        # Triton reports no version and no /version endpoint is asked for.
        assert not any(path.endswith("version") for path, _ in engine.seen)
    finally:
        await close_all(checks)


# --- failures --------------------------------------------------------------------------------

BROKEN = vllm_fixture().replace(
    'vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.0',
    'vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct" 8.0',
)
HTML = "<!doctype html><html><body><h1>Welcome</h1>SECRET-BODY-MARKER</body></html>"

FAILURES: dict[str, tuple[Handler | None, str]] = {
    "http_500": (text("internal error SECRET-BODY-MARKER", "text/plain", 500), "http_5xx"),
    "http_404": (text("404: Not Found SECRET-BODY-MARKER", "text/plain", 404), "http_4xx"),
    "html": (text(HTML, "text/html"), "not_prometheus"),
    "html_as_text": (text(HTML), "not_prometheus"),
    "twenty_mb": (stream(20 * 1024 * 1024), "too_large"),
    "malformed": (text(BROKEN), "malformed"),
    "garbage": (text("hello world\nthis is not an engine\n"), "unrecognized"),
    "timeout": (hang, "timeout"),
    "refused": (None, "connection"),
}


@pytest.mark.parametrize("case", list(FAILURES))
async def test_failure_marks_down_counts_reason_and_drops_data(
    engine: FakeEngine, case: str
) -> None:
    handler, reason = FAILURES[case]
    engine.routes["/metrics"] = text(vllm_fixture())
    checks = build(config(entry("e", engine.url("/metrics"))))
    check = checks[0]
    try:
        await check.run()
        before = exposition(checks)
        assert value(before, "llm_engine_up", target="e") == 1.0
        assert data_series(before, "e")
        if handler is None:
            await engine.stop()  # the engine process is gone: connection refused
        else:
            engine.routes["/metrics"] = handler
        started = time.monotonic()
        with pytest.raises(ScrapeError) as err:
            await check.run()
        # The check's own HTTP timeout fired, well inside the scheduler's deadline.
        assert time.monotonic() - started < check.timeout
        assert err.value.reason == reason
        assert "SECRET-BODY-MARKER" not in str(err.value)
        after = exposition(checks)
        assert value(after, "llm_engine_up", target="e") == 0.0
        assert data_series(after, "e") == []
        assert value(after, "llm_engine_info", target="e") is None
        for r in REASONS:
            want = 1.0 if r == reason else 0.0
            assert value(after, "llm_engine_scrape_errors_total", target="e", reason=r) == want
    finally:
        await close_all(checks)


async def test_reading_stops_at_the_size_cap(engine: FakeEngine) -> None:
    # An endless body: only a reader that stops at the cap returns (a full read would hang
    # until the timeout and report reason=timeout instead).
    engine.routes["/metrics"] = stream(None)
    parsed = parse_config(config(entry("e", engine.url("/metrics"))))
    check = EngineCheck(parsed.engines[0], max_body_bytes=1024 * 1024)
    try:
        with pytest.raises(ScrapeError) as err:
            await check.run()
        assert err.value.reason == "too_large"
    finally:
        await check.close()


async def test_recovery_and_state_change_logging(
    engine: FakeEngine, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGINE_TOKEN", "tok-SECRET-123")
    caplog.set_level(logging.DEBUG)
    engine.routes["/metrics"] = text(vllm_fixture())
    checks = build(config(entry(
        "e", engine.url("/metrics"), "    bearer_token: {env: ENGINE_TOKEN}\n")))
    check = checks[0]
    sched = Scheduler(list(checks))
    try:
        assert await sched.run_once(check) == "success"
        engine.routes["/metrics"] = text("boom SECRET-BODY-MARKER", "text/plain", 500)
        for _ in range(3):
            assert await sched.run_once(check) == "error"
        engine.routes["/metrics"] = text(vllm_fixture())
        for _ in range(2):
            assert await sched.run_once(check) == "success"
        out = exposition(checks)
        assert value(out, "llm_engine_up", target="e") == 1.0
        assert value(out, "llm_engine_scrape_errors_total", target="e", reason="http_5xx") == 3
        assert data_series(out, "e")
    finally:
        await sched.stop()
    transitions = [r for r in caplog.records if r.name == "exporter.runtime.scheduler"]
    assert [r.getMessage() for r in transitions] == ["check failing", "check recovered"]
    assert "http_5xx" in transitions[0].__dict__["error"]
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "tok-SECRET-123" not in logged and "SECRET-BODY-MARKER" not in logged
    assert "tok-SECRET-123" not in check.describe()
    # The token was sent on every request.
    assert {auth for _, auth in engine.seen} == {"Bearer tok-SECRET-123"}


async def test_other_checks_keep_their_schedule_while_targets_fail(engine: FakeEngine) -> None:
    engine.routes["/good/metrics"] = text(vllm_fixture())
    engine.routes["/hang/metrics"] = hang
    engine.routes["/html/metrics"] = text(HTML, "text/html")
    engine.routes["/big/metrics"] = stream(20 * 1024 * 1024)
    fast = "    interval: 100ms\n"
    port = free_port()
    cfg = parse_config(
        f"server: {{listen_address: '127.0.0.1:{port}'}}\n" + config(
            entry("good", engine.url("/good/metrics"), fast),
            entry("hang", engine.url("/hang/metrics"), fast).replace("timeout: 1s",
                                                                     "timeout: 300ms"),
            entry("html", engine.url("/html/metrics"), fast),
            entry("big", engine.url("/big/metrics"), fast),
            entry("refused", f"http://127.0.0.1:{free_port()}/metrics", fast),
        )
    )
    app = App(cfg, "test.yaml")
    await app.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def scrape() -> str:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    return await resp.text()

            def runs(out: str, check: str, outcome: str) -> float:
                return value(out, "llm_exporter_check_runs_total",
                             check=f"engine/{check}", outcome=outcome) or 0.0

            out = ""
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                out = await scrape()
                if runs(out, "good", "success") >= 10 and runs(out, "hang", "error") >= 2:
                    break
                await asyncio.sleep(0.1)
            assert runs(out, "good", "success") >= 10, out
            assert runs(out, "good", "error") == 0
            assert runs(out, "hang", "error") >= 2
            assert value(out, "llm_engine_up", target="good") == 1.0
            expected_reason = {"hang": "timeout", "html": "not_prometheus",
                               "big": "too_large", "refused": "connection"}
            for target, reason in expected_reason.items():
                assert value(out, "llm_engine_up", target=target) == 0.0, target
                errors = value(out, "llm_engine_scrape_errors_total", target=target,
                               reason=reason)
                assert errors is not None and errors >= 1, (target, reason)
                assert data_series(out, target) == []
    finally:
        await app.shutdown()


# --- semantics across scrapes ------------------------------------------------------------------


def _vllm(tokens: float, ttft_count: float, models: list[str] | None = None) -> str:
    lines = []
    for m in models or ["m"]:
        for rank in ("0", "1"):
            lab = f'engine="{rank}",model_name="{m}"'
            lines += [
                f"vllm:prompt_tokens_total{{{lab}}} {tokens}",
                f"vllm:prompt_tokens_created{{{lab}}} 1.7e9",
                f'vllm:time_to_first_token_seconds_bucket{{{lab},le="0.5"}} {ttft_count}',
                f'vllm:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}} {ttft_count}',
                f"vllm:time_to_first_token_seconds_count{{{lab}}} {ttft_count}",
                f"vllm:time_to_first_token_seconds_sum{{{lab}}} {ttft_count * 0.1}",
            ]
    return "\n".join(lines) + "\n"


async def test_engine_restart_passes_through_as_a_reset(engine: FakeEngine) -> None:
    engine.routes["/metrics"] = text(_vllm(1000.0, 50.0))
    checks = build(config(entry("e", engine.url("/metrics"))))
    try:
        await checks[0].run()
        out = exposition(checks)
        tokens = {"target": "e", "model": "m", "dp_rank": "1"}
        assert value(out, "llm_engine_prompt_tokens_total", **tokens) == 1000.0
        engine.routes["/metrics"] = text(_vllm(7.0, 2.0))  # restarted engine
        await checks[0].run()
        out = exposition(checks)
        assert value(out, "llm_engine_prompt_tokens_total", **tokens) == 7.0
        assert value(out, "llm_engine_time_to_first_token_seconds_count", **tokens) == 2.0
        assert value(out, "llm_engine_time_to_first_token_seconds_bucket",
                     le="0.5", **tokens) == 2.0
        # One series per (model, dp_rank): nothing accumulated next to the new values.
        assert len(find(out, "llm_engine_prompt_tokens_total")) == 2
    finally:
        await close_all(checks)


async def test_model_cap_over_http(engine: FakeEngine) -> None:
    models = [f"model-{i:02d}" for i in range(25)]
    engine.routes["/metrics"] = text(_vllm(1.0, 1.0, models))
    checks = build(config(entry("e", engine.url("/metrics"))))  # default cap 20
    try:
        await checks[0].run()
        await checks[0].run()
        out = exposition(checks)
        exposed = {labels["model"] for labels, _ in find(out, "llm_engine_prompt_tokens_total")}
        assert exposed == set(models[:20])
        # 5 models x 2 ranks x 5 lines (a counter; a histogram's 2 buckets, _count, _sum),
        # on each of the two scrapes.
        assert value(out, "llm_engine_dropped_series_total", target="e",
                     reason="model") == 2 * 5 * 2 * 5
    finally:
        await close_all(checks)


async def test_trtllm_serve_json_metrics_falls_back_to_prometheus_path(
    engine: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.engine")
    engine.routes["/metrics"] = text(json.dumps([{"iter": 1, "gpuMemUsage": 1}]),
                                     "application/json")
    engine.routes["/prometheus/metrics"] = text(
        "# TYPE trtllm_num_requests_waiting gauge\n"
        'trtllm_num_requests_waiting{model_name="nemotron"} 3.0\n'
    )
    checks = build(config(entry("trt", engine.url("/metrics"))))
    try:
        for _ in range(3):
            await checks[0].run()
        out = exposition(checks)
        assert value(out, "llm_engine_requests_waiting", target="trt", engine="trtllm",
                     model="nemotron") == 3.0
        assert checks[0].url == engine.url("/prometheus/metrics")
        # The JSON endpoint is asked once; later scrapes go straight to the text endpoint.
        assert [p for p, _ in engine.seen].count("/metrics") == 1
        assert len([r for r in caplog.records if "trtllm-serve" in r.getMessage()]) == 1
        # Without the text endpoint the JSON answer is a failure, not an empty success.
        engine.routes["/prometheus/metrics"] = text("{}", "application/json")
        with pytest.raises(ScrapeError, match="not_prometheus"):
            await checks[0].run()
    finally:
        await close_all(checks)


async def test_family_is_redetected_when_names_change(
    engine: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.engine")
    engine.routes["/metrics"] = text(_vllm(5.0, 1.0))
    checks = build(config(entry("e", engine.url("/metrics"))))
    try:
        await checks[0].run()
        await checks[0].run()
        engine.routes["/metrics"] = text('sglang:num_queue_reqs{model_name="q"} 4\n')
        await checks[0].run()
        out = exposition(checks)
        assert value(out, "llm_engine_requests_waiting", target="e", engine="sglang") == 4.0
        assert value(out, "llm_engine_prompt_tokens_total", target="e") is None
        assert value(out, "llm_engine_info", target="e", family="sglang") == 1.0
        detected = [r.__dict__["family"] for r in caplog.records
                    if r.getMessage() == "engine family detected"]
        assert detected == ["vllm", "sglang"]
    finally:
        await close_all(checks)


async def test_configured_type_wins_over_detection(engine: FakeEngine) -> None:
    engine.routes["/metrics"] = text(_vllm(5.0, 1.0))
    checks = build(config(entry("e", engine.url("/metrics"), "    type: sglang\n")))
    try:
        # vLLM names where SGLang's are configured: not an SGLang answering, so down.
        with pytest.raises(ScrapeError, match="unrecognized: no sglang metric names"):
            await checks[0].run()
        out = exposition(checks)
        assert value(out, "llm_engine_up", target="e") == 0.0
        assert value(out, "llm_engine_scrape_errors_total", target="e",
                     reason="unrecognized") == 1.0
        # Its own names without a mapped series (no model loaded yet) are an empty success.
        engine.routes["/metrics"] = text('sglang:engine_startup_time{a="1"} 1\n')
        await checks[0].run()
        out = exposition(checks)
        assert value(out, "llm_engine_up", target="e") == 1.0
        assert value(out, "llm_engine_info", target="e", family="sglang") == 1.0
        assert data_series(out, "e") == []
    finally:
        await close_all(checks)


def test_registered_in_factories() -> None:
    assert FACTORIES["engines"] is engine_mod.build
    cfg = parse_config(config(entry("e", "http://127.0.0.1:1/metrics")))
    assert build_checks(parse_config("host: {enabled: false}")) == []
    checks = build_checks(cfg)
    assert [c.name for c in checks] == ["engine/e"]
    assert checks[0].interval == 5.0
    # Credentials in a URL never reach the index page or check-config output.
    with_userinfo = parse_config(config(entry("u", "http://user:pw-SECRET@127.0.0.1:1/metrics")))
    described = build_checks(with_userinfo)[0].describe()
    assert "pw-SECRET" not in described and "127.0.0.1:1/metrics" in described
