"""The probe check over real loopback HTTP: the simulator as a subprocess for engine faults,
small in-test servers for what the simulator cannot do (TLS, silence, garbage, no tokens).
Metrics are read back from the check's batch, as /metrics renders it."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import ssl
import statistics
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from exporter.checks.probe import check as probe
from exporter.checks.probe.check import EndpointBusy, EndpointGate, ProbeCheck, ProbeFailed
from exporter.config.load import parse_config
from exporter.probing.timing import Arrivals, pieces
from exporter.runtime.app import App
from exporter.runtime.scheduler import Scheduler
from tests.support.procs import free_port
from tests.support.samples import find, parse, published, total
from tests.support.simulator import Simulator, running_simulator

MODEL = "simulated-model"


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with running_simulator(fmt="vllm", fast=True) as running:
        yield running


@pytest.fixture
def healthy(sim: Simulator) -> Simulator:
    sim.faults()
    return sim


def make_probe(url: str, **over: Any) -> ProbeCheck:
    entry = {"name": "p", "url": url, "model": MODEL, "max_tokens": 8, "min_spacing": "1ms",
             **over}
    config = parse_config(yaml.safe_dump({"probes": [entry]}))
    [check] = probe.build(config)
    assert isinstance(check, ProbeCheck)
    return check


async def run(check: ProbeCheck) -> str | None:
    """One probe run; the failure message, or None when it succeeded."""
    try:
        await check.run()
    except ProbeFailed as exc:
        return str(exc)
    return None


def value(name: str, check: ProbeCheck, **labels: str) -> float | None:
    """The sample of exactly these labels (the probe's and ``labels``) in the check's batch."""
    return published(check).get((name, tuple(sorted({**check.series_labels, **labels}.items()))))


async def outcome_of(url: str, **over: Any) -> tuple[str, str | None, ProbeCheck]:
    """(outcome counted, failure message, the check) of one probe run."""
    check = make_probe(url, **over)
    try:
        message = await run(check)
    finally:
        await check.close()
    counted = [labels["outcome"] for labels, v in find(published(check), "llm_probe_requests_total")
               if v == 1]
    assert len(counted) == 1, counted
    return counted[0], message, check


# --- success path and the stream rules against the simulator ------------------------------


async def test_ok_probe_records_every_family(healthy: Simulator) -> None:
    check = make_probe(healthy.url, api_key={"env": "PROBE_TEST_KEY"})
    try:
        assert await run(check) is None
        assert await run(check) is None  # within keep-alive: the connection is reused
    finally:
        await check.close()

    def v(name: str, **labels: str) -> float | None:
        return value(name, check, **labels)

    assert check.endpoint == healthy.target
    assert v("llm_probe_requests_total", outcome="ok") == 2
    assert v("llm_probe_requests_total", outcome="http_5xx") == 0  # pre-created
    assert v("llm_probe_time_to_first_token_seconds_count") == 2
    assert v("llm_probe_time_to_first_content_seconds_count") == 2
    assert v("llm_probe_e2e_latency_seconds_count") == 2
    assert v("llm_probe_time_per_output_token_seconds_count") == 2
    assert v("llm_probe_stall_seconds_count") == 2
    # One chunk per token here: 8 tokens make 7 gaps per probe.
    assert v("llm_probe_inter_token_latency_seconds_count") == 14
    assert v("llm_probe_output_tokens_total", source="usage") == 16
    assert v("llm_probe_output_tokens_total", source="chunks") is None
    prompt = v("llm_probe_prompt_tokens_total")
    assert prompt is not None and prompt > 10
    assert v("llm_probe_cached_prompt_tokens_total") == 0  # unique nonce: no prefix hit
    assert v("llm_probe_slo_good_total") == 2
    last = v("llm_probe_last_success_timestamp_seconds")
    assert last is not None and abs(last - time.time()) < 30
    ttft_sum = v("llm_probe_time_to_first_token_seconds_sum")
    e2e_sum = v("llm_probe_e2e_latency_seconds_sum")
    assert ttft_sum is not None and e2e_sum is not None and 0 < ttft_sum < e2e_sum
    assert v("llm_probe_phase_seconds_count", phase="connect", connection="new") == 1
    assert v("llm_probe_phase_seconds_count", phase="first_byte", connection="new") == 1
    assert v("llm_probe_phase_seconds_count", phase="first_byte", connection="reused") == 1
    assert v("llm_probe_phase_seconds_count", phase="request_sent", connection="reused") == 1
    assert v("llm_probe_phase_seconds_count", phase="connect", connection="reused") is None
    assert v("llm_probe_phase_seconds_count", phase="tls", connection="new") is None  # http


@pytest.fixture(autouse=True)
def _probe_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROBE_TEST_KEY", "sk-probe-secret-123")


async def send_once(check: ProbeCheck) -> Any:
    """The probe's own request path, returning the full result for timing assertions."""
    try:
        return await check._client.send(check.request(), check.timeouts)
    finally:
        await check.close()


async def test_role_chunk_before_first_token_does_not_stop_ttft(healthy: Simulator) -> None:
    # The role chunk goes out at admission; the first token a second later.
    healthy.faults(slow_first_token=1.0, keep_alive=0.2)
    res = await send_once(make_probe(healthy.url))
    s = res.stream
    assert res.ok, res.detail
    assert s.first_event_at - s.start < 0.5  # the role chunk (and keep-alives) came early
    assert s.ttft >= 1.0


async def test_reasoning_stream_ttft_and_ttfc(healthy: Simulator) -> None:
    healthy.faults(reasoning_tokens=4)
    res = await send_once(make_probe(healthy.url, max_tokens=10))
    s = res.stream
    assert res.ok, res.detail
    # TTFT at the first reasoning delta, TTFC at the first content delta (the fifth token).
    assert s.token_times[0] - s.start == s.ttft
    assert s.first_content_at == s.token_times[4]
    assert s.ttfc > s.ttft
    assert s.output_tokens == 10


async def test_several_tokens_per_chunk_count_from_usage(healthy: Simulator) -> None:
    healthy.faults(tokens_per_chunk=3)
    check = make_probe(healthy.url, max_tokens=12)
    try:
        assert await run(check) is None
    finally:
        await check.close()
    assert value("llm_probe_output_tokens_total", check, source="usage") == 12
    # 12 tokens in 3-token chunks (the prefill step yields one): a handful of inter-chunk
    # gaps, not the 11 a chunk-per-token count would give.
    gaps = value("llm_probe_inter_token_latency_seconds_count", check)
    assert gaps is not None and 3 <= gaps <= 4


async def test_completions_api_and_base_url(healthy: Simulator) -> None:
    base = f"http://127.0.0.1:{healthy.port}"
    check = make_probe(base, api="completions")
    assert check.url == f"{base}/v1/completions"
    res = await send_once(check)
    assert res.ok and res.stream.output_tokens == 8


async def test_profiles_nonce_and_prefix_cache(healthy: Simulator) -> None:
    entries = [
        {"name": "long", "url": healthy.url, "model": MODEL, "profile": "long_context",
         "prompt_tokens": 600, "min_spacing": "1ms"},
        {"name": "cached", "url": healthy.url, "model": MODEL, "profile": "cached",
         "prompt_tokens": 600, "min_spacing": "1ms"},
    ]
    long, cached = probe.build(parse_config(yaml.safe_dump({"probes": entries})))
    assert isinstance(long, ProbeCheck) and isinstance(cached, ProbeCheck)
    first, second = long.request(), long.request()
    assert first.prompt[:20] != second.prompt[:20]  # a fresh nonce in front every time
    assert first.max_tokens == 1
    a, b = cached.request(), cached.request()
    assert a.prompt[:2000] == b.prompt[:2000] and a.prompt != b.prompt
    try:
        for _ in range(2):
            assert await run(long) is None
            assert await run(cached) is None
    finally:
        await long.close()
        await cached.close()
    prompt = value("llm_probe_prompt_tokens_total", long)
    assert prompt is not None and 2 * 480 <= prompt <= 2 * 720  # about 600 per request
    assert value("llm_probe_output_tokens_total", long, source="usage") == 2
    assert value("llm_probe_cached_prompt_tokens_total", long) == 0
    hits = value("llm_probe_cached_prompt_tokens_total", cached)
    assert hits is not None and hits >= 400  # the second cached probe hit the fixed prefix


# --- every fault lands in its outcome -----------------------------------------------------

SHORT = {"timeouts": {"connect": "1s", "first_token": "700ms", "total": "1500ms"}}


@pytest.mark.parametrize(
    ("faults", "over", "expected"),
    [
        ({"error_rate": 1.0}, {}, "http_5xx"),
        ({"rate_limit_rate": 1.0}, {}, "rate_limited"),
        ({}, {"model": "no-such-model"}, "http_4xx"),
        ({"hang_rate": 1.0}, SHORT, "timeout_first_token"),
        ({"slow_first_token": 3.0, "keep_alive": 0.1}, SHORT, "timeout_first_token"),
        ({"stall": 3.0, "mid_stream_after": 3}, SHORT, "timeout_total"),
        ({"disconnect_rate": 1.0, "mid_stream_after": 3}, {}, "stream_reset"),
        ({"stream_error_rate": 1.0, "mid_stream_after": 3}, {}, "stream_error"),
        ({"malformed_rate": 1.0, "mid_stream_after": 3}, {}, "protocol_error"),
        ({}, {"max_tokens": 200, "max_response_bytes": 2048}, "protocol_error"),
    ],
)
async def test_simulator_fault_outcomes(
    sim: Simulator, faults: dict[str, Any], over: dict[str, Any], expected: str
) -> None:
    sim.faults(**faults)
    started = time.monotonic()
    outcome, message, check = await outcome_of(sim.url, **over)
    elapsed = time.monotonic() - started
    assert outcome == expected, message
    assert message is not None and message.startswith(expected)
    assert value("llm_probe_time_to_first_token_seconds_count", check) is None
    if expected.startswith("timeout"):
        limit = 0.7 if expected == "timeout_first_token" else 1.5
        assert limit <= elapsed < limit + 0.5  # cut at its own deadline, not the scheduler's


async def test_connection_refused_is_connect_error() -> None:
    outcome, message, _ = await outcome_of(f"http://127.0.0.1:{free_port()}/v1/chat/completions")
    assert outcome == "connect_error", message


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[int]]]:
    """Start a small aiohttp app on a free loopback port (optionally TLS)."""
    runners: list[web.AppRunner] = []

    async def _serve(handler: Any, ssl_context: ssl.SSLContext | None = None,
                     host: str = "127.0.0.1") -> int:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
        runners.append(runner)
        return port

    yield _serve
    for runner in runners:
        await runner.cleanup()


