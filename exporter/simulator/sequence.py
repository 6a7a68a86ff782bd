"""One request as the engine sees it, and the events the engine sends its HTTP handler."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from exporter.simulator.tokens import Words


@dataclass(frozen=True)
class Scheduled:
    """The engine admitted the request for the first time."""

    at: float


@dataclass(frozen=True)
class Output:
    """Tokens one engine step produced for one request."""

    tokens: tuple[str, ...]
    at: float
    finish_reason: str | None


Event = Scheduled | Output


@dataclass(frozen=True)
class SeqFaults:
    """Engine-side faults for one request (see faults.py)."""

    slow_first_token: float = 0.0
    stall: float = 0.0
    stall_after: int = 0
    tokens_per_step: int = 1
    kv_transfer_delay: float = 0.0


@dataclass(eq=False)
class Sequence:
    """One request inside the engine; the HTTP handler reads ``events``."""

    request_id: str
    prompt: list[str]
    max_tokens: int
    #: Tokens after which the answer ends naturally ("stop"); max_tokens ends it first.
    stop_after: int
    seed: int
    faults: SeqFaults = SeqFaults()
    arrival: float = field(default_factory=time.monotonic)

    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    output: list[str] = field(default_factory=list)
    computed: int = 0
    prefill_target: int = 0
    cached_tokens: int | None = None
    queued_ts: float = 0.0
    scheduled_ts: float | None = None
    first_token_ts: float | None = None
    last_token_ts: float | None = None
    ready_at: float = 0.0
    #: With P/D: how long its prompt's KV took to arrive, and until when it is still being
    #: handed over (the request waits deferred).
    transfer_seconds: float = 0.0
    transfer_until: float = 0.0
    stalled: bool = False
    admitted: int = 0
    preemptions: int = 0
    prompt_counted: bool = False
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        self._words = Words(self.seed)

    @property
    def prefilling(self) -> bool:
        return self.computed < self.prefill_target

    @property
    def limit(self) -> int:
        return min(self.max_tokens, self.stop_after)

    def tokens(self) -> list[str]:
        """Everything the KV holds when recomputed: prompt, then output so far."""
        return self.prompt + [t.strip() for t in self.output]

    def next_token(self) -> str:
        return self._words.next()
