"""Faults the simulator can inject, set at start (``--fault KEY=VALUE``) or at run time
(``POST /admin/faults`` with a JSON object that merges into the current settings).

Each fault is something a client-side probe must notice or survive. Rates are per request
(0..1, drawn from the simulator's seeded generator); the mid-stream faults fire once a stream
has carried ``mid_stream_after`` tokens, so requests shorter than that are untouched.
Engine-side faults (slow first token, stalls, tokens per chunk) happen inside the batching
model, so the engine's own metrics see them exactly as the client does.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass, fields

# What each field does, for --help, GET /admin/faults and docs/simulator.md.
DESCRIPTIONS: dict[str, str] = {
    "slow_first_token": "seconds each request waits after admission before its prefill runs "
    "(as if its KV were being transferred); adds to TTFT and to the engine's prefill time",
    "stall": "seconds each stream pauses once, after mid_stream_after tokens (engine side: "
    "the sequence sits out decode steps; inter-token latency shows the gap)",
    "mid_stream_after": "tokens a stream carries before a mid-stream fault fires",
    "disconnect_rate": "fraction of requests whose connection the server closes mid-stream "
    "(no [DONE]; the engine counts the request as aborted)",
    "error_rate": "fraction of requests answered HTTP 500 before reaching the engine",
    "rate_limit_rate": "fraction of requests answered HTTP 429 with Retry-After",
    "hang_rate": "fraction of requests that never get a response (held until the client "
    "gives up)",
    "malformed_rate": "fraction of streams that carry one SSE event of truncated JSON "
    "mid-stream, then continue normally",
    "stream_error_rate": "fraction of streams that end mid-way with a data: {\"error\": ...} "
    "event and [DONE] under HTTP 200 (the engine counts finished_reason=error)",
    "role_chunk": "send a role-only first chunk {\"role\": \"assistant\", \"content\": \"\"} "
    "when the engine first schedules the request (chat API; vLLM does this)",
    "reasoning_tokens": "the first N generated tokens stream as delta.reasoning_content "
    "(DeepSeek-R1 style) instead of delta.content (chat API)",
    "keep_alive": "send ': keep-alive' SSE comments (blank lines for non-streaming "
    "responses) after this many idle seconds, e.g. while queued; 0 = off",
    "tokens_per_chunk": "tokens each decode step yields per sequence (like speculative "
    "decoding), so one SSE chunk carries several tokens",
    "frontend_delay": "seconds the HTTP server spends on each request before the engine "
    "queues it (tokenizing, templating): in the client's TTFT, outside the engine's queue "
    "and prefill",
    "metrics_error_rate": "fraction of metrics scrapes answered HTTP 500 (an engine whose "
    "metrics endpoint breaks while it keeps serving, or a monitoring-side outage)",
    "kv_transfer_delay": "seconds each KV transfer from the prefill instance takes on top of "
    "its size (with --pd): the request waits deferred, in its TTFT and the engine's "
    "transfer time",
    "dp_pin_rate": "fraction of requests the data-parallel router sends to each model's "
    "last rank whatever its load (an affinity gone wrong), the rest to the least-loaded "
    "rank; with --dp-ranks over 1, the last rank's queue grows while its peers idle",
}


class FaultError(ValueError):
    """Bad fault settings; ``messages`` has one line per problem."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("; ".join(messages))
        self.messages = messages


@dataclass(frozen=True)
class Faults:
    slow_first_token: float = 0.0
    stall: float = 0.0
    mid_stream_after: int = 4
    disconnect_rate: float = 0.0
    error_rate: float = 0.0
    rate_limit_rate: float = 0.0
    hang_rate: float = 0.0
    malformed_rate: float = 0.0
    stream_error_rate: float = 0.0
    role_chunk: bool = True
    reasoning_tokens: int = 0
    keep_alive: float = 0.0
    tokens_per_chunk: int = 1
    metrics_error_rate: float = 0.0
    dp_pin_rate: float = 0.0
    frontend_delay: float = 0.0
    kv_transfer_delay: float = 0.0

    def as_dict(self) -> dict[str, float | int | bool]:
        return dataclasses.asdict(self)

    def merged(self, changes: Mapping[str, object]) -> Faults:
        """A copy with ``changes`` applied, or FaultError naming every bad key and value."""
        types = {f.name: f.type for f in fields(self)}
        errors: list[str] = []
        values: dict[str, object] = {}
        for key, raw in changes.items():
            kind = types.get(key)
            if kind is None:
                errors.append(f"{key}: unknown fault (known: {', '.join(types)})")
                continue
            try:
                values[key] = _coerce(key, str(kind), raw)
            except ValueError as exc:
                errors.append(f"{key}: {exc}")
        if errors:
            raise FaultError(errors)
        return dataclasses.replace(self, **values)  # type: ignore[arg-type]

    def plan(self, rng: random.Random) -> Plan:
        """Draw this request's fault outcome; one draw per rate so settings don't interact."""
        draws = {name: rng.random() for name in _RATES}
        return Plan(
            hang=draws["hang_rate"] < self.hang_rate,
            status=429
            if draws["rate_limit_rate"] < self.rate_limit_rate
            else 500
            if draws["error_rate"] < self.error_rate
            else None,
            disconnect=draws["disconnect_rate"] < self.disconnect_rate,
            malformed=draws["malformed_rate"] < self.malformed_rate,
            stream_error=draws["stream_error_rate"] < self.stream_error_rate,
            faults=self,
        )


_RATES = (
    "hang_rate",
    "rate_limit_rate",
    "error_rate",
    "disconnect_rate",
    "malformed_rate",
    "stream_error_rate",
)


@dataclass(frozen=True)
class Plan:
    """One request's drawn faults, plus the settings in force when it arrived."""

    hang: bool
    status: int | None
    disconnect: bool
    malformed: bool
    stream_error: bool
    faults: Faults


def _coerce(key: str, kind: str, raw: object) -> float | int | bool:
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in ("true", "1", "yes", "on", "false", "0",
                                                    "no", "off"):
            return raw.lower() in ("true", "1", "yes", "on")
        raise ValueError(f"want true or false, got {raw!r}")
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise ValueError(f"want a number, got {raw!r}")
    try:
        number = float(raw)
    except ValueError:
        raise ValueError(f"want a number, got {raw!r}") from None
    if number != number or number < 0:  # NaN or negative
        raise ValueError(f"want a number >= 0, got {raw!r}")
    if key.endswith("_rate") and number > 1:
        raise ValueError(f"a rate is a fraction 0..1, got {raw!r}")
    if kind == "int":
        if number != int(number):
            raise ValueError(f"want a whole number, got {raw!r}")
        if key == "tokens_per_chunk" and number < 1:
            raise ValueError("want at least 1")
        return int(number)
    return number


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``["stall=0.5", "error_rate=0.1"]`` -> a dict for Faults.merged (CLI --fault)."""
    out: dict[str, str] = {}
    bad = [item for item in items if "=" not in item]
    if bad:
        raise FaultError([f"{item!r}: want KEY=VALUE" for item in bad])
    for item in items:
        key, _, value = item.partition("=")
        out[key.strip()] = value.strip()
    return out
