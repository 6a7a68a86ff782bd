"""The continuous-batching model: one asyncio task per engine, stepping in real time.

Each step is vLLM V1's scheduler reduced to what shows in latency:

1. Make room. A decoding sequence needs KV for its next tokens; while the cache is short,
   the newest running sequence is preempted: its KV is freed and it goes back to the head of
   the queue to recompute its prompt and output so far (vLLM's recompute preemption).
2. Admit waiting sequences first-come first-served while fewer than ``max_num_seqs`` run and
   each one's prefill fits in the free KV. Full prompt blocks already in the prefix cache are
   not recomputed. The head of the queue blocks those behind it, as in vLLM.
3. Batch decode tokens for every decoding sequence, then prefill chunks up to
   ``max_num_batched_tokens`` in all (chunked prefill).
4. The step lasts ``decode_step + decode_step_per_seq * decoding + prefill_tokens /
   prefill_tps`` seconds of real time; its tokens are stamped when it ends.

KV is counted in blocks of ``block_size`` tokens reserved per sequence (shared prefix blocks
are counted once per sequence: a simplification). The prefix cache is an LRU index of block
hashes as large as the KV cache, so a prefix stays cached for a while after its requests end.
Everything here uses ``time.monotonic``; nothing blocks the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections import deque
from typing import Any, Protocol

from exporter.simulator.engine_config import EngineConfig
from exporter.simulator.prefix_cache import PrefixCache
from exporter.simulator.sequence import Output, Scheduled, Sequence

log = logging.getLogger(__name__)


class Observer(Protocol):
    """What the engine reports; stats.py turns it into metric families."""

    def admitted(self, seq: Sequence, queried: int, hit: int) -> None: ...
    def preempted(self, seq: Sequence) -> None: ...
    def prompt_done(self, seq: Sequence) -> None: ...
    def drafted(self, seq: Sequence, drafts: int, accepted: int) -> None: ...
    def output(self, seq: Sequence, count: int, interval: float | None) -> None: ...
    def stepped(self, tokens: int, context: int) -> None: ...
    def finished(self, seq: Sequence) -> None: ...
    def aborted(self, seq: Sequence) -> None: ...


class Engine:
    """One engine (one model, one data-parallel rank)."""

    def __init__(self, model: str, dp_rank: int, config: EngineConfig, observer: Observer,
                 seed: int = 0):
        self.model = model
        self.dp_rank = dp_rank
        self.config = config
        self.observer = observer
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.cache = PrefixCache(config.block_size, config.kv_blocks)
        self.iteration = 0
        #: Recent per-step records, as trtllm-serve's /metrics returns (drained on read).
        self.iteration_stats: deque[dict[str, Any]] = deque(maxlen=1000)
        self._admissions = 0
        #: Draws which draft tokens the target model accepts.
        self._drafts = random.Random(seed)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"engine-{self.model}-{self.dp_rank}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for seq in [*self.waiting, *self.running]:
            self.abort(seq, "abort")

    # --- requests -------------------------------------------------------------------
    def submit(self, seq: Sequence) -> None:
        seq.queued_ts = time.monotonic()
        self.waiting.append(seq)
        self._wake.set()

    def abort(self, seq: Sequence, reason: str) -> None:
        """End a request early (client gone, stream fault, shutdown); frees its KV."""
        if seq.finish_reason is not None:
            return
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        seq.finish_reason = reason
        self.observer.aborted(seq)
        # Ends a handler still waiting on this request (shutdown); others ignore it.
        seq.events.put_nowait(Output((), time.monotonic(), reason))
        self._wake.set()

    def wake(self) -> None:
        """Re-run scheduling now (after a config change that may admit more)."""
        self._wake.set()

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running)

    # --- KV accounting --------------------------------------------------------------
    def _blocks(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    def _need(self, seq: Sequence) -> int:
        if seq.prefilling:
            return self._blocks(seq.prefill_target + 1)
        step = max(seq.faults.tokens_per_step, self.config.speculative_tokens + 1)
        ahead = min(step, seq.limit - len(seq.output))
        return self._blocks(len(seq.prompt) + len(seq.output) + ahead)

    def used_blocks(self) -> int:
        return sum(self._need(seq) for seq in self.running)

    # --- the loop -------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug in the model must not silently freeze every stream.
                log.exception("engine step failed", extra={"model": self.model})
                await asyncio.sleep(0.1)

    async def _step(self) -> None:
        cfg = self.config
        start = time.monotonic()
        self._make_room()
        self._admit(start)

        budget = cfg.max_num_batched_tokens
        decoding: list[tuple[Sequence, int]] = []
        drafted = 0
        for seq in self.running:
            if seq.prefilling or seq.ready_at > start:
                continue
            count = min(seq.faults.tokens_per_step, seq.limit - len(seq.output))
            if cfg.speculative_tokens and count == 1:
                drafts, count = self._speculate(seq)
                drafted += drafts
            if count > budget:
                break
            budget -= count
            decoding.append((seq, count))
        prefill_tokens = 0
        completing: list[Sequence] = []
        for seq in self.running:
            if budget <= 0:
                break
            if not seq.prefilling or seq.ready_at > start:
                continue
            take = min(seq.prefill_target - seq.computed, budget)
            seq.computed += take
            budget -= take
            prefill_tokens += take
            if not seq.prefilling:
                completing.append(seq)

        if not decoding and not prefill_tokens:
            await self._idle(start)
            return

        # Verifying a draft token costs the target model about what decoding one does.
        duration = (
            cfg.decode_step
            + cfg.decode_step_per_seq * (len(decoding) + drafted)
            + prefill_tokens / cfg.prefill_tps
        )
        # Sleep to an absolute deadline so event-loop latency doesn't accumulate.
        await asyncio.sleep(max(0.0, start + duration - time.monotonic()))
        end = time.monotonic()

        self.iteration += 1
        step_tokens = prefill_tokens + sum(count for _, count in decoding)
        context = sum(len(seq.prompt) + len(seq.output) for seq, _ in decoding)
        self.observer.stepped(step_tokens, context)
        finished = 0
        for seq in completing:
            if seq.finish_reason is None:
                self._prefilled(seq)
                finished += self._emit(seq, 1, end)
        for seq, count in decoding:
            if seq.finish_reason is None:
                finished += self._emit(seq, count, end)
        self._record_iteration(
            end - start, len(completing), len(decoding), prefill_tokens, finished
        )

    def _speculate(self, seq: Sequence) -> tuple[int, int]:
        """(draft tokens proposed, tokens this step yields): the drafts accepted up to the
        first rejection, and the target model's own token after them."""
        cfg = self.config
        drafts = min(cfg.speculative_tokens, seq.limit - len(seq.output) - 1)
        accepted = 0
        while accepted < drafts and self._drafts.random() < cfg.spec_acceptance:
            accepted += 1
        if drafts > 0:
            self.observer.drafted(seq, drafts, accepted)
        return max(drafts, 0), accepted + 1

    async def _idle(self, now: float) -> None:
        """Nothing runnable: wait for a request, an abort, or a held sequence's ready time."""
        self._wake.clear()
        held = [s.ready_at for s in self.running if s.ready_at > now]
        timeout = min(held) - now if held else None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    def _make_room(self) -> None:
        capacity = self.config.kv_blocks
        while self.running and self.used_blocks() > capacity:
            victim = max(self.running, key=lambda s: s.admitted)
            self.running.remove(victim)
            victim.computed = 0
            victim.prefill_target = 0
            victim.preemptions += 1
            self.waiting.appendleft(victim)
            self.observer.preempted(victim)

    def _admit(self, now: float) -> None:
        cfg = self.config
        used = self.used_blocks()
        while self.waiting and len(self.running) < cfg.max_num_seqs:
            seq = self.waiting[0]
            tokens = seq.tokens()
            need = self._blocks(len(tokens) + 1)
            if used + need > cfg.kv_blocks:
                break
            self.waiting.popleft()
            first = seq.scheduled_ts is None
            hit = self.cache.lookup(tokens) if cfg.prefix_caching and not cfg.pd else 0
            seq.prefill_target = len(tokens)
            seq.computed = hit
            if cfg.pd and first:
                # The prefill instance computed the prompt; its KV arrives over the wire and
                # only the last token is computed here once it has.
                seq.computed = len(tokens) - 1
                seq.transfer_seconds = (len(tokens) / cfg.prefill_tps
                                        + len(tokens) / cfg.kv_transfer_tps
                                        + seq.faults.kv_transfer_delay)
                seq.transfer_until = now + seq.transfer_seconds
            self._admissions += 1
            seq.admitted = self._admissions
            self.running.append(seq)
            used += need
            # Queries and hits count at every admission, re-admission after preemption
            # included (vLLM does the same; vllm#25780).
            self.observer.admitted(seq, len(tokens), hit)
            if first:
                seq.scheduled_ts = now
                seq.cached_tokens = hit
                seq.ready_at = max(now + seq.faults.slow_first_token, seq.transfer_until)
                seq.events.put_nowait(Scheduled(now))

    def _prefilled(self, seq: Sequence) -> None:
        if self.config.prefix_caching:
            self.cache.insert(seq.tokens())
        if not seq.prompt_counted:
            seq.prompt_counted = True
            self.observer.prompt_done(seq)

    def _emit(self, seq: Sequence, count: int, now: float) -> bool:
        """Deliver ``count`` new tokens; True if that finished the request."""
        texts = tuple(seq.next_token() for _ in range(count))
        seq.output.extend(texts)
        seq.computed = len(seq.prompt) + len(seq.output)
        seq.prefill_target = seq.computed
        interval = None if seq.last_token_ts is None else now - seq.last_token_ts
        if seq.first_token_ts is None:
            seq.first_token_ts = now
        seq.last_token_ts = now
        self.observer.output(seq, count, interval)
        f = seq.faults
        if f.stall > 0 and not seq.stalled and len(seq.output) >= f.stall_after:
            seq.stalled = True
            seq.ready_at = now + f.stall
        reason = None
        if len(seq.output) >= seq.max_tokens:
            reason = "length"
        elif len(seq.output) >= seq.stop_after:
            reason = "stop"
        if reason is not None:
            self.running.remove(seq)
            seq.finish_reason = reason
            if self.config.prefix_caching:
                self.cache.insert(seq.tokens())
            self.observer.finished(seq)
        seq.events.put_nowait(Output(texts, now, reason))
        return reason is not None

    def _record_iteration(
        self, duration: float, context: int, generation: int, ctx_tokens: int, finished: int
    ) -> None:
        # Field names as trtllm-serve's IterationStats JSON; only the ones this model has.
        used = self.used_blocks()
        self.iteration_stats.append(
            {
                "iter": self.iteration,
                "iterLatencyMS": round(duration * 1000, 3),
                "numActiveRequests": len(self.running),
                "numQueuedRequests": len(self.waiting),
                "numCompletedRequests": finished,
                "maxNumActiveRequests": self.config.max_num_seqs,
                "kvCacheStats": {
                    "maxNumBlocks": self.config.kv_blocks,
                    "usedNumBlocks": used,
                    "freeNumBlocks": max(0, self.config.kv_blocks - used),
                    "tokensPerBlock": self.config.block_size,
                },
                "inflightBatchingStats": {
                    "numContextRequests": context,
                    "numGenRequests": generation,
                    "numScheduledRequests": context + generation,
                    "numCtxTokens": ctx_tokens,
                },
            }
        )
