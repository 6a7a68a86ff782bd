"""The engine check against the simulator: every format, through the exporter's /metrics.

The expected values are the simulator's own exposition, read with prometheus_client's parser
and mapped through the table rows of that format; the exposed values come from a real
exporter App scraping the simulator over HTTP.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter import metrics
from exporter.checks.engine.table import FORMATS, Source, sources_for
from exporter.config.load import parse_config
from exporter.metrics import Kind
from exporter.runtime.app import App
from tests.support.engine_fixtures import assert_same
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.samples import SampleKey, exposed_samples, key, total
from tests.support.simulator import StartSimulator

SUFFIXES = ("_bucket", "_count", "_sum")


def _row_for(rows: list[Source], sample_name: str, labels: dict[str, str]) -> tuple[Source, str]:
    """The table row a source sample belongs to, and the normalized sample suffix."""
    for row in rows:
        candidates = [(row.name, "")]
        if row.kind is Kind.HISTOGRAM:
            candidates = [(row.name + s, s) for s in SUFFIXES]
        elif row.kind is Kind.COUNTER and not row.name.endswith("_total"):
            # prometheus_client's parser appends _total to Triton's bare counter samples.
            candidates.append((row.name + "_total", ""))
        for name, suffix in candidates:
            if name == sample_name and all(labels.get(k) == v for k, v in row.match.items()):
                return row, suffix
    raise LookupError(sample_name)


def expected_from_simulator(exposition: str, fmt: str, target: str) -> dict[SampleKey, float]:
    rows = sources_for(fmt)
    out: dict[SampleKey, float] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            try:
                row, suffix = _row_for(rows, sample.name, dict(sample.labels))
            except LookupError:
                continue
            # Every label of the normalized family is present; what the source lacks is "".
            labels = {name: "" for name in row.target.labels}
            labels.update(target=target, engine=row.engine)
            for src, norm in row.labels.items():
                if src in sample.labels:
                    labels[norm] = sample.labels[src]
            value = sample.value
            if suffix == "_bucket":
                le = float(sample.labels["le"]) * row.scale
                labels["le"] = str(le)
            elif suffix == "_sum" or row.kind is not Kind.HISTOGRAM:
                value = value * row.scale
            name = row.target.name + suffix
            if row.kind is Kind.COUNTER:
                name = row.target.name
            out[key(name, labels)] = value
    return out


async def _chat(session: aiohttp.ClientSession, base: str, stream: bool) -> None:
    body: dict[str, object] = {
        "model": "simulated-model",
        "messages": [{"role": "user", "content": "How long is a token, in time?"}],
        "max_tokens": 12,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    async with session.post(f"{base}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        await resp.read()


@pytest.mark.parametrize("fmt", FORMATS)
async def test_every_simulator_format_equals_source_bucket_by_bucket(
    fmt: str, simulator: StartSimulator
) -> None:
    sim = simulator(fmt=fmt, fast=True)
    metrics_url = sim.metrics_url
    engine_type = "vllm" if fmt == "vllm-legacy" else fmt
    exporter_port = free_port()
    config = parse_config(
        f"server: {{listen_address: '127.0.0.1:{exporter_port}'}}\nhost: {{enabled: false}}\n"
        f"engines:\n  - {{name: sim, url: '{metrics_url}', type: {engine_type}, interval: 1h}}\n"
    )
    app = App(config, "test.yaml")
    [check] = app.checks
    try:
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(_chat(session, sim.base, i % 2 == 0)
                                   for i in range(6)))
            # Idle: two identical reads mean every finished request has been recorded.
            previous = ""
            for _ in range(100):
                async with session.get(metrics_url) as resp:
                    source = await resp.text()
                if source == previous:
                    break
                previous = source
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("simulator never went idle")
            await app.start()
            await app.gen.scheduler.run_once(check)
            async with session.get(f"http://127.0.0.1:{exporter_port}/metrics") as resp:
                body = await resp.text()
        assert 'llm_engine_up{target="sim"} 1.0' in body
        expected = expected_from_simulator(source, fmt, "sim")
        # The simulator really did serve requests: histograms and counters are not empty.
        nonzero = {k[0] for k, v in expected.items() if v and not math.isnan(v)}
        assert metrics.ENGINE_GENERATION_TOKENS.name in nonzero or fmt == "triton", nonzero
        assert any(n.endswith(("_count", "_total")) for n in nonzero), nonzero
        assert_same(exposed_samples(body), expected)
        normalized = {k[0] for k in expected}
        assert metrics.ENGINE_REQUESTS_RUNNING.name in normalized
    finally:
        await app.shutdown()


async def test_queue_share_through_the_exporter(spawn: Callable[..., Proc], simulator: StartSimulator, tmp_path) -> None:  # type: ignore[no-untyped-def]
    exp_port = free_port()
    sim_port = simulator(max_num_seqs=4, decode_step_ms=5, decode_step_per_seq_ms=1).port
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"server: {{listen_address: '127.0.0.1:{exp_port}'}}\n"
        f"engines:\n  - {{name: sim, url: 'http://127.0.0.1:{sim_port}/metrics', interval: 500ms}}\n"
    )
    spawn(exporter_cmd("run", "--config", str(cfg)))
    base = f"http://127.0.0.1:{sim_port}"
    exporter = f"http://127.0.0.1:{exp_port}/metrics"
    wait_until(lambda: 'llm_engine_up{target="sim"} 1.0' in http_get(exporter)[1],
               what="exporter scraping the simulator")
    queue = f"{metrics.ENGINE_QUEUE_TIME.name}_sum"
    e2e = f"{metrics.ENGINE_E2E.name}_sum"

    def read() -> str:
        return http_get(exporter)[1]

    def share(before: str, after: str) -> float:
        return (total(after, queue) - total(before, queue)) / (total(after, e2e) - total(before, e2e))

    def settled(count: float) -> Callable[[], bool]:
        # The exporter has scraped at least `count` finished requests.
        return lambda: total(read(), f"{metrics.ENGINE_E2E.name}_count") >= count

    body = {"prompt": "measure the queue", "max_tokens": 20, "ignore_eos": True}
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            async with session.post(f"{base}/v1/completions", json=body) as resp:
                assert resp.status == 200
                await resp.read()

        before = read()
        # About twice the capacity (4 sequences of ~20 steps of ~9 ms: ~20 requests/s).
        load = []
        for _ in range(80):
            load.append(asyncio.create_task(one()))
            await asyncio.sleep(1 / 40)
        await asyncio.gather(*load)
        await asyncio.to_thread(wait_until, settled(80), 10, "exporter saw the overload")
        overload = read()
        assert share(before, overload) > 0.5

        for _ in range(8):
            await one()
        await asyncio.to_thread(wait_until, settled(88), 10, "exporter saw the light load")
        light = read()
        assert share(overload, light) < 0.2
