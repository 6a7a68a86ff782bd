"""The simulator's HTTP side: OpenAI-compatible API, metrics in the chosen format, admin.

Routes (API port):
  POST /v1/chat/completions, POST /v1/completions   streaming (SSE) and not
  GET  /v1/models, GET /health
  GET  /metrics                   vllm, vllm-legacy, sglang: Prometheus text
                                  trtllm: JSON iteration stats (drained on read), as trtllm-serve
  GET  /prometheus/metrics        trtllm: Prometheus text
  GET|POST /admin/faults          current fault settings; a JSON object merges into them
  GET|POST /admin/config          engine knobs that may change at run time
Triton's metrics are on their own port (default API port + 2, as Triton's 8002) at /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from exporter.checks.engine.table import FORMATS
from exporter.simulator import render
from exporter.simulator.engine import (
    Engine,
    EngineConfig,
    Output,
    Scheduled,
    SeqFaults,
    Sequence,
)
from exporter.simulator.faults import FaultError, Faults, Plan
from exporter.simulator.openai import (
    Api,
    BadRequest,
    CompletionRequest,
    Responses,
    Usage,
    error_body,
    parse,
    sse,
)
from exporter.simulator.stats import EngineStats, Store
from exporter.simulator.tokens import tokenize

log = logging.getLogger(__name__)

DEFAULT_MODEL = "simulated-model"
# vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE default: probes more than 5 s apart reconnect.
KEEPALIVE_SECONDS = 5.0
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    #: Triton only; None means port + 2.
    metrics_port: int | None = None
    format: str = "vllm"
    models: tuple[str, ...] = (DEFAULT_MODEL,)
    dp_ranks: int = 1
    seed: int = 0
    engine: EngineConfig = field(default_factory=EngineConfig)
    faults: Faults = field(default_factory=Faults)

    def problems(self) -> list[str]:
        out = self.engine.problems()
        if self.format not in FORMATS:
            out.append(f"--format: {self.format!r} is not one of {', '.join(FORMATS)}")
        elif self.dp_ranks > 1 and not render.has_dp_label(self.format):
            out.append(f"--dp-ranks: the {self.format} format has no data-parallel label")
        if self.dp_ranks < 1:
            out.append("--dp-ranks: must be at least 1")
        for flag, port in (("--port", self.port), ("--metrics-port", self.metrics_port)):
            if port is not None and not 1 <= port <= 65535:
                out.append(f"{flag}: {port} is not a TCP port (1-65535)")
        if not self.models or len(set(self.models)) != len(self.models):
            out.append("--model: give each served model name once")
        return out

    @property
    def triton_metrics_port(self) -> int:
        return self.metrics_port if self.metrics_port is not None else self.port + 2


class Simulator:
    """The engines (one per model and data-parallel rank), their stats, and the faults."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.format = settings.format
        #: Shared by every engine, so /admin/config changes them all at once.
        self.config = settings.engine
        self.faults = settings.faults
        self.rng = random.Random(settings.seed)
        self.store = Store()
        # SGLang labels dp_rank only when it runs data-parallel.
        self.hidden_labels = (
            {"dp_rank"} if settings.format == "sglang" and settings.dp_ranks == 1 else set()
        )
        self.engines: dict[str, list[tuple[Engine, EngineStats]]] = {}
        for model in settings.models:
            ranks = []
            for rank in range(settings.dp_ranks):
                stats = EngineStats(self.store, settings.format, model, rank)
                ranks.append((Engine(model, rank, self.config, stats), stats))
            self.engines[model] = ranks

    def start(self) -> None:
        for ranks in self.engines.values():
            for engine, _ in ranks:
                engine.start()

    async def stop(self) -> None:
        for ranks in self.engines.values():
            for engine, _ in ranks:
                await engine.stop()

    def all_engines(self) -> list[Engine]:
        return [engine for ranks in self.engines.values() for engine, _ in ranks]

    def route(self, model: str) -> Engine:
        """Least-loaded data-parallel rank, as a DP load balancer would pick."""
        return min((engine for engine, _ in self.engines[model]), key=lambda e: e.load)

    def exposition(self) -> bytes:
        for ranks in self.engines.values():
            for engine, stats in ranks:
                stats.sample(engine)
        return render.exposition(self.store, self.format, self.hidden_labels).encode()


SIM: web.AppKey[Simulator] = web.AppKey("simulator", Simulator)


