"""Handlers of the OpenAI-compatible endpoints: completions and chat (streaming and not),
the model list and the health check. Request parsing and response shapes are openai.py's."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator

from aiohttp import web

from exporter.simulator.engine import Engine
from exporter.simulator.faults import Plan
from exporter.simulator.openai import (
    Api,
    BadRequest,
    CompletionRequest,
    Responses,
    Usage,
    error_body,
    parse,
    per_request_metrics,
    sse,
)
from exporter.simulator.replies import dumps, error_reply, json_reply
from exporter.simulator.sequence import Output, Scheduled, SeqFaults, Sequence
from exporter.simulator.state import SIM
from exporter.simulator.tokens import tokenize


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
        return error_reply("the request body is not valid JSON", 400)
    try:
        req = parse(api, body)
    except BadRequest as exc:
        return error_reply(exc.message, exc.status, exc.param)
    model = req.model or sim.settings.models[0]
    if model not in sim.engines:
        return error_reply(f"The model `{model}` does not exist.", 404, "model")
    prompt = tokenize(req.prompt)
    limit = sim.config.max_model_len
    max_tokens = req.max_tokens or max(1, limit - len(prompt))
    if len(prompt) + max_tokens > limit:
        return error_reply(
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
        return error_reply("Rate limit reached; retry later.", 429, headers={"Retry-After": "1"})
    if plan.status == 500:
        return error_reply("Simulated internal server error.", 500)

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
            kv_transfer_delay=f.kv_transfer_delay,
        ),
        arrival=arrival,
    )
    if f.frontend_delay > 0:
        # The API server's own work (tokenizing, templating): its CPU, before the engine.
        sim.stats.frontend(f.frontend_delay)
        await asyncio.sleep(f.frontend_delay)
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


def _metrics(request: web.Request, seq: Sequence) -> dict[str, float] | None:
    """vLLM's per-request metrics of ``seq``, when the simulator was started with them."""
    if not request.app[SIM].settings.per_request_metrics:
        return None
    return per_request_metrics(
        seq.queued_ts, seq.scheduled_ts, seq.first_token_ts, seq.last_token_ts,
        len(seq.output),
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
                await resp.write(sse(out.usage_chunk(_usage(seq, split.total),
                                                     _metrics(request, seq))))
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
                chunk = dumps(out.token_chunk("", "", None))
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
                         _usage(seq, split.total), _metrics(request, seq))
        status = 200
    text = dumps(body)
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
    return json_reply(
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
