"""The engine's own clock on one probe request, and the client's TTFT split by it.

Engines that time each request return it in the response; a stream carries it on the final
usage chunk, which the probe always asks for (``stream_options.include_usage``):

* vLLM (``vllm serve --enable-per-request-metrics``, 0.32: ``PerRequestMetrics`` in
  vllm/entrypoints/generate/base/protocol.py, filled by ``build_per_request_timing_metrics``)
  sends ``"metrics": {"queue_time_ms", "time_to_first_token_ms", "generation_time_ms",
  "mean_itl_ms", "tokens_per_second"}``: queue is queued to scheduled, its
  time_to_first_token is scheduled to first token (prefill, not the user's TTFT),
  generation is first to last token; each field is left out when vLLM lacks its timestamps.
* NVIDIA NIM (``NIM_PER_REQ_METRICS_ENABLE=1``, documented as experimental in NIM 1.14's
  "Per-Request Metrics") sends ``"stats": {"type": "NIM LLM Model Stats",
  "time_in_queue_in_ms", "generation_time_in_ms", "response_tokens":
  {"time_to_first_token_in_ms", ...}}``. Read by those documented descriptions (queue; time
  from processing start to first token as prefill; total processing time, so decode is
  that less the first token): not checked against a running NIM.

The client's TTFT runs from writing the request on an open connection to the first token
arriving. Less the engine's queue and prefill, what is left is the request's way in and the
first token's way out (the network) and the engine's HTTP server, tokenizer and
detokenizer (its frontend): ``network_frontend``. Each engine span is on the engine's own
monotonic clock, so no clock needs to agree with the probe's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from exporter.metrics import ServerSplit

#: The split is consistent when the engine's queue + prefill exceeds the client's TTFT by
#: no more than this: max(5 ms, 5% of the TTFT). Rounding and the two clocks' rates account
#: for well under it; more is an engine counting something the client did not wait for.
TOLERANCE_SECONDS = 0.005
TOLERANCE_RATIO = 0.05
NIM_TYPE = "NIM LLM Model Stats"

Format = Literal["vllm", "nim"]


def tolerance(ttft: float) -> float:
    return max(TOLERANCE_SECONDS, TOLERANCE_RATIO * ttft)


@dataclass(frozen=True)
class ServerTiming:
    """One request's spans on the engine's clock, in seconds; None where it did not say."""

    format: Format
    queue: float | None
    prefill: float | None
    decode: float | None


@dataclass(frozen=True)
class Split:
    """A client TTFT as network_frontend + queue + prefill (exact), and the engine's decode."""

    network_frontend: float
    queue: float
    prefill: float
    decode: float | None


def _ms(node: Any, key: str) -> float | None:
    value = node.get(key) if isinstance(node, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value / 1000.0


def parse(raw: dict[str, Any] | None) -> ServerTiming | None:
    """The timing a stream carried (StreamResult.server_timing), or None."""
    if raw is None:
        return None
    vllm = raw.get("metrics")
    if isinstance(vllm, dict):
        return ServerTiming(
            format="vllm",
            queue=_ms(vllm, "queue_time_ms"),
            prefill=_ms(vllm, "time_to_first_token_ms"),
            decode=_ms(vllm, "generation_time_ms"),
        )
    nim = raw.get("stats")
    if isinstance(nim, dict) and nim.get("type") == NIM_TYPE:
        first = _ms(nim.get("response_tokens"), "time_to_first_token_in_ms")
        total = _ms(nim, "generation_time_in_ms")
        decode = None if first is None or total is None or total < first else total - first
        return ServerTiming(
            format="nim", queue=_ms(nim, "time_in_queue_in_ms"), prefill=first, decode=decode
        )
    return None


def split(timing: ServerTiming | None, ttft: float) -> tuple[ServerSplit, Split | None]:
    """The client's ``ttft`` split by the engine's timing, and which kind of split it is."""
    if timing is None or timing.queue is None or timing.prefill is None:
        return ServerSplit.ABSENT, None
    rest = ttft - timing.queue - timing.prefill
    if rest < -tolerance(ttft):
        return ServerSplit.INCONSISTENT, None
    # Within the tolerance below zero: the network share is too small to tell from 0.
    return ServerSplit.EXACT, Split(
        network_frontend=max(rest, 0.0),
        queue=timing.queue,
        prefill=timing.prefill,
        decode=timing.decode,
    )