def sse(obj: Any) -> bytes:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()


async def stream_response(request: web.Request, events: list[bytes]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for event in events:
        await resp.write(event)
    await resp.write_eof()
    return resp


async def test_stream_without_tokens_is_empty(
    serve: Callable[..., Awaitable[int]],
) -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream_response(request, [
            sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0}}),
            sse("[DONE]"),
        ])

    port = await serve(handler)
    outcome, message, _ = await outcome_of(f"http://127.0.0.1:{port}/v1/chat/completions")
    assert outcome == "empty", message


async def test_garbage_http_response_is_protocol_error() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HELLO THERE\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        outcome, message, _ = await outcome_of(f"http://127.0.0.1:{port}/v1/chat/completions")
    finally:
        server.close()
    assert outcome == "protocol_error", message


async def test_silent_tls_server_is_timeout_connect() -> None:
    # TCP accepts, the TLS handshake never completes: the connection is never ready.
    held: list[asyncio.StreamWriter] = []

    async def silent(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        started = time.monotonic()
        outcome, message, _ = await outcome_of(
            f"https://127.0.0.1:{port}/v1/chat/completions",
            timeouts={"connect": "400ms", "first_token": "5s", "total": "10s"},
        )
        assert 0.4 <= time.monotonic() - started < 1.0
    finally:
        for w in held:
            w.close()
        server.close()
    assert outcome == "timeout_connect", message


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


async def test_tls_phases_auth_header_and_private_ca(
    serve: Callable[..., Awaitable[int]], tls_files: tuple[Path, Path]
) -> None:
    cert, key = tls_files
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        seen["auth"] = request.headers.get("Authorization")
        seen["body"] = await request.json()
        await asyncio.sleep(0.05)  # server-side "prefill", after the connection is set up
        return await stream_response(request, [
            sse({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}),
            sse({"choices": [{"index": 0, "delta": {"content": " there"}}]}),
            sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
            sse("[DONE]"),
        ])

    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    # A slow handshake (the callback blocks the server mid-handshake) must show in the tls
    # phase and not in TTFT.
    ctx.sni_callback = lambda *_: time.sleep(0.3)
    port = await serve(handler, ssl_context=ctx, host="localhost")
    check = make_probe(f"https://localhost:{port}", ca_file=str(cert),
                       api_key={"env": "PROBE_TEST_KEY"})
    try:
        assert await run(check) is None
    finally:
        await check.close()
    assert seen["auth"] == "Bearer sk-probe-secret-123"
    body = seen["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 8 and body["messages"][0]["role"] == "user"
    phases = {
        p: value("llm_probe_phase_seconds_sum", check, phase=p, connection="new")
        for p in ("dns", "connect", "tls", "request_sent", "first_byte")
    }
    assert all(v is not None and v >= 0 for v in phases.values()), phases
    ttft = value("llm_probe_time_to_first_token_seconds_sum", check)
    assert phases["tls"] is not None and phases["tls"] >= 0.3
    # The server's 50 ms before the first token is in TTFT; the 300 ms handshake is not.
    assert ttft is not None and 0.05 <= ttft < 0.3


async def test_untrusted_certificate_is_connect_error(
    serve: Callable[..., Awaitable[int]], tls_files: tuple[Path, Path]
) -> None:
    cert, key = tls_files
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text="never reached")

    port = await serve(handler, ssl_context=ctx)
    outcome, message, _ = await outcome_of(f"https://127.0.0.1:{port}/v1/chat/completions")
    assert outcome == "connect_error", message


# --- safety: gate, logging, isolation ----------------------------------------------------


async def test_gate_caps_concurrency_and_spaces_starts() -> None:
    gate = EndpointGate(max_concurrency=2, min_spacing=0.1)
    starts: list[float] = []
    inside = 0
    peak = 0

    async def one() -> None:
        nonlocal inside, peak
        async with gate.slot():
            starts.append(time.monotonic())
            inside += 1
            peak = max(peak, inside)
            await asyncio.sleep(0.15)
            inside -= 1

    await asyncio.gather(*(one() for _ in range(4)))
    assert peak == 2
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.095, gaps

    async def hold() -> None:
        async with gate.slot():
            await asyncio.sleep(0.5)

    holders = [asyncio.create_task(hold()) for _ in range(2)]
    await asyncio.sleep(0.25)
    with pytest.raises(EndpointBusy):
        async with gate.slot(wait=0.1):
            pass
    await asyncio.gather(*holders)


def test_probes_sharing_an_endpoint_share_the_strictest_gate() -> None:
    url = "http://127.0.0.1:9/v1/chat/completions"
    config = parse_config(yaml.safe_dump({"probes": [
        {"name": "a", "url": url, "model": "m", "max_concurrency": 4, "min_spacing": "2s"},
        {"name": "b", "url": url.replace("/v1/chat/completions", ""), "model": "m",
         "max_concurrency": 1, "min_spacing": "100ms"},
        {"name": "c", "url": "http://127.0.0.1:10/v1/completions", "model": "m",
         "api": "completions"},
    ]}))
    a, b, c = probe.build(config)
    assert isinstance(a, ProbeCheck) and isinstance(b, ProbeCheck) and isinstance(c, ProbeCheck)
    assert a.gate is b.gate and a.gate is not c.gate
    assert (a.gate.max_concurrency, a.gate.min_spacing) == (1, 2.0)
    assert a.timeout > a.cfg.timeouts.total  # the probe's deadline decides, not the scheduler's
    assert "sk-" not in a.describe() and a.describe() == "chat 127.0.0.1:9 model=m profile=short"


async def test_failures_are_logged_without_prompt_key_or_body(
    sim: Simulator, caplog: pytest.LogCaptureFixture
) -> None:
    sim.faults(stream_error_rate=1.0, mid_stream_after=2)
    check = make_probe(sim.url, api_key={"env": "PROBE_TEST_KEY"})
    scheduler = Scheduler([check])
    spec = check.request()
    with caplog.at_level(logging.DEBUG):
        assert await scheduler.run_once(check) == "error"  # the scheduler counts it too
    await check.close()
    assert value("llm_probe_requests_total", check, outcome="stream_error") == 1
    text = caplog.text + scheduler.state[check.name].last_error
    assert "stream_error" in text
    assert "sk-probe-secret-123" not in text
    assert spec.prompt.split("]")[0] not in text  # not even the nonce


async def test_hanging_endpoint_delays_no_other_probe_or_metrics(sim: Simulator) -> None:
    sim.faults()
    held: list[asyncio.StreamWriter] = []

    async def hang(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # reads the request, never answers

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    hang_port = server.sockets[0].getsockname()[1]
    port = free_port()
    config = parse_config(yaml.safe_dump({
        "server": {"listen_address": f"127.0.0.1:{port}"},
        "probes": [
            {"name": "stuck", "url": f"http://127.0.0.1:{hang_port}", "model": MODEL,
             "interval": "1s", "timeouts": {"first_token": "800ms", "total": "1s"}},
            {"name": "fine", "url": sim.url, "model": MODEL, "interval": "300ms", "min_spacing": "50ms",
             "max_tokens": 4},
        ],
    }))
    app = App(config, "test.yaml")
    await app.start()
    try:
        latencies = []
        async with aiohttp.ClientSession() as session:
            t_end = time.monotonic() + 3.5
            while time.monotonic() < t_end:
                t0 = time.monotonic()
                async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    text = await resp.text()
                latencies.append(time.monotonic() - t0)
                await asyncio.sleep(0.05)
    finally:
        await app.shutdown()
        for w in held:
            w.close()
        server.close()
    assert statistics.median(latencies) < 0.1 and max(latencies) < 0.5, latencies
    samples = parse(text)

    def probe_count(name: str, outcome: str) -> float:
        return total(samples, "llm_probe_requests_total", probe=name, outcome=outcome)

    def runs(check: str, outcome: str) -> float:
        return total(samples, "llm_exporter_check_runs_total", check=check, outcome=outcome)

    assert probe_count("stuck", "timeout_first_token") >= 2
    assert runs("probe/stuck", "error") >= 2 and runs("probe/stuck", "timeout") == 0
    # The healthy probe kept its 300 ms schedule: ~10 runs in 3.5 s, all ok.
    assert probe_count("fine", "ok") >= 8, probe_count("fine", "ok")
    assert runs("probe/fine", "error") == 0


def test_docs_example_config_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "probes.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("LLM_API_KEY", "sk-doc")
    config = parse_config(example, "docs/probes.md")
    checks = probe.build(config)
    assert [c.name for c in checks] == ["probe/chat", "probe/prefill-32k", "probe/prefix-cache"]
    chat, prefill, cached = checks
    assert isinstance(chat, ProbeCheck) and isinstance(prefill, ProbeCheck)
    assert isinstance(cached, ProbeCheck)
    assert prefill.request().max_tokens == 1
    # Three probes on one endpoint: one gate with the strictest limits.
    assert chat.gate is cached.gate is prefill.gate
    assert (cached.gate.max_concurrency, cached.gate.min_spacing) == (1, 2.0)


def test_body_bytes_keep_their_arrival_times() -> None:
    arrivals = Arrivals(proto=object(), start=4)
    # Bytes 0-4 came with the headers; then socket reads ended at bytes 10 (t=1), 10 again
    # (framing only, t=2), 16 (t=3) and 20 (t=4).
    arrivals.marks.extend([(10, 1.0), (10, 2.0), (16, 3.0), (20, 4.0)])
    data = bytes(range(14))  # one readany() of body bytes 0-13, done at t=9
    assert list(pieces(data, 0, 9.0, arrivals)) == [
        (data[:4], 9.0), (data[4:10], 1.0), (data[10:14], 3.0)
    ]
    # The rest of the stretch that ended at 16, then the next one.
    assert list(pieces(bytes(6), 14, 9.5, arrivals)) == [(bytes(2), 3.0), (bytes(4), 4.0)]
    assert not arrivals.marks
    # Without marks (another path fed the buffer), bytes keep the read time.
    assert list(pieces(b"xy", 20, 10.0, arrivals)) == [(b"xy", 10.0)]
    assert list(pieces(b"xy", 0, 10.0, None)) == [(b"xy", 10.0)]