def _dumps(payload: object) -> str:
    # Compact, as vLLM's FastAPI responses are.
    return json.dumps(payload, separators=(",", ":"))


def _json(payload: object, status: int = 200, headers: dict[str, str] | None = None
          ) -> web.Response:
    return web.json_response(payload, status=status, headers=headers, dumps=_dumps)


def _error(message: str, status: int, param: str | None = None,
           headers: dict[str, str] | None = None) -> web.Response:
    return _json(error_body(message, status, param), status=status, headers=headers)


# --- OpenAI API -------------------------------------------------------------------------
async def handle_chat(request: web.Request) -> web.StreamResponse:
    return await _complete(request, "chat")


async def handle_completions(request: web.Request) -> web.StreamResponse:
    return await _complete(request, "completions")


async def _complete(request: web.Request, api: Api) -> web.StreamResponse:
    arrival = time.monotonic()
    sim = request.app[SIM]
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error("the request body is not valid JSON", 400)
    try:
        req = parse(api, body)
    except BadRequest as exc:
        return _error(exc.message, exc.status, exc.param)
    model = req.model or sim.settings.models[0]
    if model not in sim.engines:
        return _error(f"The model `{model}` does not exist.", 404, "model")
    prompt = tokenize(req.prompt)
    limit = sim.config.max_model_len
    max_tokens = req.max_tokens or max(1, limit - len(prompt))
    if len(prompt) + max_tokens > limit:
        return _error(
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{len(prompt) + max_tokens} tokens ({len(prompt)} in the messages, {max_tokens} "
            "in the completion). Please reduce the length of the messages or completion.",
            400,
        )

    plan = sim.faults.plan(sim.rng)
    if plan.hang:
        # Held until the client gives up: aiohttp cancels the handler when it disconnects.
        await asyncio.Event().wait()
    if plan.status == 429:
        return _error("Rate limit reached; retry later.", 429, headers={"Retry-After": "1"})
    if plan.status == 500:
        return _error("Simulated internal server error.", 500)

    f = plan.faults
    natural = max(1, round(sim.config.output_len * sim.rng.uniform(0.5, 1.5)))
    seq = Sequence(
        request_id=uuid.uuid4().hex,
        prompt=prompt,
        max_tokens=max_tokens,
        stop_after=max_tokens if req.ignore_eos else natural,
        seed=sim.rng.getrandbits(32),
        faults=SeqFaults(
            slow_first_token=f.slow_first_token,
            stall=f.stall,
            stall_after=f.mid_stream_after,
            tokens_per_step=f.tokens_per_chunk,
        ),
        arrival=arrival,
    )
    engine = sim.route(model)
    engine.submit(seq)
    try:
        if req.stream:
            return await _stream(request, req, model, seq, engine, plan)
        return await _respond(request, req, model, seq, engine, plan)
    except ConnectionResetError:
        # The client went away mid-response; the finally below tells the engine.
        return web.Response(status=499)
    finally:
        if seq.finish_reason is None:
            engine.abort(seq, "abort")


async def _events(seq: Sequence, keep_alive: float) -> AsyncIterator[Scheduled | Output | None]:
    """The engine's events for one request; None when ``keep_alive`` seconds pass idle."""
    while True:
        if keep_alive > 0:
            try:
                event = await asyncio.wait_for(seq.events.get(), keep_alive)
            except TimeoutError:
                yield None
                continue
        else:
            event = await seq.events.get()
        yield event
        if isinstance(event, Output) and event.finish_reason is not None:
            return


class _Split:
    """Splits generated tokens into reasoning_content and content by position (chat only:
    the completions API has a single text field)."""

    def __init__(self, api: Api, reasoning_tokens: int) -> None:
        self.left = reasoning_tokens if api == "chat" else 0
        self.total = 0
        self.reasoning: list[str] = []
        self.content: list[str] = []

    def take(self, tokens: tuple[str, ...]) -> tuple[str, str]:
        n = min(self.left, len(tokens))
        self.left -= n
        self.total += n
        reasoning, content = "".join(tokens[:n]), "".join(tokens[n:])
        self.reasoning.append(reasoning)
        self.content.append(content)
        return content, reasoning


def _usage(seq: Sequence, reasoning_tokens: int) -> Usage:
    return Usage(
        prompt_tokens=len(seq.prompt),
        completion_tokens=len(seq.output),
        cached_tokens=seq.cached_tokens or 0,
        reasoning_tokens=reasoning_tokens,
    )


def _cut(request: web.Request) -> None:
    """Drop the connection without finishing the response (a proxy or server dying)."""
    if request.transport is not None:
        request.transport.abort()


async def _stream(
    request: web.Request,
    req: CompletionRequest,
    model: str,
    seq: Sequence,
    engine: Engine,
    plan: Plan,
) -> web.StreamResponse:
    f = plan.faults
    out = Responses(req.api, model)
    split = _Split(req.api, f.reasoning_tokens)
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    )
    await resp.prepare(request)
    sent = 0
    malformed_sent = False
    async for event in _events(seq, f.keep_alive):
        if event is None:
            await resp.write(b": keep-alive\n\n")
            continue
        if isinstance(event, Scheduled):
            if req.api == "chat" and f.role_chunk:
                await resp.write(sse(out.role_chunk()))
            continue
        if event.finish_reason in ("abort", "error") and not event.tokens:
            # The engine ended the request (shutdown); say so the way vLLM does.
            await resp.write(sse(error_body("The request was aborted by the server.", 500)))
            break
        content, reasoning = split.take(event.tokens)
        await resp.write(sse(out.token_chunk(content, reasoning, event.finish_reason)))
        sent += len(event.tokens)
        if event.finish_reason is not None:
            if req.include_usage:
                await resp.write(sse(out.usage_chunk(_usage(seq, split.total))))
            break
        if sent >= f.mid_stream_after:
            if plan.disconnect:
                engine.abort(seq, "abort")
                _cut(request)
                return resp
            if plan.stream_error:
                engine.abort(seq, "error")
                await resp.write(sse(error_body("Simulated error mid-stream.", 500)))
                break
            if plan.malformed and not malformed_sent:
                malformed_sent = True
                chunk = _dumps(out.token_chunk("", "", None))
                await resp.write(f"data: {chunk[: len(chunk) // 2]}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def _respond(
    request: web.Request,
    req: CompletionRequest,
    model: str,
    seq: Sequence,
    engine: Engine,
    plan: Plan,
) -> web.StreamResponse:
    f = plan.faults
    out = Responses(req.api, model)
    split = _Split(req.api, f.reasoning_tokens)
    started: web.StreamResponse | None = None
    finish: str | None = None
    async for event in _events(seq, f.keep_alive):
        if event is None:
            # DeepSeek's non-streaming keep-alive: blank lines before the JSON body, which
            # JSON parsers skip as whitespace.
            if started is None:
                started = web.StreamResponse(headers={"Content-Type": "application/json"})
                await started.prepare(request)
            await started.write(b"\n")
            continue
        if isinstance(event, Scheduled):
            continue
        split.take(event.tokens)
        finish = event.finish_reason
        if finish is None and len(seq.output) >= f.mid_stream_after:
            if plan.disconnect:
                engine.abort(seq, "abort")
                _cut(request)
                return started or web.Response(status=499)
            if plan.stream_error:
                engine.abort(seq, "error")
                finish = "error"
                break
    if finish in ("abort", "error"):
        body = error_body("Simulated error during generation." if finish == "error"
                          else "The request was aborted by the server.", 500)
        status = 500
    else:
        assert finish is not None
        body = out.final("".join(split.content), "".join(split.reasoning), finish,
                         _usage(seq, split.total))
        status = 200
    text = _dumps(body)
    if plan.malformed and status == 200:
        text = text[: len(text) // 2]
    if started is not None:
        await started.write(text.encode())
        await started.write_eof()
        return started
    return web.Response(text=text, status=status, content_type="application/json")


async def handle_models(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    created = int(time.time())
    return _json(
        {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "llm-latency-exporter-simulator",
                    "root": name,
                    "parent": None,
                    "max_model_len": sim.config.max_model_len,
                }
                for name in sim.settings.models
            ],
        }
    )


