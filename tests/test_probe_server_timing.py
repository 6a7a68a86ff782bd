"""The probe's TTFT split by the engine's own timing of each request, and the kernel's TCP
statistics of its connection, over real loopback HTTP: the simulator started as vLLM with
``--enable-per-request-metrics``, and small in-test servers for NIM's format and a server
whose timing cannot be right."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from exporter.checks.probe import check as probe
from exporter.checks.probe.check import ProbeCheck
from exporter.config.load import parse_config
from exporter.simulator.engine_config import EngineConfig
from tests.support import ROOT
from tests.support.procs import free_port
from tests.support.samples import published
from tests.support.simulator import Simulator, running_simulator
from tests.support.split import TTFT_PARTS, Parts, assert_sums_to_ttft, run, value
from tests.support.split import make_probe as _make_probe

MODEL = "simulated-model"


@pytest.fixture(scope="module")
def timed() -> Iterator[Simulator]:
    with running_simulator(fmt="vllm", fast=True, enable_per_request_metrics=True) as sim:
        yield sim


@pytest.fixture
def sim(timed: Simulator) -> Iterator[Simulator]:
    timed.faults()
    yield timed
    timed.faults()
    _config(timed, max_num_seqs=EngineConfig().max_num_seqs)


def _config(sim: Simulator, **changes: Any) -> None:
    req = urllib.request.Request(f"{sim.base}/admin/config", data=json.dumps(changes).encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def make_probe(url: str) -> ProbeCheck:
    return _make_probe(url, MODEL)


async def test_every_probe_splits_and_the_parts_land_where_the_time_went(
    sim: Simulator,
) -> None:
    """The simulator's frontend spends 40 ms before queueing each request and its engine
    waits 60 ms after admitting it: the first shows as network_frontend, the second as
    prefill, and the three parts add up to the client's TTFT."""
    sim.faults(frontend_delay=0.04, slow_first_token=0.06)
    check = make_probe(sim.url)
    parts = Parts(check)
    try:
        for _ in range(4):
            await run(check)
            d = parts.run_delta()
            assert_sums_to_ttft(d)
            # asyncio.sleep never wakes early; the loopback network adds well under 1 ms.
            assert 0.04 <= d["network_frontend"] < 0.04 + 0.5 * d["ttft"], d
            assert d["prefill"] >= 0.06, d
            assert d["queue"] < 0.03, d  # an idle engine admits at once
            assert d["decode"] > 0
    finally:
        await check.close()
    assert value(check, "llm_probe_server_split_total", split="exact") == 4
    assert value(check, "llm_probe_server_split_total", split="absent") == 0
    assert value(check, "llm_probe_server_split_total", split="inconsistent") == 0
    for part in (*TTFT_PARTS, "decode"):
        assert value(check, "llm_probe_server_timing_seconds_count", part=part) == 4


async def test_a_busy_engine_shows_as_queue(sim: Simulator) -> None:
    """One sequence at a time, and a long request holding it: the probe waits in the
    engine's queue, and the split says so."""
    _config(sim, max_num_seqs=1)
    check = make_probe(sim.url)
    parts = Parts(check)
    body = {"model": MODEL, "prompt": "hold", "max_tokens": 60, "ignore_eos": True,
            "stream": False}
    try:
        async with aiohttp.ClientSession() as session:
            hold = asyncio.create_task(
                session.post(f"{sim.base}/v1/completions", json=body).__aenter__())
            await asyncio.sleep(0.05)  # the long request is running
            await run(check)
            resp = await hold
            resp.release()
        d = parts.run_delta()
    finally:
        await check.close()
    assert_sums_to_ttft(d)
    # 60 decode steps of >= 5 ms each, less the 50 ms head start.
    assert d["queue"] >= 0.1, d
    assert d["queue"] > d["prefill"] and d["queue"] > d["network_frontend"], d


async def test_without_the_engine_option_the_split_is_absent(sim: Simulator) -> None:
    with running_simulator(fmt="vllm", fast=True) as plain:
        check = make_probe(plain.url)
        try:
            await run(check)
            await run(check)
        finally:
            await check.close()
    assert value(check, "llm_probe_server_split_total", split="absent") == 2
    assert value(check, "llm_probe_server_split_total", split="exact") == 0
    assert value(check, "llm_probe_server_timing_seconds_count", part="queue") == 0


