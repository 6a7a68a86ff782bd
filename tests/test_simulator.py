"""The engine simulator over real loopback HTTP: API shapes, faults, batching, metrics."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.checks.engine.table import FORMATS, sources_for
from exporter.simulator.faults import Faults
from exporter.simulator.tokens import count_tokens
from tests.support.procs import exporter_cmd, free_port, http_get
from tests.support.samples import Samples, parse, total
from tests.support.simulator import Simulator, StartSimulator

USER = [{"role": "user", "content": "Say something short about latency, please."}]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        yield s


# --- a small SSE client (the probe's own reader lives elsewhere) ---------------------------
@dataclass
class Stream:
    status: int
    t0: float
    headers: dict[str, str] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)
    error: str | None = None

    def data(self) -> list[str]:
        return [ev[len("data: "):] for _, ev in self.events if ev.startswith("data: ")]

    @property
    def done(self) -> bool:
        return bool(self.data()) and self.data()[-1] == "[DONE]"

    def chunks(self) -> list[dict[str, Any]]:
        out = []
        for text in self.data():
            if text == "[DONE]":
                continue
            try:
                out.append(json.loads(text))
            except json.JSONDecodeError:
                continue
        return out

    def token_events(self) -> list[tuple[float, str, str]]:
        """(time, content, reasoning) of chunks that carry generated text."""
        out = []
        for t, ev in self.events:
            if not ev.startswith("data: {"):
                continue
            try:
                chunk = json.loads(ev[len("data: "):])
            except json.JSONDecodeError:
                continue
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                content = delta.get("content") or choice.get("text") or ""
                reasoning = delta.get("reasoning_content") or ""
                if content or reasoning:
                    out.append((t, content, reasoning))
        return out

    def usage(self) -> dict[str, Any]:
        usage: list[dict[str, Any]] = [c["usage"] for c in self.chunks() if c.get("usage")]
        assert len(usage) == 1, self.events
        return usage[0]


async def stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], timeout: float = 20
) -> Stream:
    t0 = time.monotonic()
    async with session.post(
        url, json={**body, "stream": True}, timeout=aiohttp.ClientTimeout(total=timeout)
    ) as resp:
        result = Stream(resp.status, t0, dict(resp.headers))
        buf = b""
        try:
            async for piece in resp.content.iter_any():
                now = time.monotonic()
                buf += piece
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    result.events.append((now, event.decode()))
        except aiohttp.ClientError as exc:
            result.error = type(exc).__name__
    return result


def chat(max_tokens: int = 8, **extra: Any) -> dict[str, Any]:
    return {"messages": USER, "max_tokens": max_tokens, **extra}


async def scrape(session: aiohttp.ClientSession, url: str) -> Samples:
    """Every sample, via prometheus_client's parser."""
    async with session.get(url) as resp:
        assert resp.status == 200
        text = await resp.text()
    return parse(text)


# --- API shapes -----------------------------------------------------------------------------
async def test_chat_stream_role_chunk_tokens_usage_done(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True)
    s = await stream(session, f"{sim.base}/v1/chat/completions",
                     chat(6, stream_options={"include_usage": True}))
    assert s.status == 200 and s.headers["Content-Type"].startswith("text/event-stream")
    chunks = s.chunks()
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    # vLLM's first chunk carries only the role.
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tokens = s.token_events()
    text = "".join(content for _, content, _ in tokens)
    assert count_tokens(text) == 6 and len(tokens) == 6
    last = chunks[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 6
    assert last["usage"]["prompt_tokens"] == count_tokens(
        "user: Say something short about latency, please.\nassistant:")
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert s.done


async def test_streams_without_usage_and_completions_api(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True)
    s = await stream(session, f"{sim.base}/v1/chat/completions", chat(3))
    assert s.done and not any("usage" in c for c in s.chunks())

    s = await stream(session, f"{sim.base}/v1/completions",
                     {"prompt": "Once upon a time", "max_tokens": 4,
                      "stream_options": {"include_usage": True}})
    chunks = s.chunks()
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[0]["id"].startswith("cmpl-") and "text" in chunks[0]["choices"][0]
    assert len(s.token_events()) == 4 and s.usage()["completion_tokens"] == 4 and s.done


async def test_non_streaming_both_apis(simulator: StartSimulator, session: aiohttp.ClientSession) -> None:
    sim = simulator(fast=True)
    async with session.post(f"{sim.base}/v1/chat/completions", json=chat(5)) as resp:
        body = await resp.json()
    assert body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and count_tokens(message["content"]) == 5
    assert body["usage"]["completion_tokens"] == 5

    async with session.post(f"{sim.base}/v1/completions",
                            json={"prompt": ["tell me"], "max_tokens": 3}) as resp:
        body = await resp.json()
    assert body["object"] == "text_completion"
    assert count_tokens(body["choices"][0]["text"]) == 3
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5,
                             "prompt_tokens_details": {"cached_tokens": 0}}


