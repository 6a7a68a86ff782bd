"""OpenAI-compatible SSE stream reader and its timing: pure, shared by the probe and bench.

The caller reads bytes off the socket, takes a monotonic timestamp at once and hands both to
:meth:`StreamReader.feed`; every event completed by those bytes carries that timestamp. The
stamp is therefore the moment the bytes were read, not the moment their JSON was decoded,
so decoding cost (and the decoding of earlier events in the same read) never leaks into TTFT
or inter-token latency.

Definitions (docs/metrics.md, "Probe metrics", compares them with other tools):

* a *token-bearing* event is a ``data:`` event whose choice carries generated text: a
  non-empty ``delta.content``, ``delta.reasoning_content``, ``delta.reasoning``,
  ``delta.tool_calls`` (chat) or ``text`` (completions). A role-only chunk, a keep-alive
  comment, a usage-only chunk and ``[DONE]`` are not;
* TTFT: first token-bearing event; TTFC (time to first content): first event with content or
  tool calls, i.e. after any reasoning;
* E2E: last token-bearing event; ITL: gaps between consecutive token-bearing events; stall:
  the largest of those gaps;
* finish: the first event whose choice names a ``finish_reason``, which carries the server's
  last token. It is after E2E when that token, or the ones before it, carried no text (a
  special token skipped in decoding, a byte the detokenizer held back for a whole character),
  so it is the client's moment that an engine's own last-token time always precedes;
* output tokens: ``usage.completion_tokens`` when the server sends it, else the number of
  token-bearing events, marked estimated; TPOT = (E2E - TTFT) / (tokens - 1) for tokens >= 2.
"""

from __future__ import annotations

import codecs
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from exporter.metrics import ProbeOutcome

# SSE line terminators: CRLF, LF or a lone CR. str.splitlines() would also split on
# U+2028 and friends, which JSON may carry unescaped inside a string.
_LINE_END = re.compile(r"\r\n|\r|\n")
_SSE_FIELDS = frozenset({"event", "data", "id", "retry"})
#: Bound on what the reader keeps of a server's error identifiers (they become log text).
_DETAIL_MAX = 120
#: Top-level keys of a chunk that carry the engine's per-request timing: vLLM's
#: ``--enable-per-request-metrics`` and NIM's ``NIM_PER_REQ_METRICS_ENABLE``.
SERVER_TIMING_KEYS = ("metrics", "stats")


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


