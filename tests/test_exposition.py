"""/metrics from the checks' batches says exactly what prometheus_client would render of the
same samples, in both formats; a scrape sees one whole batch per check; a retired check's
series are gone; and the render runs off the event loop."""

from __future__ import annotations

import asyncio
import gzip
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client import Histogram as PromHistogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

from exporter import metrics
from exporter.checks.batch import Batch, Ledger
from exporter.checks.path.check import PathCheck
from exporter.config.load import parse_config
from exporter.runtime.app import App
from exporter.runtime.exposition import Store
from exporter.runtime.scheduler import Scheduler
from tests.support.procs import free_port
from tests.support.reference import reference_text
from tests.support.samples import parse, value


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def target_rows(port: int) -> str:
    return (
        f"      - {{name: open, host: 127.0.0.1, region: r1, protocol: tcp, port: {port}}}\n"
        f"      - {{name: closed, host: 127.0.0.1, region: r2, protocol: tcp, port: {free_port()}}}\n"
        "      - {name: nowhere, host: name.invalid, region: r3, protocol: tcp}\n"
    )


def config_text(port: int, rows: str | None = None) -> str:
    return (
        "server: {listen_address: '127.0.0.1:1'}\n"
        "paths:\n  interval: 5s\n  burst: 3\n  spacing: 5ms\n  timeout: 300ms\n"
        f"  rtt_buckets: [5ms, 50ms, 500ms]\n  carriers:\n    lab:\n{rows or target_rows(port)}"
    )


def open_target(scheduler: Scheduler) -> PathCheck:
    [check] = [c for c in scheduler.checks if isinstance(c, PathCheck) and c.spec.name == "open"]
    return check


async def test_the_store_renders_what_prometheus_client_does(listener: int) -> None:
    app = App(parse_config(config_text(listener)), "cfg.yaml")
    try:
        scheduler = app.gen.scheduler
        assert await app.metrics_body(False)  # before any run: the pre-created series
        for _ in range(2):
            for check in scheduler.checks:
                await scheduler.run_once(check)
        store = scheduler.store
        batches = store.batches()
        # One owner: byte for byte. All of them: the same samples (owners interleave).
        owner = next(iter(batches))
        alone = Store()
        alone.publish(owner, batches[owner])
        for om in (False, True):
            assert alone.text(om) == reference_text({owner: batches[owner]}, om)
        ours = parse(store.text(False).decode())
        assert ours == parse(reference_text(batches, False).decode())
        body = (await app.metrics_body(False)).decode()
        whole = parse(body)  # raises on a family served by both halves (a duplicate)
        assert whole.keys() >= ours.keys()
        assert 'le="0.05"' in body  # the configured buckets
        assert any(k[0] == "llm_path_jitter_seconds" for k in ours)

        zipped = gzip.decompress(await app.metrics_body(False, gzipped=True)).decode()
        assert parse(zipped).keys() == whole.keys()
        om_text = (await app.metrics_body(True)).decode()
        assert om_text.endswith("# EOF\n") and om_text.count("# EOF") == 1
        # The strict OpenMetrics parser; prometheus_client leaves it unannotated.
        parsed = om_parse(om_text)  # type: ignore[no-untyped-call]
        families: dict[str, Metric] = {f.name: f for f in parsed}
        assert families["llm_path_packets_sent"].type == "counter"
        assert families["llm_exporter_check_runs"].type == "counter"
    finally:
        await app.shutdown()


async def test_series_a_check_drops_are_gone(listener: int) -> None:
    app = App(parse_config(config_text(listener)), "cfg.yaml")
    try:
        scheduler = app.gen.scheduler
        check = open_target(scheduler)
        mad = ("llm_path_jitter_seconds", (
            ("carrier", "lab"), ("method", "mean_abs_diff"), ("protocol", "tcp"),
            ("region", "r1"), ("target", "open"),
        ))
        await scheduler.run_once(check)
        assert mad in parse((await app.metrics_body(False)).decode())
        check.burst = 1  # one answer: no RTT difference, so mean_abs_diff is removed
        await scheduler.run_once(check)
        assert mad not in parse((await app.metrics_body(False)).decode())
    finally:
        await app.shutdown()


async def test_a_retired_checks_series_vanish(listener: int, tmp_path: Path) -> None:
    """SIGHUP drops a target: its path and route series go with its checks' batches."""
    path = tmp_path / "cfg.yaml"
    path.write_text(config_text(listener))
    app = App(parse_config(path.read_text()), str(path))
    try:
        for check in app.gen.scheduler.checks:
            await app.gen.scheduler.run_once(check)
        before = parse((await app.metrics_body(False)).decode())
        assert value(before, "llm_path_packets_sent_total", target="closed") == 3
        assert value(before, "llm_exporter_check_runs_total", check="route/lab/closed",
                     outcome="success") is not None
        path.write_text(config_text(listener, "".join(
            row + "\n" for row in target_rows(listener).splitlines() if "closed" not in row)))
        assert await app.reload()
        after = parse((await app.metrics_body(False)).decode())
        assert not [k for k in after if ("target", "closed") in k[1]]
        assert not [k for k in after if ("check", "path/lab/closed") in k[1]]
        assert value(after, "llm_path_packets_sent_total", target="open") == 0
        # And within one store: retire is the same as never having published.
        store = Store()
        store.publish("a", ((metrics.PATH_ROUTE_ROUNDS_LATE, (), 1.0),))
        store.retire("a")
        assert store.text(False) == b"" and store.raw({"llm_path_route_rounds_late_total"}) == []
    finally:
        await app.shutdown()