async def test_natural_stop_models_and_errors(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True, output_len=4, kv_tokens=256)
    async with session.post(f"{sim.base}/v1/chat/completions", json=chat(200)) as resp:
        body = await resp.json()
    assert body["choices"][0]["finish_reason"] == "stop"
    assert 2 <= body["usage"]["completion_tokens"] <= 6
    async with session.post(f"{sim.base}/v1/chat/completions",
                            json=chat(20, ignore_eos=True)) as resp:
        assert (await resp.json())["usage"]["completion_tokens"] == 20

    async with session.get(f"{sim.base}/v1/models") as resp:
        models = await resp.json()
    assert [m["id"] for m in models["data"]] == ["simulated-model"]

    cases = [
        ({"model": "nope", "messages": USER}, 404, "NotFoundError"),
        ({"messages": USER, "max_tokens": 300}, 400, "BadRequestError"),  # > kv_tokens
        ({"messages": []}, 400, "BadRequestError"),
        ({"messages": USER, "n": 2}, 400, "BadRequestError"),
    ]
    for body, status, kind in cases:
        async with session.post(f"{sim.base}/v1/chat/completions", json=body) as resp:
            assert resp.status == status, body
            assert (await resp.json())["error"]["type"] == kind
    async with session.post(f"{sim.base}/v1/completions", data=b"{not json") as resp:
        assert resp.status == 400


# --- faults, switched at run time through the admin endpoint --------------------------------
async def set_faults(session: aiohttp.ClientSession, sim: Simulator, **faults: Any) -> dict[str, Any]:
    async with session.post(f"{sim.base}/admin/faults", json=faults) as resp:
        assert resp.status == 200, await resp.text()
        result: dict[str, Any] = await resp.json()
        return result


async def test_admin_switches_faults_at_run_time(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True)
    async with session.get(f"{sim.base}/admin/faults") as resp:
        assert (await resp.json()) == Faults().as_dict()
    url = f"{sim.base}/v1/chat/completions"

    assert (await set_faults(session, sim, error_rate=1))["error_rate"] == 1.0
    async with session.post(url, json=chat(2)) as resp:
        assert resp.status == 500
        assert (await resp.json())["error"]["code"] == 500
    await set_faults(session, sim, error_rate=0, rate_limit_rate=1.0)
    async with session.post(url, json=chat(2)) as resp:
        assert resp.status == 429 and resp.headers["Retry-After"] == "1"
    await set_faults(session, sim, rate_limit_rate=0)
    async with session.post(url, json=chat(2)) as resp:
        assert resp.status == 200

    async with session.post(f"{sim.base}/admin/faults",
                            json={"error_rate": 2, "bogus": 1, "role_chunk": "maybe"}) as resp:
        assert resp.status == 400
        errors = (await resp.json())["errors"]
    assert len(errors) == 3 and any("bogus" in e for e in errors)

    async with session.post(f"{sim.base}/admin/config",
                            json={"max_num_seqs": 3, "decode_step": 0.004}) as resp:
        config = await resp.json()
    assert config["runtime"]["max_num_seqs"] == 3 and config["fixed"]["kv_tokens"] == 32768
    async with session.post(f"{sim.base}/admin/config", json={"kv_tokens": 10}) as resp:
        assert resp.status == 400