@dataclass
class StreamResult:
    """What one stream delivered, on the monotonic clock of ``start``."""

    start: float
    token_times: list[float] = field(default_factory=list)
    #: First JSON event of any kind (a role-only chunk, say): where a tool that stops its
    #: TTFT clock on the first chunk would stop it.
    first_event_at: float | None = None
    first_content_at: float | None = None
    finish_at: float | None = None
    usage: dict[str, Any] | None = None
    done: bool = False
    #: The server's mid-stream error event, as "type=... code=..." (never its message).
    error: str | None = None
    #: Why the stream could not be parsed; set, the stream is a protocol error.
    protocol_error: str | None = None
    bytes_read: int = 0
    #: The engine's own timing of the request, as sent (vLLM's ``metrics`` object, NIM's
    #: ``stats``), from the usage chunk; read by :mod:`exporter.probing.server_timing`.
    server_timing: dict[str, Any] | None = None

    # --- the definitions in the module docstring ------------------------------------
    @property
    def ttft(self) -> float | None:
        return self.token_times[0] - self.start if self.token_times else None

    @property
    def ttfc(self) -> float | None:
        return None if self.first_content_at is None else self.first_content_at - self.start

    @property
    def e2e(self) -> float | None:
        return self.token_times[-1] - self.start if self.token_times else None

    @property
    def finish(self) -> float | None:
        return None if self.finish_at is None else self.finish_at - self.start

    @property
    def itl(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.token_times)]

    @property
    def stall(self) -> float | None:
        gaps = self.itl
        return max(gaps) if gaps else None

    @property
    def chunks(self) -> int:
        """Token-bearing events: equal to tokens only when each chunk holds one token."""
        return len(self.token_times)

    def _usage_int(self, *path: str) -> int | None:
        node: Any = self.usage
        for key in path:
            if not isinstance(node, dict):
                return None
            node = node.get(key)
        if isinstance(node, int) and not isinstance(node, bool) and node >= 0:
            return node
        return None

    @property
    def tokens_estimated(self) -> bool:
        return self._usage_int("completion_tokens") is None

    @property
    def output_tokens(self) -> int:
        reported = self._usage_int("completion_tokens")
        return self.chunks if reported is None else reported

    @property
    def prompt_tokens(self) -> int | None:
        return self._usage_int("prompt_tokens")

    @property
    def cached_tokens(self) -> int | None:
        """Prompt tokens served from the prefix cache, if the server says (OpenAI/vLLM or
        DeepSeek naming)."""
        cached = self._usage_int("prompt_tokens_details", "cached_tokens")
        return cached if cached is not None else self._usage_int("prompt_cache_hit_tokens")

    @property
    def tpot(self) -> float | None:
        ttft, e2e, n = self.ttft, self.e2e, self.output_tokens
        if ttft is None or e2e is None or n < 2:
            return None
        return (e2e - ttft) / (n - 1)

    @property
    def outcome(self) -> ProbeOutcome:
        """The stream's own verdict, once it has ended (transport errors aside)."""
        if self.protocol_error is not None:
            return ProbeOutcome.PROTOCOL_ERROR
        if self.error is not None:
            return ProbeOutcome.STREAM_ERROR
        if not self.done:
            return ProbeOutcome.STREAM_RESET
        return ProbeOutcome.OK if self.token_times else ProbeOutcome.EMPTY