async def test_counters_carry_across_runs(listener: int) -> None:
    app = App(parse_config(config_text(listener)), "cfg.yaml")
    try:
        scheduler = app.gen.scheduler
        check = open_target(scheduler)
        seen = []
        for _ in range(3):
            await scheduler.run_once(check)
            text = parse(scheduler.store.text(False).decode())
            seen.append((
                value(text, "llm_path_packets_sent_total", target="open"),
                value(text, "llm_path_rtt_seconds_count", target="open"),
                value(text, "llm_exporter_check_runs_total", check=check.name, outcome="success"),
                value(text, "llm_exporter_check_duration_seconds_count", check=check.name),
            ))
        assert seen == [(3, 3, 1, 1), (6, 6, 2, 2), (9, 9, 3, 3)]
    finally:
        await app.shutdown()


def test_a_histogram_buckets_as_prometheus_client_does() -> None:
    """Same bounds, same observations (on a bound, between, past the last): same text."""
    bounds = (0.005, 0.05, 0.5)
    ours = Ledger()
    registry = CollectorRegistry(auto_describe=False)
    theirs = PromHistogram("llm_path_rtt_seconds", metrics.PATH_RTT.help,
                           list(metrics.PATH_RTT.labels), buckets=bounds, registry=registry)
    labels = {"carrier": "c", "target": "t", "region": "r", "protocol": "icmp"}
    for v in (0.0, 0.005, 0.0050001, 0.05, 0.3, 0.5, 7.0):
        ours.histogram(metrics.PATH_RTT, labels, bounds).observe(v)
        theirs.labels(**labels).observe(v)
    store = Store()
    store.publish("x", ours.batch())
    assert parse(store.text(False).decode()) == parse(generate_latest(registry).decode())
    with pytest.raises(ValueError, match="cannot go down"):
        ours.counter(metrics.PATH_PACKETS_SENT, labels).inc(-1)


def test_a_ledger_takes_labels_by_name_and_keeps_the_familys_order() -> None:
    own = Ledger()
    named = {"reason": "timeout", "protocol": "icmp", "region": "r", "target": "t", "carrier": "c"}
    own.counter(metrics.PATH_ERRORS, named).inc()
    own.counter(metrics.PATH_ERRORS, dict(reversed(named.items()))).inc()  # the same series
    assert own.batch() == ((metrics.PATH_ERRORS, ("c", "t", "r", "icmp", "timeout"), 2.0),)
    missing = {k: v for k, v in named.items() if k != "reason"}
    for wrong, names in ((missing, "['reason']"), ({**named, "extra": "x"}, "['extra']"),
                         ({**missing, "why": "x"}, "['reason', 'why']")):
        with pytest.raises(AssertionError, match=re.escape(f"path_errors_total: wrong labels {names}")):
            own.remove(metrics.PATH_ERRORS, wrong)


def _run_of(owner: str, n: float) -> Batch:
    own = Ledger()
    labels = {"carrier": "c", "target": owner, "region": "r", "protocol": "icmp"}
    own.counter(metrics.PATH_PACKETS_SENT, labels).inc(n)
    own.counter(metrics.PATH_PACKETS_RECEIVED, labels).inc(n)
    return own.batch()


def test_a_scrape_during_updates_sees_whole_batches() -> None:
    """Sent and received are two families and every run has them equal: a scrape taken
    while another thread publishes runs must never pair one run's sent with another's
    received (it would, were a batch's families replaced one by one)."""
    store = Store()
    owners = [f"t{i}" for i in range(50)]
    done = threading.Event()
    runs = 0

    def publisher() -> None:
        nonlocal runs
        while not done.is_set():
            runs += 1
            for owner in owners:
                store.publish(owner, _run_of(owner, runs))

    for owner in owners:
        store.publish(owner, _run_of(owner, 0))
    thread = threading.Thread(target=publisher)
    thread.start()
    pairs = []
    try:
        for _ in range(200):
            text = parse(store.text(False).decode())
            pairs += [(value(text, "llm_path_packets_sent_total", target=owner),
                       value(text, "llm_path_packets_received_total", target=owner))
                      for owner in owners]
    finally:
        done.set()
        thread.join()
    assert runs > 10, "the scrapes overlapped too few runs to say anything"
    assert all(sent == received for sent, received in pairs)
    assert len({sent for sent, _ in pairs}) > 10


async def test_render_is_off_the_event_loop(listener: int) -> None:
    app = App(parse_config(config_text(listener)), "cfg.yaml")
    seen: list[str] = []

    class Spy:
        def collect(self) -> Iterator[Metric]:
            seen.append(threading.current_thread().name)
            yield GaugeMetricFamily("spy", "where the render ran", value=1)

    app.registry.register(Spy())
    try:
        body = await app.metrics_body(False)
        assert b"spy 1.0" in body
        assert seen and seen[0] != threading.current_thread().name
        assert seen[0].startswith("metrics")
        await asyncio.sleep(0)
    finally:
        await app.shutdown()
