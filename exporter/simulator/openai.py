"""OpenAI-compatible request parsing and response shapes, as vLLM's server writes them.

Pure functions: no I/O, no engine. Streaming chunks carry ``id``, ``object``, ``created``,
``model`` and ``choices``; the trailing usage chunk (``stream_options.include_usage``) has
``choices: []``; errors use vLLM's ``{"error": {message, type, param, code}}`` shape.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

Api = Literal["chat", "completions"]

#: DeepSeek's field name (vLLM before PR #27752 too); newer vLLM says ``reasoning``.
REASONING_FIELD = "reasoning_content"


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status


_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def error_body(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": _ERROR_TYPES.get(status, "Error"),
            "param": param,
            "code": status,
        }
    }


@dataclass(frozen=True)
class CompletionRequest:
    api: Api
    model: str | None
    prompt: str
    max_tokens: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool


def _text_content(content: object, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise BadRequest(f"{where}[{i}]: only text content parts are supported",
                                 "messages")
            text = part.get("text")
            if not isinstance(text, str):
                raise BadRequest(f"{where}[{i}].text must be a string", "messages")
            parts.append(text)
        return "\n".join(parts)
    raise BadRequest(f"{where} must be a string or a list of text parts", "messages")


def chat_prompt(messages: object) -> str:
    """The text the model sees: a plain template, one ``role: content`` line per message,
    then the assistant's turn (what a chat template does, without special tokens)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", "messages")
    lines = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a role", "messages")
        text = _text_content(msg.get("content"), f"messages[{i}].content")
        lines.append(f"{msg['role']}: {text}")
    lines.append("assistant:")
    return "\n".join(lines)


def _int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"{key} must be a positive integer", key)
    return value


def parse(api: Api, body: object) -> CompletionRequest:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("model must be a string", "model")
    n = body.get("n", 1)
    if n != 1:
        raise BadRequest("the simulator supports only n=1", "n")
    if api == "chat":
        prompt = chat_prompt(body.get("messages"))
        max_tokens = _int(body, "max_completion_tokens") or _int(body, "max_tokens")
    else:
        raw = body.get("prompt")
        if isinstance(raw, list) and len(raw) == 1:
            raw = raw[0]
        if not isinstance(raw, str) or not raw.strip():
            raise BadRequest("prompt must be a non-empty string", "prompt")
        prompt = raw
        max_tokens = _int(body, "max_tokens")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream must be a boolean", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("stream_options must be an object", "stream_options")
    if options is not None and not stream:
        raise BadRequest("stream_options is only allowed when stream is true", "stream_options")
    include_usage = bool(options and options.get("include_usage"))
    return CompletionRequest(
        api=api,
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=include_usage,
        ignore_eos=bool(body.get("ignore_eos", False)),
    )


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }
        if self.reasoning_tokens:
            out["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return out


def per_request_metrics(
    queued: float | None, scheduled: float | None, first: float | None, last: float | None,
    tokens: int,
) -> dict[str, float]:
    """vLLM's ``metrics`` object (``build_per_request_timing_metrics`` of vLLM 0.32): each
    field from its engine timestamps, left out where one is missing (vLLM drops None)."""
    out: dict[str, float] = {}
    if scheduled and first:
        out["time_to_first_token_ms"] = (first - scheduled) * 1000
    if first and last:
        out["generation_time_ms"] = (last - first) * 1000
    if queued and scheduled:
        out["queue_time_ms"] = (scheduled - queued) * 1000
    if first and last and tokens > 1:
        out["mean_itl_ms"] = (last - first) / (tokens - 1) * 1000
    if scheduled and last and last > scheduled:
        out["tokens_per_second"] = tokens / (last - scheduled)
    return out


class Responses:
    """Builds one request's chunks and final objects."""

    def __init__(self, api: Api, model: str) -> None:
        self.api = api
        self.model = model
        prefix = "chatcmpl" if api == "chat" else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.api == "chat" else "text_completion"
        return {**self._head(obj), "choices": [choice]}

    def role_chunk(self) -> dict[str, Any]:
        return self._chunk(
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        )

    def token_chunk(
        self, content: str, reasoning: str, finish_reason: str | None
    ) -> dict[str, Any]:
        if self.api == "completions":
            return self._chunk(
                {
                    "index": 0,
                    "text": reasoning + content,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                    "stop_reason": None,
                }
            )
        delta: dict[str, Any] = {}
        if reasoning:
            delta[REASONING_FIELD] = reasoning
        if content or not reasoning:
            delta["content"] = content
        return self._chunk(
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        )

    def usage_chunk(
        self, usage: Usage, metrics: dict[str, float] | None = None
    ) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.api == "chat" else "text_completion"
        out = {**self._head(obj), "choices": [], "usage": usage.as_dict()}
        if metrics is not None:
            out["metrics"] = metrics
        return out

    def final(
        self, content: str, reasoning: str, finish_reason: str, usage: Usage,
        metrics: dict[str, float] | None = None,
    ) -> dict[str, Any]:
        out = self._final(content, reasoning, finish_reason, usage)
        if metrics is not None:
            out["metrics"] = metrics
        return out

    def _final(
        self, content: str, reasoning: str, finish_reason: str, usage: Usage
    ) -> dict[str, Any]:
        if self.api == "completions":
            choice: dict[str, Any] = {
                "index": 0,
                "text": reasoning + content,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
            return {**self._head("text_completion"), "choices": [choice],
                    "usage": usage.as_dict()}
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            message[REASONING_FIELD] = reasoning
        choice = {"index": 0, "message": message, "logprobs": None,
                  "finish_reason": finish_reason}
        return {**self._head("chat.completion"), "choices": [choice], "usage": usage.as_dict()}


def sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()