class StreamReader:
    """Incremental SSE parser for OpenAI chat/completions streams.

    ``feed(data, now)`` for every read, ``close()`` at end of stream; the result is in
    :attr:`result`. Parsing stops at ``[DONE]``, an error event or a protocol error
    (:attr:`finished`), so a caller can stop reading there.
    """

    def __init__(self, start: float) -> None:
        self.result = StreamResult(start=start)
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._buf = ""
        self._data: list[str] = []
        self._event = ""
        self._skip_lf = False
        self._stopped = False
        self._last_read_at = start

    @property
    def finished(self) -> bool:
        """[DONE], an error event or a protocol error has been seen: nothing more counts."""
        return self._stopped

    def feed(self, data: bytes, now: float) -> None:
        """Parse the bytes of one read; ``now`` is when they were read."""
        self.result.bytes_read += len(data)
        self._last_read_at = now
        if self._stopped:
            return
        try:
            decoded = self._decoder.decode(data)
        except UnicodeDecodeError:
            self._fail("stream is not valid UTF-8")
            return
        if not decoded:
            return
        # A CR that ended the previous read may have been the first half of a CRLF: its LF
        # is not a second line end (that would read as a blank line and end an event early).
        if self._skip_lf and decoded[0] == "\n":
            decoded = decoded[1:]
        self._skip_lf = decoded[-1:] == "\r"
        text = self._buf + decoded
        # str.split runs in C; the regex is only needed when a CR is present at all.
        lines = _LINE_END.split(text) if "\r" in text else text.split("\n")
        self._buf = lines.pop()
        # This loop runs for every line of every stream, on the event loop that also stamps
        # other streams' reads: the common lines (data, blank, comment) are handled inline.
        data_lines = self._data
        for line in lines:
            if not line:
                if data_lines:
                    self._dispatch(now)
                    if self._stopped:
                        return
                self._event = ""
            elif line.startswith("data:"):
                data_lines.append(line[6:] if line[5:6] == " " else line[5:])
            elif line[0] != ":":  # ':' starts a comment (keep-alives, pings)
                self._field(line)
                if self._stopped:
                    return

    def close(self) -> StreamResult:
        """End of stream. A last event without its closing blank line still counts when it is
        complete ([DONE] or whole JSON); a half-received one is a truncated stream, not a
        protocol error."""
        if not self.finished:
            try:
                tail = self._buf + self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                tail = ""  # a multi-byte character cut off by the disconnect
            self._buf = ""
            *complete, last = _LINE_END.split(tail)
            for line in complete:
                self._line(line, self._last_read_at)
            # The unterminated last line may be cut anywhere, even inside its field name:
            # only a data line can still complete an event.
            if last.startswith("data:") and not self.finished:
                self._line(last, self._last_read_at)
            if self._data and not self.finished:
                payload = "\n".join(self._data)
                if payload == "[DONE]" or _parses(payload):
                    self._dispatch(self._last_read_at)
        self._data.clear()
        return self.result

    # --- SSE framing ------------------------------------------------------------------
    def _line(self, line: str, now: float) -> None:
        """One complete line (the slow path; feed() inlines the common cases)."""
        if line == "":
            if self._data:
                self._dispatch(now)
            self._event = ""
        elif line.startswith("data:"):
            self._data.append(line[6:] if line[5:6] == " " else line[5:])
        elif not line.startswith(":"):
            self._field(line)

    def _field(self, line: str) -> None:
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name not in _SSE_FIELDS:
            # OpenAI streams use only data/event/id/retry; anything else (a bare JSON body
            # from a server that ignored stream=true, a proxy's HTML) is not this protocol.
            self._fail(f"unexpected SSE line (field {name[:20]!r})")
        elif name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value

    def _dispatch(self, now: float) -> None:
        data = self._data
        payload = data[0] if len(data) == 1 else "\n".join(data)
        data.clear()
        event, self._event = self._event, ""
        if event == "error":
            self.result.error = "event: error"
            self._stopped = True
            return
        if payload == "[DONE]":
            self.result.done = True
            self._stopped = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self._fail("data is not JSON")
            return
        if not isinstance(obj, dict):
            self._fail("data is not a JSON object")
            return
        self._chunk(obj, now)

    # --- OpenAI chunk semantics -------------------------------------------------------
    def _chunk(self, obj: dict[str, Any], now: float) -> None:
        if self.result.first_event_at is None:
            self.result.first_event_at = now
        err = obj.get("error")
        if err or obj.get("object") == "error":
            self.result.error = _error_detail(err if isinstance(err, dict) else obj)
            self._stopped = True
            return
        usage = obj.get("usage")
        if isinstance(usage, dict):
            # With continuous usage stats every chunk carries running totals: last one wins.
            self.result.usage = usage
        for key in SERVER_TIMING_KEYS:
            timing = obj.get(key)
            if isinstance(timing, dict):
                self.result.server_timing = {key: timing}
        choices = obj.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            self._fail("choices is not a list")
            return
        token = content = False
        for choice in choices:
            if not isinstance(choice, dict):
                self._fail("choice is not an object")
                return
            delta = choice.get("delta")
            if isinstance(delta, dict):
                reasoning = _nonempty_str(delta.get("reasoning_content")) or _nonempty_str(
                    delta.get("reasoning")
                )
                tools = delta.get("tool_calls")
                answer = _nonempty_str(delta.get("content")) or (
                    isinstance(tools, list) and len(tools) > 0
                )
                token = token or reasoning or answer
                content = content or answer
            if _nonempty_str(choice.get("text")):
                token = content = True
            if choice.get("finish_reason") is not None and self.result.finish_at is None:
                self.result.finish_at = now
        if token:
            self.result.token_times.append(now)
            if content and self.result.first_content_at is None:
                self.result.first_content_at = now

    def _fail(self, why: str) -> None:
        if self.result.protocol_error is None:
            self.result.protocol_error = why
        self._stopped = True


def _parses(payload: str) -> bool:
    try:
        json.loads(payload)
    except ValueError:
        return False
    return True


def _error_detail(err: dict[str, Any]) -> str:
    """type and code of a server error event; the message may quote the request, so no."""
    parts = [
        f"{key}={str(err[key])[:40]}"
        for key in ("type", "code")
        if err.get(key) not in (None, "")
    ]
    return (" ".join(parts) or "error event")[:_DETAIL_MAX]