@pytest.mark.parametrize("fmt", ["vllm", "trtllm", "triton"])
async def test_metrics_error_fault_breaks_only_the_metrics_endpoint(
    simulator: StartSimulator, session: aiohttp.ClientSession, fmt: str
) -> None:
    sim = simulator(fmt=fmt, fast=True)
    metrics_url = sim.metrics_url
    await set_faults(session, sim, metrics_error_rate=1)
    async with session.get(metrics_url) as resp:
        assert resp.status == 500
    async with session.post(f"{sim.base}/v1/chat/completions", json=chat(2)) as resp:
        assert resp.status == 200
    await set_faults(session, sim, metrics_error_rate=0)
    async with session.get(metrics_url) as resp:
        assert resp.status == 200


async def test_slow_first_token_and_keep_alive(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True)
    await set_faults(session, sim, slow_first_token=0.6, keep_alive=0.1)
    s = await stream(session, f"{sim.base}/v1/chat/completions", chat(3))
    first_token = s.token_events()[0][0]
    assert first_token - s.t0 >= 0.6
    comments = [t for t, ev in s.events if ev == ": keep-alive"]
    # <=: on a busy machine the last keep-alive and the first token can share one read.
    assert len(comments) >= 3 and max(comments) <= first_token
    # The engine's own TTFT and prefill time include the delay: client and server agree.
    samples = await scrape(session, sim.metrics_url)
    assert total(samples, "vllm:request_prefill_time_seconds_sum") >= 0.6
    assert total(samples, "vllm:time_to_first_token_seconds_sum") >= 0.6

    # Non-streaming: blank keep-alive lines before a body that still parses as JSON.
    async with session.post(f"{sim.base}/v1/chat/completions", json=chat(2)) as resp:
        raw = await resp.read()
    assert raw.startswith(b"\n\n") and json.loads(raw)["usage"]["completion_tokens"] == 2


