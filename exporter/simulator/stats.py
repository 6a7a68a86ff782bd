"""What the simulated engines did, kept in the exporter's normalized terms.

State is keyed by the normalized family (exporter.metrics) and the normalized labels the
engine itself knows (``model``, ``dp_rank``, ``finished_reason``); render.py turns it into
each engine's own exposition through the mapping table, so no engine metric name is written
here. Histogram bucket bounds are the engines' defaults: facts about the engines being
imitated, not metric names, so they live in this module.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from exporter import metrics as m
from exporter.simulator.engine import Engine
from exporter.simulator.engine_config import EngineConfig
from exporter.simulator.sequence import Sequence

Labels = tuple[tuple[str, str], ...]

# --- default buckets of the imitated engines (vLLM, SGLang and TensorRT-LLM defaults) ---
VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0)
VLLM_REQUEST = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TRTLLM_PREFILL = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
                  40.0, 80.0, 160.0, 640.0, 2560.0)
SGLANG_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
               100.0, 200.0, 400.0)
SGLANG_E2E = (*SGLANG_TTFT, 600.0, 1200.0, 1800.0, 2400.0)
SGLANG_ITL = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
              0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
SGLANG_QUEUE = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0,
                15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0,
                400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0,
                1800.0, 2000.0, 2500.0, 3000.0)

#: vLLM's NIXL transfer-time buckets (vllm/distributed/kv_transfer nixl_connector).
VLLM_KV_TRANSFER = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0,
                    5.0)
#: vLLM's build_1_2_5_buckets(max_model_len) for per-request token counts.
VLLM_TOKENS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
VLLM_STEP_TOKENS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
                    8192.0, 16384.0)
#: What the estimated-work counters assume: an 8B-parameter model in bf16 (Llama-3-8B's KV
#: is 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes per token).
MODEL_PARAMS = 8e9
PARAM_BYTES = 2 * MODEL_PARAMS
KV_BYTES_PER_TOKEN = 131072.0

_VLLM = {
    m.ENGINE_INFERENCE_TIME.name: VLLM_REQUEST,
    m.ENGINE_REQUEST_PROMPT_TOKENS.name: VLLM_TOKENS,
    m.ENGINE_REQUEST_GENERATION_TOKENS.name: VLLM_TOKENS,
    m.ENGINE_STEP_TOKENS.name: VLLM_STEP_TOKENS,
    m.ENGINE_TTFT.name: VLLM_TTFT,
    m.ENGINE_ITL.name: VLLM_ITL,
    m.ENGINE_E2E.name: VLLM_REQUEST,
    m.ENGINE_QUEUE_TIME.name: VLLM_REQUEST,
    m.ENGINE_PREFILL_TIME.name: VLLM_REQUEST,
    m.ENGINE_DECODE_TIME.name: VLLM_REQUEST,
    m.ENGINE_KV_TRANSFER_TIME.name: VLLM_KV_TRANSFER,
}
BUCKETS: dict[str, dict[str, tuple[float, ...]]] = {
    "vllm": _VLLM,
    "vllm-legacy": _VLLM,
    "trtllm": {**_VLLM, m.ENGINE_PREFILL_TIME.name: TRTLLM_PREFILL},
    "triton": _VLLM,
    "sglang": {
        **_VLLM,
        m.ENGINE_TTFT.name: SGLANG_TTFT,
        m.ENGINE_ITL.name: SGLANG_ITL,
        m.ENGINE_E2E.name: SGLANG_E2E,
        m.ENGINE_QUEUE_TIME.name: SGLANG_QUEUE,
    },
}
#: SGLang spreads a multi-token output over its tokens: the bucket of interval/n gains n and
#: the sum gains the interval, so _count counts tokens (SGLang collector.py).
PER_TOKEN_ITL = {"sglang"}


@dataclass
class Histogram:
    bounds: tuple[float, ...]
    counts: list[float] = field(default_factory=list)
    sum: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0.0] * (len(self.bounds) + 1)

    def observe(self, value: float, weight: float = 1.0, total: float | None = None) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += weight
        self.sum += value * weight if total is None else total

    @property
    def count(self) -> float:
        return sum(self.counts)

    def cumulative(self) -> Iterator[tuple[float, float]]:
        """(upper bound, cumulative count), ending with +Inf."""
        running = 0.0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            yield bound, running


Value = float | Histogram


class Store:
    """Normalized family name -> normalized labels -> value."""

    def __init__(self) -> None:
        self.families: dict[str, dict[Labels, Value]] = {}

    def series(self, name: str) -> dict[Labels, Value]:
        return self.families.get(name, {})

    def _slot(self, name: str) -> dict[Labels, Value]:
        return self.families.setdefault(name, {})

    def add(self, family: m.Family, labels: Labels, value: float = 1.0) -> None:
        slot = self._slot(family.name)
        current = slot.get(labels, 0.0)
        assert isinstance(current, float)
        slot[labels] = current + value

    def set(self, family: m.Family, labels: Labels, value: float) -> None:
        self._slot(family.name)[labels] = float(value)

    def histogram(self, name: str, labels: Labels, bounds: tuple[float, ...]) -> Histogram:
        slot = self._slot(name)
        hist = slot.get(labels)
        if not isinstance(hist, Histogram):
            hist = slot[labels] = Histogram(bounds)
        return hist


def labels_of(model: str, dp_rank: int, **extra: str) -> Labels:
    return tuple(sorted({"model": model, "dp_rank": str(dp_rank), **extra}.items()))


COUNTERS = (
    m.ENGINE_PROMPT_TOKENS,
    m.ENGINE_GENERATION_TOKENS,
    m.ENGINE_PREFIX_CACHE_QUERIES,
    m.ENGINE_PREFIX_CACHE_HITS,
    m.ENGINE_PREEMPTIONS,
    m.ENGINE_QUEUE_DURATION,
    m.ENGINE_REQUEST_DURATION,
    m.ENGINE_COMPUTE_DURATION,
    m.ENGINE_REQUESTS_SUCCEEDED,
    m.ENGINE_REQUESTS_FAILED,
    m.ENGINE_PROMPT_TOKENS_CACHED,
    m.ENGINE_ESTIMATED_READ_BYTES,
    m.ENGINE_ESTIMATED_WRITE_BYTES,
    m.ENGINE_ESTIMATED_FLOPS,
)
HISTOGRAMS = (
    m.ENGINE_TTFT,
    m.ENGINE_ITL,
    m.ENGINE_E2E,
    m.ENGINE_QUEUE_TIME,
    m.ENGINE_PREFILL_TIME,
    m.ENGINE_DECODE_TIME,
    m.ENGINE_INFERENCE_TIME,
    m.ENGINE_REQUEST_PROMPT_TOKENS,
    m.ENGINE_REQUEST_GENERATION_TOKENS,
    m.ENGINE_STEP_TOKENS,
)


#: Families an engine has only with the feature on, as vLLM creates them only then.
SPECULATIVE = (m.ENGINE_SPEC_DRAFTS, m.ENGINE_SPEC_DRAFT_TOKENS, m.ENGINE_SPEC_ACCEPTED_TOKENS)


class ServerStats:
    """What the API server, not an engine, reports: its own CPU, as the work it stands in
    for (tokenizing, templating: ``frontend_delay``) that an engine's API server spends on
    its one Python process. Not the simulator's own CPU, which models nothing, so an idle
    simulator reads the same twice."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.add(m.ENGINE_PROCESS_CPU, (), 0.0)

    def frontend(self, seconds: float) -> None:
        self.store.add(m.ENGINE_PROCESS_CPU, (), seconds)


