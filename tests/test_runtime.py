"""Scheduler isolation, the HTTP server and lifecycle, with real checks on a real event loop."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
import pytest

from exporter import checks as checks_pkg
from exporter.checks import Check
from exporter.checks.base import RunSkipped
from exporter.checks.batch import Batch
from exporter.config.load import parse_config
from exporter.config.models import Config
from exporter.runtime.app import App
from exporter.runtime.scheduler import Scheduler
from tests.support.procs import free_port
from tests.support.samples import parse, series, value


class Counting(Check):
    kind = "test"

    def __init__(self, target: str, interval: float, timeout: float = 1.0) -> None:
        super().__init__(target, interval, timeout)
        self.started: list[float] = []

    async def run(self) -> None:
        self.started.append(time.monotonic())

    def batch(self) -> Batch:
        return ()  # owns no series


class Raising(Counting):
    async def run(self) -> None:
        await super().run()
        raise RuntimeError("target exploded")


class Hanging(Counting):
    async def run(self) -> None:
        await super().run()
        await asyncio.sleep(3600)


class Stubborn(Counting):
    """Ignores cancellation, like a check stuck in a worker thread."""

    async def run(self) -> None:
        await super().run()
        for _ in range(40):
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue


def runs(text: str, check: str, outcome: str) -> float:
    return series(text, "llm_exporter_check_runs_total").get(
        (("check", check), ("outcome", outcome)), 0.0
    )


def test_every_check_package_registers_and_runs_in_config_order() -> None:
    order = list(Config.model_fields)
    assert list(checks_pkg.FACTORIES) == ["engines", "probes", "paths", "gpu", "host", "clients"]
    assert list(checks_pkg.FACTORIES) == sorted(checks_pkg.FACTORIES, key=order.index)


def test_a_check_without_batch_cannot_be_built() -> None:
    class Forgetful(Check):
        async def run(self) -> None:
            return None

    with pytest.raises(TypeError, match="abstract method batch"):
        Forgetful("x", 1.0, 1.0)  # type: ignore[abstract]


@pytest.fixture
def test_checks() -> Iterator[Callable[[list[Check]], None]]:
    """Register a factory in the real registry; removed afterwards."""

    def install(items: list[Check]) -> None:
        checks_pkg.FACTORIES["test"] = lambda _cfg: items

    yield install
    checks_pkg.FACTORIES.pop("test", None)


def config_on(port: int) -> Config:
    return parse_config(f"server: {{listen_address: '127.0.0.1:{port}'}}\n")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_failing_and_hanging_checks_do_not_block_others(
    test_checks: Callable[[list[Check]], None], session: aiohttp.ClientSession
) -> None:
    good = Counting("good", interval=0.1)
    bad = Raising("bad", interval=0.1)
    hang = Hanging("hang", interval=0.2, timeout=0.3)
    test_checks([good, bad, hang])
    port = free_port()
    app = App(config_on(port), "test.yaml")
    await app.start()
    try:
        latencies = []
        t_end = time.monotonic() + 2.0
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                assert resp.status == 200
                text = await resp.text()
            latencies.append(time.monotonic() - t0)
            await asyncio.sleep(0.05)
        assert statistics.median(latencies) < 0.1 and max(latencies) < 0.5, latencies
        # The good check kept its 100 ms schedule despite the others.
        gaps = [b - a for a, b in zip(good.started, good.started[1:], strict=False)]
        assert len(good.started) >= 14, len(good.started)
        assert max(gaps) < 0.2, gaps
        assert runs(text, "test/bad", "error") >= 10
        assert runs(text, "test/hang", "timeout") >= 3
        assert runs(text, "test/good", "success") >= 14
        assert runs(text, "test/good", "error") == 0
        # The hanging check never runs twice at once: each run started after the last timed out.
        hang_gaps = [b - a for a, b in zip(hang.started, hang.started[1:], strict=False)]
        assert all(g >= 0.3 for g in hang_gaps), hang_gaps
        last_ok = series(text, "llm_exporter_check_last_success_timestamp_seconds")
        assert (("check", "test/good"),) in last_ok and (("check", "test/bad"),) not in last_ok
    finally:
        t0 = time.monotonic()
        await app.shutdown()
        assert time.monotonic() - t0 < 5


class Held(Counting):
    """Fails, then is held off (as a probe after a 429 with Retry-After), then fails again."""

    async def run(self) -> None:
        await super().run()
        if len(self.started) in (2, 3):
            raise RunSkipped("held off")
        raise RuntimeError("HTTP 429")


async def test_a_held_run_is_skipped_and_keeps_the_failing_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    held = Held("held", interval=0.1)
    sched = Scheduler([held])
    outcomes = [await sched.run_once(held) for _ in range(4)]
    assert outcomes == ["error", "skipped", "skipped", "error"]
    state = sched.state[held.name]
    assert state.failing and state.last_outcome == "error" and state.last_error == "HTTP 429"
    said = [r.getMessage() for r in caplog.records if r.name == "exporter.runtime.scheduler"]
    assert said == ["check failing"], "no failing/recovered flapping while held"
    published = parse(sched.store.text(False).decode())
    assert value(published, "llm_exporter_check_last_success_timestamp_seconds",
                 check=held.name) is None
    assert value(published, "llm_exporter_check_runs_total", check=held.name,
                 outcome="skipped") == 2, "a held run is published too"


async def test_stubborn_run_is_never_overlapped() -> None:
    stubborn = Stubborn("stubborn", interval=0.1, timeout=0.2)
    sched = Scheduler([stubborn])
    outcomes = [await sched.run_once(stubborn) for _ in range(3)]
    # The first run ignored its cancellation and is still going: the next ones are skipped.
    assert outcomes == ["timeout", "skipped", "skipped"]
    assert len(stubborn.started) == 1
    await asyncio.sleep(2.2)
    assert await sched.run_once(stubborn) == "timeout"
    assert len(stubborn.started) == 2
    await sched.stop()


async def test_state_changes_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    flaky = Counting("flaky", interval=1)
    sched = Scheduler([flaky])
    caplog.set_level("INFO", logger="exporter.runtime.scheduler")

    async def fail() -> None:
        raise ConnectionRefusedError("connection refused")

    original = flaky.run
    flaky.run = fail  # type: ignore[method-assign]
    for _ in range(5):
        assert await sched.run_once(flaky) == "error"
    flaky.run = original  # type: ignore[method-assign]
    for _ in range(5):
        assert await sched.run_once(flaky) == "success"
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["check failing", "check recovered"]


async def test_health_ready_and_index(
    test_checks: Callable[[list[Check]], None], session: aiohttp.ClientSession
) -> None:
    slow_first = Counting("slow", interval=60)
    test_checks([slow_first])
    port = free_port()
    app = App(config_on(port), "test.yaml")
    # Hold the first run back so readiness can be observed before it.
    gate = asyncio.Event()
    original = slow_first.run

    async def gated() -> None:
        await gate.wait()
        await original()

    slow_first.run = gated  # type: ignore[method-assign]
    await app.start()
    base = f"http://127.0.0.1:{port}"
    try:
        async with session.get(base + "/-/healthy") as r:
            assert r.status == 200
        async with session.get(base + "/-/ready") as r:
            assert r.status == 503
        gate.set()
        for _ in range(200):
            async with session.get(base + "/-/ready") as r:
                if r.status == 200:
                    break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("never ready")
        async with session.get(base + "/") as r:
            page = await r.text()
            assert r.status == 200 and "test/slow" in page and 'href="metrics"' in page
        async with session.get(
            base + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        ) as r:
            body = await r.text()
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            assert body.rstrip().endswith("# EOF")
        async with session.get(base + "/metrics") as r:
            body = await r.text()
            assert r.headers["Content-Type"].startswith("text/plain")
            assert 'llm_exporter_build_info{python="' in body
            assert 'llm_exporter_peak_window{window="evening"}' in body
    finally:
        await app.shutdown()
