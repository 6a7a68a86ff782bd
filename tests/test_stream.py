"""The pure SSE stream reader: framing, token rules, timing and classification."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.metrics import ProbeOutcome
from exporter.probing.stream import StreamReader, StreamResult


def chunk(delta: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"id": "c1", "object": "chat.completion.chunk", "choices": []}
    if delta is not None:
        obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
    obj.update(top)
    return obj


def ev(obj: dict[str, Any] | str, sep: str = "\n", space: bool = True) -> str:
    payload = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return f"data:{' ' if space else ''}{payload}{sep}{sep}"


def read(reads: list[tuple[float, str | bytes]], start: float = 0.0) -> StreamResult:
    reader = StreamReader(start)
    for now, data in reads:
        reader.feed(data.encode() if isinstance(data, str) else data, now)
    return reader.close()


USAGE = chunk(usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14})


def test_basic_stream_timing_and_usage() -> None:
    res = read(
        [
            (0.10, ev(chunk({"role": "assistant", "content": ""}))),
            (0.50, ev(chunk({"content": "Hel"}))),
            (0.60, ev(chunk({"content": "lo"}))),
            (0.90, ev(chunk({"content": "!"}))),
            (0.95, ev(USAGE) + ev("[DONE]")),
        ],
        start=0.0,
    )
    assert res.outcome is ProbeOutcome.OK
    assert res.first_event_at == pytest.approx(0.1)
    assert res.ttft == pytest.approx(0.5)  # the role-only chunk does not stop TTFT
    assert res.ttfc == pytest.approx(0.5)
    assert res.e2e == pytest.approx(0.9)  # the usage chunk and [DONE] carry no token
    assert res.itl == pytest.approx([0.1, 0.3])
    assert res.stall == pytest.approx(0.3)
    assert res.output_tokens == 3 and not res.tokens_estimated
    assert res.tpot == pytest.approx((0.9 - 0.5) / 2)
    assert res.prompt_tokens == 11 and res.cached_tokens is None


def test_finish_is_the_finish_reason_chunk_even_when_its_token_had_no_text() -> None:
    # vLLM's chunk for a last token that decodes to nothing (a skipped special token, a byte
    # held back for a whole character): empty content beside the finish reason.
    last = chunk({"content": ""})
    last["choices"][0]["finish_reason"] = "length"
    res = read([(0.5, ev(chunk({"content": "a"}))), (0.6, ev(chunk({"content": "b"}))),
                (0.8, ev(last)), (0.9, ev(USAGE) + ev("[DONE]"))], start=0.1)
    assert res.e2e == pytest.approx(0.5) and res.finish == pytest.approx(0.7)
    unfinished = read([(0.5, ev(chunk({"content": "a"})))])
    assert unfinished.finish is None and unfinished.outcome is ProbeOutcome.STREAM_RESET


def test_event_split_across_reads_is_stamped_when_completed() -> None:
    text = ev(chunk({"content": "abc"}))
    cut = len(text) // 2
    res = read([(1.0, text[:cut]), (2.0, text[cut:]), (3.0, ev("[DONE]"))], start=0.5)
    assert res.token_times == [2.0]
    assert res.ttft == pytest.approx(1.5)


def test_multi_byte_character_split_across_reads() -> None:
    raw = ev(chunk({"content": "温度"})).encode()
    cut = raw.index("温".encode()) + 1  # inside the three-byte character
    res = read([(1.0, raw[:cut]), (1.5, raw[cut:]), (2.0, ev("[DONE]"))])
    assert res.outcome is ProbeOutcome.OK and res.token_times == [1.5]


def test_several_events_in_one_read_share_the_read_time() -> None:
    data = ev(chunk({"content": "a"})) + ev(chunk({"content": "b"})) + ev(chunk({"content": "c"}))
    res = read([(1.0, data), (2.0, ev("[DONE]"))])
    assert res.token_times == [1.0, 1.0, 1.0]
    assert res.itl == [0.0, 0.0]
    # Without usage the count falls back to chunks, and says so.
    assert res.output_tokens == 3 and res.tokens_estimated


@pytest.mark.parametrize("sep", ["\r\n", "\r"])
def test_crlf_and_cr_line_endings(sep: str) -> None:
    res = read([(1.0, ev(chunk({"content": "x"}), sep=sep)), (2.0, ev("[DONE]", sep=sep))])
    assert res.outcome is ProbeOutcome.OK and res.token_times == [1.0]


def test_cr_only_split_across_reads() -> None:
    # A lone CR ends one read; the next starts with another CR: that is the blank line.
    res = read([(1.0, 'data: {"choices":[{"delta":{"content":"x"}}]}\r'), (2.0, "\r" + ev("[DONE]", sep="\r"))])
    assert res.outcome is ProbeOutcome.OK and res.token_times == [2.0]


def test_crlf_split_between_cr_and_lf() -> None:
    # "\r" ends one read and "\n" starts the next: that is one line end, not two.
    first = 'data: {"choices":[{"delta":{"content":"x"}}]}\r'
    second = '\n\r\n' + ev("[DONE]")
    res = read([(1.0, first), (2.0, second)])
    assert res.outcome is ProbeOutcome.OK
    assert res.token_times == [2.0]  # completed by the blank line in the second read


def test_data_without_space_and_comments_ignored() -> None:
    res = read(
        [
            (0.2, ": keep-alive\n\n"),
            (0.3, ":\n\n"),
            (0.4, "event: message\nid: 7\nretry: 100\n" + ev(chunk({"content": "a"}), space=False)),
            (0.5, ": ping\n" + ev("[DONE]", space=False)),
        ]
    )
    assert res.outcome is ProbeOutcome.OK
    assert res.token_times == [0.4]


def test_data_split_over_several_lines_is_joined() -> None:
    body = json.dumps(chunk({"content": "a"}), indent=1).splitlines()
    text = "".join(f"data: {line}\n" for line in body) + "\n" + ev("[DONE]")
    res = read([(1.0, text)])
    assert res.outcome is ProbeOutcome.OK and res.chunks == 1


def test_reasoning_then_content_separates_ttft_and_ttfc() -> None:
    res = read(
        [
            (0.2, ev(chunk({"role": "assistant", "content": None}))),
            (0.3, ev(chunk({"reasoning_content": "Let me"}))),
            (0.4, ev(chunk({"reasoning": " think", "content": ""}))),
            (1.1, ev(chunk({"content": "Answer"}))),
            (1.2, ev("[DONE]")),
        ]
    )
    assert res.ttft == pytest.approx(0.3)
    assert res.ttfc == pytest.approx(1.1)
    assert res.chunks == 3


def test_tool_calls_are_tokens_and_content() -> None:
    call = {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ""}}]}
    res = read([(0.7, ev(chunk(call))), (0.8, ev(chunk({"tool_calls": []}))), (0.9, ev("[DONE]"))])
    assert res.token_times == [0.7]  # an empty tool_calls list is not a token
    assert res.ttfc == pytest.approx(0.7)


def test_completions_text() -> None:
    obj = {"object": "text_completion", "choices": [{"index": 0, "text": " hi"}]}
    empty = {"object": "text_completion", "choices": [{"index": 0, "text": ""}]}
    res = read([(0.1, ev(empty)), (0.3, ev(obj)), (0.4, ev("[DONE]"))])
    assert res.ttft == pytest.approx(0.3) and res.ttfc == pytest.approx(0.3)


def test_usage_with_multi_token_chunks_wins_over_chunk_count() -> None:
    usage = chunk(usage={"prompt_tokens": 5, "completion_tokens": 12,
                         "prompt_tokens_details": {"cached_tokens": 4}})
    res = read(
        [(0.1, ev(chunk({"content": "a b c d"}))), (0.2, ev(chunk({"content": "e f g h"}))),
         (0.3, ev(chunk({"content": "i j k l"}))), (0.4, ev(usage) + ev("[DONE]"))]
    )
    assert res.chunks == 3 and res.output_tokens == 12 and not res.tokens_estimated
    assert res.tpot == pytest.approx((0.3 - 0.1) / 11)
    assert res.cached_tokens == 4


def test_deepseek_cache_hit_naming() -> None:
    res = read([(0.1, ev(chunk({"content": "a"}))),
                (0.2, ev(chunk(usage={"completion_tokens": 1, "prompt_cache_hit_tokens": 64})))])
    assert res.cached_tokens == 64
    assert res.tpot is None  # one token: no per-token time


def test_usage_only_stream_is_empty() -> None:
    res = read([(0.1, ev(chunk({"role": "assistant", "content": ""}))), (0.2, ev(USAGE)),
                (0.3, ev("[DONE]"))])
    assert res.outcome is ProbeOutcome.EMPTY and res.ttft is None


def test_missing_done_is_a_reset() -> None:
    res = read([(0.1, ev(chunk({"content": "a"})))])
    assert res.outcome is ProbeOutcome.STREAM_RESET and res.ttft == pytest.approx(0.1)


def test_truncated_last_event_is_a_reset_not_a_protocol_error() -> None:
    for tail in ('data: {"choices": [{"del', "da", "event: mess"):
        res = read([(0.1, ev(chunk({"content": "a"})) + tail)])
        assert res.outcome is ProbeOutcome.STREAM_RESET, tail


def test_done_without_final_blank_line_still_counts() -> None:
    res = read([(0.1, ev(chunk({"content": "a"})) + "data: [DONE]\n")])
    assert res.outcome is ProbeOutcome.OK


@pytest.mark.parametrize(
    "event",
    [
        'data: {"error": {"message": "secret prompt text", "type": "BadRequestError", "code": 400}}\n\n',
        'data: {"object": "error", "message": "boom", "type": "InternalServerError", "code": 500}\n\n',
        "event: error\ndata: {\"message\": \"x\"}\n\n",
    ],
)
def test_error_event_fails_the_stream(event: str) -> None:
    reader = StreamReader(0.0)
    reader.feed(ev(chunk({"content": "a"})).encode(), 0.1)
    reader.feed(event.encode(), 0.2)
    assert reader.finished
    reader.feed(ev(chunk({"content": "b"})).encode() + ev("[DONE]").encode(), 0.3)
    res = reader.close()
    assert res.outcome is ProbeOutcome.STREAM_ERROR
    assert res.token_times == [0.1]  # nothing after the error counts
    assert res.error is not None and "secret" not in res.error and "boom" not in res.error


def test_error_detail_names_type_and_code() -> None:
    res = read([(0.1, 'data: {"error": {"message": "m", "type": "RateLimitError", "code": 429}}\n\n')])
    assert res.error == "type=RateLimitError code=429"


@pytest.mark.parametrize(
    "data",
    [
        'data: {"choices": [{"delta": {"content": "a"}}\n\n',  # truncated JSON, then more
        "data: [1, 2]\n\n",
        'data: {"choices": {"0": 1}}\n\n',
        '{"id": "x", "choices": []}\n\n',  # a JSON body without SSE framing
        "<html>Bad gateway</html>\n\n",
    ],
)
def test_malformed_is_a_protocol_error(data: str) -> None:
    res = read([(0.1, data), (0.2, ev(chunk({"content": "a"})) + ev("[DONE]"))])
    assert res.outcome is ProbeOutcome.PROTOCOL_ERROR and res.protocol_error


def test_invalid_utf8_is_a_protocol_error() -> None:
    res = read([(0.1, b"data: \xff\xfe\n\n")])
    assert res.outcome is ProbeOutcome.PROTOCOL_ERROR


def test_byte_count_and_data_after_done_ignored() -> None:
    first = ev(chunk({"content": "a"})) + ev("[DONE]")
    res = read([(0.1, first), (0.2, ev(chunk({"content": "late"})))])
    assert res.token_times == [0.1] and res.outcome is ProbeOutcome.OK
    assert res.bytes_read == len(first.encode()) + len(ev(chunk({"content": "late"})).encode())
