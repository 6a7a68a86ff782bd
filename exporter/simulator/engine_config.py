"""The knobs of one simulated engine: capacity, speed, and which may change while it runs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class EngineConfig:
    """Capacity and speed of one engine (one data-parallel rank)."""

    max_num_seqs: int = 16
    kv_tokens: int = 32768
    block_size: int = 16
    max_num_batched_tokens: int = 2048
    prefill_tps: float = 20000.0
    decode_step: float = 0.015
    decode_step_per_seq: float = 0.0005
    #: Mean length of a "natural" answer (drawn 0.5x..1.5x per request) when max_tokens and
    #: ignore_eos don't end it first; ends with finish_reason "stop".
    output_len: int = 128
    prefix_caching: bool = True
    #: Speculative decoding: draft tokens proposed per sequence and step (0: off); each is
    #: accepted with ``spec_acceptance``, up to the first rejection, and the step yields the
    #: accepted ones and the target model's own token.
    speculative_tokens: int = 0
    spec_acceptance: float = 0.7
    #: A decode instance of a prefill/decode pair: every prompt's KV is computed by a
    #: prefill instance (at ``prefill_tps``) and handed over at ``kv_transfer_tps`` tokens a
    #: second while the request waits, deferred; only its last token is computed here.
    pd: bool = False
    kv_transfer_tps: float = 80000.0

    #: Knobs that may change while running; the KV geometry may not (running sequences
    #: were admitted against it).
    RUNTIME = (
        "max_num_seqs",
        "max_num_batched_tokens",
        "prefill_tps",
        "decode_step",
        "decode_step_per_seq",
        "output_len",
        "prefix_caching",
        "spec_acceptance",
    )

    @property
    def kv_blocks(self) -> int:
        return self.kv_tokens // self.block_size

    @property
    def max_model_len(self) -> int:
        # Any single request must fit the cache alone, or preemption could never make room.
        return self.kv_blocks * self.block_size

    def merged(self, changes: dict[str, object]) -> EngineConfig:
        """A copy with run-time ``changes`` applied; ValueError lists every problem."""
        errors = []
        values: dict[str, Any] = {}
        for key, raw in changes.items():
            if key not in self.RUNTIME:
                errors.append(f"{key}: not a run-time knob (those are: {', '.join(self.RUNTIME)})")
                continue
            current = getattr(self, key)
            if isinstance(current, bool):
                ok = isinstance(raw, bool)
            elif isinstance(current, int):
                ok = isinstance(raw, int | float) and not isinstance(raw, bool) and raw == int(raw)
            else:
                ok = isinstance(raw, int | float) and not isinstance(raw, bool)
            if not ok:
                errors.append(f"{key}: want a {type(current).__name__}, got {raw!r}")
                continue
            values[key] = type(current)(raw)
        if not errors:
            candidate = dataclasses.replace(self, **values)
            errors = candidate.problems()
            if not errors:
                return candidate
        raise ValueError("; ".join(errors))

    def problems(self) -> list[str]:
        out = []
        for name in ("max_num_seqs", "kv_tokens", "block_size", "max_num_batched_tokens",
                     "output_len"):
            if getattr(self, name) < 1:
                out.append(f"{name}: must be at least 1")
        if self.prefill_tps <= 0 or self.kv_transfer_tps <= 0:
            out.append("prefill_tps and kv_transfer_tps: must be > 0")
        if self.speculative_tokens < 0:
            out.append("speculative_tokens: must be at least 0")
        if not 0 <= self.spec_acceptance <= 1:
            out.append("spec_acceptance: a probability, 0..1")
        if self.decode_step <= 0 or self.decode_step_per_seq < 0:
            out.append("decode_step must be > 0 and decode_step_per_seq >= 0")
        if self.block_size >= 1 and self.kv_tokens < 2 * self.block_size:
            out.append("kv_tokens: must hold at least two blocks")
        return out