class EngineStats:
    """One engine's observer (engine.Observer): its facts, as normalized families."""

    def __init__(self, store: Store, fmt: str, model: str, dp_rank: int,
                 config: EngineConfig | None = None) -> None:
        self.store = store
        self.labels = labels_of(model, dp_rank)
        self._buckets = BUCKETS[fmt]
        self._per_token_itl = fmt in PER_TOKEN_ITL
        self._model = model
        self._dp_rank = dp_rank
        # Every series exists from the start, as vLLM creates them per engine at init: a
        # scrape before the first request sees zeros, not absence.
        for family in COUNTERS:
            store.add(family, self.labels, 0.0)
        # vLLM pre-creates every finish reason (vllm/v1/engine FINISH_REASON_STRINGS).
        for reason in m.ENGINE_FINISH_REASONS:
            store.add(m.ENGINE_REQUESTS_FINISHED, self._reason(reason), 0.0)
        for source in m.ENGINE_PROMPT_SOURCES:
            store.add(m.ENGINE_PROMPT_TOKENS_BY_SOURCE, self._source(source), 0.0)
        # The simulator has no admission limit: vLLM's pre-created zeros.
        for reason in m.ENGINE_ADMISSION_REASONS:
            store.add(m.ENGINE_ADMISSION_REJECTIONS, self._with(reason=reason), 0.0)
        for family in HISTOGRAMS:
            self._hist(family)
        config = config or EngineConfig()
        if config.speculative_tokens:
            for family in SPECULATIVE:
                store.add(family, self.labels, 0.0)
        if config.pd:
            self._hist(m.ENGINE_KV_TRANSFER_TIME)

    def _reason(self, reason: str) -> Labels:
        return labels_of(self._model, self._dp_rank, finished_reason=reason)

    def _source(self, source: str) -> Labels:
        return labels_of(self._model, self._dp_rank, source=source)

    def _with(self, **extra: str) -> Labels:
        return labels_of(self._model, self._dp_rank, **extra)

    def _hist(self, family: m.Family) -> Histogram:
        return self.store.histogram(family.name, self.labels, self._buckets[family.name])

    # --- engine.Observer ------------------------------------------------------------
    def admitted(self, seq: Sequence, queried: int, hit: int) -> None:
        self.store.add(m.ENGINE_PREFIX_CACHE_QUERIES, self.labels, queried)
        self.store.add(m.ENGINE_PREFIX_CACHE_HITS, self.labels, hit)

    def preempted(self, seq: Sequence) -> None:
        self.store.add(m.ENGINE_PREEMPTIONS, self.labels)

    def prompt_done(self, seq: Sequence) -> None:
        prompt = len(seq.prompt)
        cached = min(seq.cached_tokens or 0, prompt)
        # With P/D all but the last token's KV came from the prefill instance.
        external = prompt - 1 if seq.transfer_seconds else 0
        self.store.add(m.ENGINE_PROMPT_TOKENS, self.labels, prompt)
        self.store.add(m.ENGINE_PROMPT_TOKENS_CACHED, self.labels, cached + external)
        self.store.add(m.ENGINE_PROMPT_TOKENS_BY_SOURCE, self._source("local_cache_hit"), cached)
        self.store.add(m.ENGINE_PROMPT_TOKENS_BY_SOURCE, self._source("external_kv_transfer"),
                       external)
        self.store.add(
            m.ENGINE_PROMPT_TOKENS_BY_SOURCE, self._source("local_compute"),
            prompt - cached - external,
        )
        if seq.transfer_seconds:
            self._hist(m.ENGINE_KV_TRANSFER_TIME).observe(seq.transfer_seconds)

    def drafted(self, seq: Sequence, drafts: int, accepted: int) -> None:
        self.store.add(m.ENGINE_SPEC_DRAFTS, self.labels)
        self.store.add(m.ENGINE_SPEC_DRAFT_TOKENS, self.labels, drafts)
        self.store.add(m.ENGINE_SPEC_ACCEPTED_TOKENS, self.labels, accepted)

    def stepped(self, tokens: int, context: int) -> None:
        self._hist(m.ENGINE_STEP_TOKENS).observe(tokens)
        # Every step reads the weights and the KV of its context, and writes its new KV.
        self.store.add(m.ENGINE_ESTIMATED_FLOPS, self.labels, 2 * MODEL_PARAMS * tokens)
        self.store.add(m.ENGINE_ESTIMATED_READ_BYTES, self.labels,
                       PARAM_BYTES + KV_BYTES_PER_TOKEN * context)
        self.store.add(m.ENGINE_ESTIMATED_WRITE_BYTES, self.labels, KV_BYTES_PER_TOKEN * tokens)

    def output(self, seq: Sequence, count: int, interval: float | None) -> None:
        self.store.add(m.ENGINE_GENERATION_TOKENS, self.labels, count)
        if interval is None:
            assert seq.first_token_ts is not None
            self._hist(m.ENGINE_TTFT).observe(seq.first_token_ts - seq.arrival)
        elif self._per_token_itl:
            self._hist(m.ENGINE_ITL).observe(interval / count, weight=count, total=interval)
        else:
            self._hist(m.ENGINE_ITL).observe(interval)

    def finished(self, seq: Sequence) -> None:
        assert seq.scheduled_ts is not None and seq.first_token_ts is not None
        assert seq.last_token_ts is not None and seq.finish_reason is not None
        e2e = seq.last_token_ts - seq.arrival
        queue = seq.scheduled_ts - seq.queued_ts
        inference = seq.last_token_ts - seq.scheduled_ts
        self._hist(m.ENGINE_E2E).observe(e2e)
        self._hist(m.ENGINE_QUEUE_TIME).observe(queue)
        self._hist(m.ENGINE_PREFILL_TIME).observe(seq.first_token_ts - seq.scheduled_ts)
        self._hist(m.ENGINE_DECODE_TIME).observe(seq.last_token_ts - seq.first_token_ts)
        self._hist(m.ENGINE_INFERENCE_TIME).observe(inference)
        self._hist(m.ENGINE_REQUEST_PROMPT_TOKENS).observe(len(seq.prompt))
        self._hist(m.ENGINE_REQUEST_GENERATION_TOKENS).observe(len(seq.output))
        self.store.add(m.ENGINE_REQUESTS_FINISHED, self._reason(seq.finish_reason))
        self.store.add(m.ENGINE_REQUESTS_SUCCEEDED, self.labels)
        self.store.add(m.ENGINE_QUEUE_DURATION, self.labels, queue)
        self.store.add(m.ENGINE_REQUEST_DURATION, self.labels, e2e)
        self.store.add(m.ENGINE_COMPUTE_DURATION, self.labels, inference)

    def aborted(self, seq: Sequence) -> None:
        # Only finished_reason counts: vLLM's latency histograms describe completed requests.
        assert seq.finish_reason is not None
        self.store.add(m.ENGINE_REQUESTS_FINISHED, self._reason(seq.finish_reason))
        self.store.add(m.ENGINE_REQUESTS_FAILED, self.labels)

    # --- gauges, sampled at scrape time -----------------------------------------------
    def sample(self, engine: Engine) -> None:
        # A request whose KV is still arriving from the prefill instance waits, deferred (as
        # vLLM's WAITING_FOR_REMOTE_KVS); every other wait is for room in the batch or cache.
        now = time.monotonic()
        deferred = sum(1 for seq in engine.running if seq.transfer_until > now)
        self.store.set(m.ENGINE_REQUESTS_RUNNING, self.labels, len(engine.running) - deferred)
        self.store.set(m.ENGINE_REQUESTS_WAITING, self.labels, len(engine.waiting) + deferred)
        self.store.set(m.ENGINE_REQUESTS_WAITING_BY_REASON, self._with(reason="capacity"),
                       len(engine.waiting))
        self.store.set(m.ENGINE_REQUESTS_WAITING_BY_REASON, self._with(reason="deferred"),
                       deferred)
        self.store.set(
            m.ENGINE_KV_CACHE_USAGE, self.labels, engine.used_blocks() / engine.config.kv_blocks
        )