async def test_probe_connection_tcp_statistics(sim: Simulator) -> None:
    check = make_probe(sim.url)
    try:
        await run(check)
        await run(check)  # the connection is reused: counted from where the first ended
    finally:
        await check.close()

    def v(name: str, **labels: str) -> float:
        return value(check, name, **labels)

    for family in ("llm_probe_tcp_rtt_seconds", "llm_probe_tcp_rttvar_seconds",
                   "llm_probe_tcp_min_rtt_seconds"):
        assert v(f"{family}_count") == 2, family
    # Loopback: microseconds to a few ms (delayed ACKs count in the smoothed RTT).
    assert 0 < v("llm_probe_tcp_min_rtt_seconds_sum") < 0.01
    assert 0 < v("llm_probe_tcp_rtt_seconds_sum") < 0.2
    sent = v("llm_probe_tcp_segments_total", segments="sent")
    received = v("llm_probe_tcp_segments_total", segments="received")
    # Two requests, their handshake, ACKs of 2 x (role + 8 token + usage + [DONE]) events.
    assert 4 <= sent < 200 and 2 <= received < 200, (sent, received)
    assert v("llm_probe_tcp_segments_total", segments="retransmitted") == 0
    assert v("llm_probe_tcp_segments_total", segments="out_of_order") == 0
    key = ("llm_probe_tcp_segments_total",
           tuple(sorted({**check.series_labels, "segments": "retransmitted"}.items())))
    assert key in published(check)  # published at 0, so the ratio has a numerator


# --- other engines' formats and a timing that cannot be right -----------------------------


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[list[dict[str, Any]]], Awaitable[str]]]:
    """An endpoint streaming one token, then these objects as its usage chunk(s)."""
    runners: list[web.AppRunner] = []

    async def _serve(tail: list[dict[str, Any]]) -> str:
        async def handler(request: web.Request) -> web.StreamResponse:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await asyncio.sleep(0.02)
            chunks = [{"choices": [{"index": 0, "delta": {"content": "hi"}}]},
                      *({"choices": [], "usage": {"completion_tokens": 1}, **t} for t in tail)]
            for chunk in chunks:
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        return f"http://127.0.0.1:{port}/v1/chat/completions"

    yield _serve
    for runner in runners:
        await runner.cleanup()


async def test_nim_stats_split_the_same_way(
    serve: Callable[[list[dict[str, Any]]], Awaitable[str]],
) -> None:
    """NIM's documented ``stats`` object (experimental, NIM 1.14)."""
    stats = {"type": "NIM LLM Model Stats", "version": "0.1.0", "llm_input_token_length": 5,
             "llm_output_token_length": 1, "generation_time_in_ms": 12.0,
             "time_in_queue_in_ms": 3.0,
             "response_tokens": {"response_token_length": 1, "time_to_first_token_in_ms": 9.0}}
    check = make_probe(await serve([{"stats": stats}]))
    try:
        await run(check)
    finally:
        await check.close()

    def v(part: str) -> float:
        return value(check, "llm_probe_server_timing_seconds_sum", part=part)

    assert value(check, "llm_probe_server_split_total", split="exact") == 1
    assert v("queue") == pytest.approx(0.003)
    assert v("prefill") == pytest.approx(0.009)
    assert v("decode") == pytest.approx(0.003)
    ttft = value(check, "llm_probe_time_to_first_token_seconds_sum")
    assert v("network_frontend") == pytest.approx(ttft - 0.012)  # the 20 ms server sleep


async def test_a_timing_longer_than_the_wait_is_inconsistent_not_a_split(
    serve: Callable[[list[dict[str, Any]]], Awaitable[str]],
) -> None:
    """A server claiming 10 s of queue for a 20 ms TTFT (seconds sent as milliseconds, a
    clock from the request's arrival at a gateway): counted, never published as parts; and
    an object that is not NIM's ``stats`` is no timing at all."""
    url = await serve([{"metrics": {"queue_time_ms": 10_000.0, "time_to_first_token_ms": 1.0}}])
    check = make_probe(url)
    other = make_probe(await serve([{"stats": {"queue": 1}}]))
    try:
        await run(check)
        await run(other)
    finally:
        await check.close()
        await other.close()
    assert value(check, "llm_probe_server_split_total", split="inconsistent") == 1
    assert value(check, "llm_probe_server_timing_seconds_count", part="queue") == 0
    assert value(other, "llm_probe_server_split_total", split="absent") == 1


def test_docs_example_config_parses() -> None:
    """The probe config of docs/probes.md's section on the split is copy-pasteable."""
    doc = (ROOT / "docs" / "probes.md").read_text(encoding="utf-8")
    section = doc.partition("## The engine's own timing and the kernel's view")[2]
    example = section.partition("```yaml\n")[2].partition("```")[0]
    [check] = probe.build(parse_config(example, "docs/probes.md"))
    assert check.name == "probe/chat"