async def handle_health(request: web.Request) -> web.Response:
    return web.Response(text="")


# --- metrics ------------------------------------------------------------------------------
async def handle_metrics_text(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    rate = sim.faults.metrics_error_rate
    # No draw at rate 0, so seeded request outcomes stay what they were without the fault.
    if rate > 0 and sim.rng.random() < rate:
        return web.Response(status=500, text="metrics unavailable (simulated fault)\n")
    return web.Response(body=sim.exposition(), headers={"Content-Type": PROMETHEUS_TEXT})


async def handle_iteration_stats(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    records: list[dict[str, Any]] = []
    for engine in sim.all_engines():
        records.extend(engine.iteration_stats)
        engine.iteration_stats.clear()
    return _json(records)


# --- admin --------------------------------------------------------------------------------
async def _json_object(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _json({"errors": ["the body is not valid JSON"]}, status=400)
    if not isinstance(body, dict):
        return _json({"errors": ["the body must be a JSON object"]}, status=400)
    return body


async def handle_faults(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    if request.method == "POST":
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        try:
            sim.faults = sim.faults.merged(body)
        except FaultError as exc:
            return _json({"errors": exc.messages}, status=400)
        log.info("faults changed", extra={"changes": json.dumps(body, sort_keys=True)})
    return _json(sim.faults.as_dict())


def _runtime_config(config: EngineConfig) -> dict[str, Any]:
    values = asdict(config)
    return {
        "runtime": {k: values[k] for k in EngineConfig.RUNTIME},
        "fixed": {k: v for k, v in values.items() if k not in EngineConfig.RUNTIME},
    }


async def handle_config(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    if request.method == "POST":
        body = await _json_object(request)
        if isinstance(body, web.Response):
            return body
        try:
            new = sim.config.merged(body)
        except ValueError as exc:
            return _json({"errors": str(exc).split("; ")}, status=400)
        # In place: every engine holds this same object.
        for key in body:
            setattr(sim.config, key, getattr(new, key))
        for engine in sim.all_engines():
            engine.wake()
        log.info("engine config changed", extra={"changes": json.dumps(body, sort_keys=True)})
    return _json(_runtime_config(sim.config))


def make_app(sim: Simulator) -> web.Application:
    app = web.Application()
    app[SIM] = sim
    app.router.add_post("/v1/chat/completions", handle_chat)
    app.router.add_post("/v1/completions", handle_completions)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    if sim.format == "trtllm":
        app.router.add_get("/metrics", handle_iteration_stats)
        app.router.add_get("/prometheus/metrics", handle_metrics_text)
    elif sim.format != "triton":
        app.router.add_get("/metrics", handle_metrics_text)
    app.router.add_route("*", "/admin/faults", handle_faults)
    app.router.add_route("*", "/admin/config", handle_config)
    return app


def make_metrics_app(sim: Simulator) -> web.Application:
    """Triton's separate metrics service."""
    app = web.Application()
    app[SIM] = sim
    app.router.add_get("/metrics", handle_metrics_text)
    return app


class Running:
    """A started simulator: its URLs, and how to stop it."""

    def __init__(self, sim: Simulator, runners: list[web.AppRunner], urls: dict[str, str]):
        self.sim = sim
        self.urls = urls
        self._runners = runners

    async def close(self) -> None:
        # Engines first: their abort events end open streams, so handlers return promptly.
        await self.sim.stop()
        for runner in self._runners:
            await runner.cleanup()


async def _site(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        keepalive_timeout=KEEPALIVE_SECONDS,
        shutdown_timeout=2.0,
        access_log=None,
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def start(settings: Settings) -> Running:
    problems = settings.problems()
    if problems:
        raise ValueError("; ".join(problems))
    sim = Simulator(settings)
    sim.start()
    base = f"http://{_url_host(settings.host)}:{settings.port}"
    runners: list[web.AppRunner] = []
    try:
        runners.append(await _site(make_app(sim), settings.host, settings.port))
        urls = {"api": f"{base}/v1", "admin": f"{base}/admin/faults"}
        if settings.format == "triton":
            port = settings.triton_metrics_port
            runners.append(await _site(make_metrics_app(sim), settings.host, port))
            urls["metrics"] = f"http://{_url_host(settings.host)}:{port}/metrics"
        elif settings.format == "trtllm":
            urls["metrics"] = f"{base}/prometheus/metrics"
            urls["iteration stats"] = f"{base}/metrics"
        else:
            urls["metrics"] = f"{base}/metrics"
    except BaseException:
        await sim.stop()
        for runner in runners:
            await runner.cleanup()
        raise
    return Running(sim, runners, urls)


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set (the CLI sets it on SIGTERM/SIGINT)."""
    running = await start(settings)
    for what, url in running.urls.items():
        print(f"{what:<16} {url}", flush=True)
    log.info(
        "simulator started",
        extra={"format": settings.format, "models": ",".join(settings.models), **running.urls},
    )
    try:
        await stop.wait()
    finally:
        log.info("simulator stopping")
        with contextlib.suppress(Exception):
            await running.close()