async def test_stall_mid_stream(simulator: StartSimulator, session: aiohttp.ClientSession) -> None:
    sim = simulator(fast=True)
    await set_faults(session, sim, stall=0.5, mid_stream_after=3)
    s = await stream(session, f"{sim.base}/v1/chat/completions", chat(6))
    times = [t for t, _, _ in s.token_events()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 6 and s.done
    assert gaps[2] >= 0.5 and max(gaps[:2] + gaps[3:]) < 0.3
    samples = await scrape(session, sim.metrics_url)
    # The engine saw the same gap between output events.
    assert total(samples, "vllm:inter_token_latency_seconds_bucket", le="0.3") == 4


async def test_disconnect_mid_stream(simulator: StartSimulator, session: aiohttp.ClientSession) -> None:
    sim = simulator(fast=True)
    await set_faults(session, sim, disconnect_rate=1, mid_stream_after=2)
    s = await stream(session, f"{sim.base}/v1/chat/completions", chat(10))
    assert not s.done and s.error is not None and len(s.token_events()) == 2
    samples = await scrape(session, sim.metrics_url)
    assert total(samples, "vllm:request_success_total", finished_reason="abort") == 1
    assert total(samples, "vllm:num_requests_running") == 0

    with pytest.raises(aiohttp.ClientError):
        async with session.post(f"{sim.base}/v1/chat/completions", json=chat(10)) as resp:
            await resp.read()


async def test_hang(simulator: StartSimulator, session: aiohttp.ClientSession) -> None:
    sim = simulator(fast=True)
    await set_faults(session, sim, hang_rate=1)
    with pytest.raises(TimeoutError):
        async with session.post(f"{sim.base}/v1/chat/completions", json=chat(2),
                                timeout=aiohttp.ClientTimeout(total=0.5)):
            pass


async def test_malformed_event_and_stream_error(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True)
    url = f"{sim.base}/v1/chat/completions"
    await set_faults(session, sim, malformed_rate=1, mid_stream_after=2)
    s = await stream(session, url, chat(5))
    bad = [d for d in s.data() if d != "[DONE]" and not _is_json(d)]
    assert len(bad) == 1 and s.done and len(s.token_events()) == 5

    await set_faults(session, sim, malformed_rate=0, stream_error_rate=1)
    s = await stream(session, url, chat(8, stream_options={"include_usage": True}))
    errors = [c for c in s.chunks() if "error" in c]
    assert s.status == 200 and len(errors) == 1 and s.done
    assert len(s.token_events()) == 2
    assert not any(c.get("usage") for c in s.chunks())
    samples = await scrape(session, sim.metrics_url)
    assert total(samples, "vllm:request_success_total", finished_reason="error") == 1


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


async def test_role_chunk_off_reasoning_and_tokens_per_chunk(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True)
    url = f"{sim.base}/v1/chat/completions"
    await set_faults(session, sim, role_chunk=False, reasoning_tokens=3)
    s = await stream(session, url, chat(5, stream_options={"include_usage": True}))
    first = s.chunks()[0]["choices"][0]["delta"]
    assert "role" not in first and first.get("reasoning_content")
    events = s.token_events()
    assert [bool(r) for _, _, r in events] == [True, True, True, False, False]
    assert s.usage()["completion_tokens_details"] == {"reasoning_tokens": 3}

    await set_faults(session, sim, reasoning_tokens=0, tokens_per_chunk=3)
    s = await stream(session, url, chat(7, stream_options={"include_usage": True}))
    # The prefill step yields one token, then each decode step three (the last one fewer).
    assert [count_tokens(c) for _, c, _ in s.token_events()] == [1, 3, 3]
    assert s.usage()["completion_tokens"] == 7


# --- the continuous-batching model ----------------------------------------------------------
async def test_requests_beyond_max_num_seqs_wait(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True, max_num_seqs=2, decode_step_ms=10)
    url = f"{sim.base}/v1/chat/completions"
    tasks = [asyncio.create_task(stream(session, url, chat(40))) for _ in range(4)]
    seen: dict[str, float] = {}

    def both() -> bool:
        return seen.get("running") == 2 and seen.get("waiting") == 2

    while not both() and not all(t.done() for t in tasks):
        samples = await scrape(session, sim.metrics_url)
        seen = {"running": total(samples, "vllm:num_requests_running"),
                "waiting": total(samples, "vllm:num_requests_waiting")}
    assert both(), seen
    results = await asyncio.gather(*tasks)
    assert all(r.done for r in results)
    firsts = sorted(r.token_events()[0][0] - r.t0 for r in results)
    # The second pair started only when the first pair finished 40 tokens.
    assert firsts[2] > 0.4 > firsts[1]
    samples = await scrape(session, sim.metrics_url)
    assert total(samples, "vllm:request_queue_time_seconds_count") == 4
    assert total(samples, "vllm:request_queue_time_seconds_bucket", le="0.3") == 2


async def test_prefix_cache_hits_on_repeated_prefix(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True, block_size=16)
    shared = " ".join(f"word{i}" for i in range(100))  # 200 tokens of system prompt
    url = f"{sim.base}/v1/chat/completions"

    async def ask(question: str) -> dict[str, Any]:
        body = {"messages": [{"role": "system", "content": shared},
                             {"role": "user", "content": question}], "max_tokens": 2}
        async with session.post(url, json=body) as resp:
            usage: dict[str, Any] = (await resp.json())["usage"]
            return usage

    cold = await ask("first question")
    warm = await ask("a different question")
    assert cold["prompt_tokens_details"]["cached_tokens"] == 0
    cached = warm["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 192 and cached % 16 == 0 and cached < warm["prompt_tokens"]
    samples = await scrape(session, sim.metrics_url)
    assert total(samples, "vllm:prefix_cache_hits_total") == cached
    assert total(samples, "vllm:prefix_cache_queries_total") == (
        cold["prompt_tokens"] + warm["prompt_tokens"])
    # Prompt tokens count logical tokens, cache hits included (as vLLM does).
    assert total(samples, "vllm:prompt_tokens_total") == (
        cold["prompt_tokens"] + warm["prompt_tokens"])


async def test_preemption_under_tiny_kv_cache(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True, kv_tokens=128, block_size=16, max_num_seqs=4)
    url = f"{sim.base}/v1/completions"
    prompts = [f"request {i} " + "lorem ipsum dolor sit amet " * 3 for i in range(4)]
    results = await asyncio.gather(*(
        stream(session, url, {"prompt": p, "max_tokens": 40, "ignore_eos": True,
                              "stream_options": {"include_usage": True}})
        for p in prompts
    ))
    # Every stream completes in full despite being preempted and recomputed.
    assert all(r.done and r.usage()["completion_tokens"] == 40 for r in results)
    assert all(len(r.token_events()) == 40 for r in results)
    samples = await scrape(session, sim.metrics_url)
    assert total(samples, "vllm:num_preemptions_total") > 0
    assert total(samples, "vllm:request_success_total", finished_reason="length") == 4
    assert total(samples, "vllm:kv_cache_usage_perc") == 0


async def test_client_disconnect_aborts_and_frees(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True, decode_step_ms=20)
    async with session.post(f"{sim.base}/v1/chat/completions",
                            json=chat(200, stream=True)) as resp:
        await resp.content.readline()
    async def aborted() -> bool:
        samples = await scrape(session, sim.metrics_url)
        return (total(samples, "vllm:request_success_total", finished_reason="abort") == 1
                and total(samples, "vllm:num_requests_running") == 0)
    deadline = time.monotonic() + 5
    while not await aborted():
        assert time.monotonic() < deadline, "abort not recorded"
        await asyncio.sleep(0.05)


async def test_models_and_data_parallel_ranks(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True, dp_ranks=2, model=("big", "small"))
    url = f"{sim.base}/v1/chat/completions"
    # Concurrent, so the least-loaded routing spreads them over both ranks.
    await asyncio.gather(*(stream(session, url, chat(20, model="big")) for _ in range(4)))
    await stream(session, url, chat(2, model="small"))
    samples = await scrape(session, sim.metrics_url)
    for rank in ("0", "1"):
        assert total(samples, "vllm:e2e_request_latency_seconds_count",
                     model_name="big", engine=rank) == 2
    assert total(samples, "vllm:e2e_request_latency_seconds_count", model_name="small") == 1
    async with session.post(url, json=chat(2)) as resp:
        assert (await resp.json())["model"] == "big"  # no model: the first served name


async def test_a_pinning_router_queues_on_the_last_rank_while_its_peer_idles(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    sim = simulator(fast=True, dp_ranks=2, max_num_seqs=1, decode_step_ms=10)
    await set_faults(session, sim, dp_pin_rate=1)
    url = f"{sim.base}/v1/chat/completions"
    tasks = [asyncio.create_task(stream(session, url, chat(30))) for _ in range(4)]
    seen: dict[str, float] = {}

    def piled() -> bool:
        return seen == {"running 1": 1, "waiting 1": 3, "running 0": 0, "waiting 0": 0}

    while not piled() and not all(t.done() for t in tasks):
        samples = await scrape(session, sim.metrics_url)
        seen = {f"{what} {rank}": total(samples, f"vllm:num_requests_{what}", engine=rank)
                for what in ("running", "waiting") for rank in ("0", "1")}
    assert piled(), seen
    assert all(r.done for r in await asyncio.gather(*tasks))
    samples = await scrape(session, sim.metrics_url)
    assert total(samples, "vllm:e2e_request_latency_seconds_count", engine="1") == 4
    assert total(samples, "vllm:e2e_request_latency_seconds_count", engine="0") == 0
    # Off again: least-loaded routing spreads concurrent requests over both ranks.
    await set_faults(session, sim, dp_pin_rate=0)
    await asyncio.gather(*(stream(session, url, chat(20)) for _ in range(2)))
    samples = await scrape(session, sim.metrics_url)
    assert total(samples, "vllm:e2e_request_latency_seconds_count", engine="0") == 1


# --- formats ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
async def test_every_format_renders_every_table_row(
    fmt: str, simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    # The rows of speculative decoding and P/D render with those features on.
    sim = simulator(fmt=fmt, fast=True, speculative_tokens=2, pd=True)
    for _ in range(2):
        await stream(session, f"{sim.base}/v1/completions", {"prompt": "hello " * 20,
                                                             "max_tokens": 3})
    async with session.get(sim.metrics_url) as resp:
        assert resp.status == 200 and resp.content_type == "text/plain"
        families = {f.name: f for f in text_string_to_metric_families(await resp.text())}
    for source in sources_for(fmt):
        base = source.name.removesuffix("_total") if source.kind == "counter" else source.name
        family = families[base]
        assert family.type == source.kind.value, source.name
        matching = [s for s in family.samples
                    if all(s.labels.get(k) == v for k, v in source.match.items())]
        assert matching, source.name
        # A row with no model label is the API server's own (its process's CPU).
        model_label = next((k for k, v in source.labels.items() if v == "model"), None)
        assert model_label is None or {s.labels[model_label] for s in matching} == {
            "simulated-model"}, source.name


async def test_format_endpoints(simulator: StartSimulator, session: aiohttp.ClientSession) -> None:
    trt = simulator(fmt="trtllm", fast=True)
    await stream(session, f"{trt.base}/v1/completions", {"prompt": "hi", "max_tokens": 3})
    async with session.get(f"{trt.base}/metrics") as resp:
        assert resp.content_type == "application/json"
        stats = await resp.json()
    assert stats and {"iter", "iterLatencyMS", "kvCacheStats"} <= set(stats[0])
    async with session.get(f"{trt.base}/metrics") as resp:
        assert await resp.json() == []  # drained by the previous read

    triton = simulator(fmt="triton", fast=True)
    await stream(session, f"{triton.base}/v1/completions", {"prompt": "hi", "max_tokens": 3})
    async with session.get(f"{triton.base}/metrics") as resp:
        assert resp.status == 404  # Triton's metrics are on their own port
    samples = await scrape(session, triton.metrics_url)
    # prometheus_client's parser names samples of a counter without `_total` with it.
    duration = total(samples, "nv_inference_request_duration_us_total")
    assert duration == int(duration) and duration > 0  # whole microseconds, as Triton
    assert total(samples, "nv_inference_request_success_total") == 1


# --- the acceptance: queue-time share under overload, then after it ----------------------------
async def test_queue_share_rises_under_overload_and_falls_after(
    simulator: StartSimulator, session: aiohttp.ClientSession
) -> None:
    base = simulator(max_num_seqs=4, decode_step_ms=5, decode_step_per_seq_ms=1).base
    url = f"{base}/v1/completions"
    body = {"prompt": "measure the queue", "max_tokens": 20, "ignore_eos": True}

    async def one() -> None:
        async with session.post(url, json=body) as resp:
            assert resp.status == 200
            await resp.read()

    def share(before: Samples, after: Samples) -> float:
        queue = (total(after, "vllm:request_queue_time_seconds_sum")
                 - total(before, "vllm:request_queue_time_seconds_sum"))
        e2e = (total(after, "vllm:e2e_request_latency_seconds_sum")
               - total(before, "vllm:e2e_request_latency_seconds_sum"))
        return queue / e2e

    # About 2x capacity: 4 sequences of ~20 steps of ~9 ms serve ~20 requests/s.
    before = await scrape(session, f"{base}/metrics")
    load = []
    for _ in range(80):
        load.append(asyncio.create_task(one()))
        await asyncio.sleep(1 / 40)
    await asyncio.gather(*load)
    overload = await scrape(session, f"{base}/metrics")
    assert share(before, overload) > 0.5

    for _ in range(8):
        await one()
    light = await scrape(session, f"{base}/metrics")
    assert share(overload, light) < 0.2


# --- CLI -------------------------------------------------------------------------------------
def test_cli_help_has_examples() -> None:
    out = subprocess.run(exporter_cmd("simulate", "--help"), capture_output=True, text=True,
                         check=True).stdout
    assert "examples:" in out and "/admin/faults" in out and "not an inference engine" in out


def test_cli_rejects_bad_flags() -> None:
    result = subprocess.run(
        exporter_cmd("simulate", "--fault", "nope=1", "--fault", "stall=-1",
                     "--format", "triton", "--dp-ranks", "2"),
        capture_output=True, text=True,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)


def test_cli_prints_urls_and_stops_on_sigterm(simulator: StartSimulator) -> None:
    # Ready means the URLs were printed (and /health answers).
    sim = simulator(fmt="triton", metrics_port=free_port(), fault="keep_alive=0.5")
    proc, port = sim.proc, sim.port
    assert "metrics" in proc.output()
    assert f"http://127.0.0.1:{port}/v1" in proc.output()
    assert json.loads(http_get(f"http://127.0.0.1:{port}/admin/faults")[1])["keep_alive"] == 0.5
    proc.signal(signal.SIGTERM)
    assert proc.popen.wait(10) == 0
