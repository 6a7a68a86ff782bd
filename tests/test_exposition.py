"""/metrics from prepared pieces says exactly what prometheus_client would render of the
same registry, in both formats, and is rendered off the event loop."""

from __future__ import annotations

import asyncio
import gzip
import socket
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

from exporter.checks.path.check import PathCheck
from exporter.config.load import parse_config
from exporter.runtime.app import App
from exporter.runtime.exposition import render
from tests.support.procs import free_port
from tests.support.samples import parse


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def config_text(port: int) -> str:
    return (
        "server: {listen_address: '127.0.0.1:1'}\n"
        "paths:\n  interval: 5s\n  burst: 3\n  spacing: 5ms\n  timeout: 300ms\n"
        "  rtt_buckets: [5ms, 50ms, 500ms]\n  carriers:\n    lab:\n"
        f"      - {{name: open, host: 127.0.0.1, region: r1, protocol: tcp, port: {port}}}\n"
        f"      - {{name: closed, host: 127.0.0.1, region: r2, protocol: tcp, port: {free_port()}}}\n"
        "      - {name: nowhere, host: name.invalid, region: r3, protocol: tcp}\n"
    )


async def test_prepared_equals_a_full_render(listener: int) -> None:
    app = App(parse_config(config_text(listener)), "cfg.yaml")
    try:
        scheduler = app.gen.scheduler
        assert await app.metrics_body(False)  # before any run: the pre-created series
        for _ in range(2):
            for check in scheduler.checks:
                await scheduler.run_once(check)
        body = (await app.metrics_body(False)).decode()
        full = generate_latest(app.registry).decode()
        ours, theirs = parse(body), parse(full)
        volatile = {"process_cpu_seconds_total", "process_resident_memory_bytes",
                    "process_virtual_memory_bytes", "process_open_fds"}
        assert {k for k in ours if k[0] not in volatile} == {
            k for k in theirs if k[0] not in volatile
        }
        for k, v in theirs.items():
            if k[0] not in volatile and not k[0].startswith("python_gc"):
                assert ours[k] == v, k
        # Pieces from the checks are there, with the configured buckets.
        assert 'le="0.05"' in body
        assert any(k[0] == "llm_path_jitter_seconds" for k in ours)

        zipped = gzip.decompress(await app.metrics_body(False, gzipped=True)).decode()
        assert parse(zipped).keys() == ours.keys()
        om = (await app.metrics_body(True)).decode()
        assert om.endswith("# EOF\n") and om.count("# EOF") == 1
        families = {f.name: f for f in om_parse(om)}  # the strict OpenMetrics parser
        assert families["llm_path_packets_sent"].type == "counter"
        assert families["llm_exporter_check_runs"].type == "counter"
    finally:
        await app.shutdown()


async def test_series_a_check_drops_are_gone(listener: int) -> None:
    app = App(parse_config(config_text(listener)), "cfg.yaml")
    try:
        scheduler = app.gen.scheduler
        [check] = [c for c in scheduler.checks if isinstance(c, PathCheck) and c.spec.name == "open"]
        mad = ("llm_path_jitter_seconds", (
            ("carrier", "lab"), ("method", "mean_abs_diff"), ("protocol", "tcp"),
            ("region", "r1"), ("target", "open"),
        ))
        await scheduler.run_once(check)
        assert mad in parse((await app.metrics_body(False)).decode())
        check.burst = 1  # one answer: no RTT difference, so mean_abs_diff is removed
        await scheduler.run_once(check)
        body = (await app.metrics_body(False)).decode()
        assert mad not in parse(body)
        assert parse(body).keys() >= {
            k for k in parse(generate_latest(app.registry).decode()) if "llm_path" in k[0]
        }
    finally:
        await app.shutdown()


async def test_render_is_off_the_event_loop(listener: int) -> None:
    app = App(parse_config(config_text(listener)), "cfg.yaml")
    seen: list[str] = []

    class Spy:
        def collect(self) -> Iterator[Metric]:
            seen.append(threading.current_thread().name)
            yield GaugeMetricFamily("spy", "where the render ran", value=1)

    app.registry.register(Spy())  # type: ignore[arg-type]
    try:
        body = await app.metrics_body(False)
        assert b"spy 1.0" in body
        assert seen and seen[0] != threading.current_thread().name
        assert seen[0].startswith("metrics")
        await asyncio.sleep(0)
    finally:
        await app.shutdown()


async def test_a_family_prepared_during_a_scrape_is_served_once(listener: int) -> None:
    """A check's first success prepares a new family (its last-success gauge) on the event
    loop while a scrape renders on the render thread: whichever half the scrape's snapshot
    gave the family to serves it, never both."""
    app = App(parse_config(config_text(listener)), "cfg.yaml")
    try:
        gen = app.gen
        scheduler = gen.scheduler
        snapshot = scheduler.prepared.parents  # what a scrape starting now has decided
        live = gen.live(snapshot)
        for check in scheduler.checks:
            await scheduler.run_once(check)  # the scrape is still rendering meanwhile
        assert scheduler.prepared.parents - snapshot, "nothing new was prepared"
        body = render(live, scheduler.prepared, False, only=snapshot).decode()
        parse(body)  # raises on a sample served twice
        stale = render(live, scheduler.prepared, False).decode()
        with pytest.raises(AssertionError, match="duplicate sample"):
            parse(stale)  # what the scrape served before the snapshot was shared
    finally:
        await app.shutdown()
