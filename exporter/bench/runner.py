"""The load loop: a fixed number of requests in flight (``--concurrency``) or Poisson
arrivals (``--rate``), for ``--requests`` or ``--duration``, one record per request, with a
progress line on a terminal.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any, TextIO

from exporter.bench.config import BenchConfig
from exporter.bench.failures import ERROR_BODY_BYTES, record_detail
from exporter.bench.workload import RequestSource
from exporter.probing import server_timing
from exporter.probing.client import Client
from exporter.probing.request import RequestResult
from exporter.probing.stream import StreamResult

#: A safety cap only: ~250 bytes per streamed token leaves room for 200k-token answers.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class Progress:
    """One redrawn status line on a terminal; silent otherwise (logs and pipes stay clean)."""

    def __init__(self, cfg: BenchConfig, out: TextIO) -> None:
        self._cfg = cfg
        self._out = out
        self._enabled = out.isatty()
        self._drawn = 0.0
        self.done = 0
        self.failed = 0

    def update(self, ok: bool, origin: float) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        now = time.monotonic()
        if self._enabled and now - self._drawn >= 0.1:
            self._drawn = now
            self._draw(now - origin)

    def _draw(self, elapsed: float) -> None:
        cfg, width = self._cfg, 30
        if cfg.requests is not None:
            frac, count = self.done / cfg.requests, f"{self.done}/{cfg.requests}"
        else:
            assert cfg.duration is not None
            frac, count = min(elapsed / cfg.duration, 1.0), f"{self.done}"
        bar = "#" * int(frac * width)
        rate = self.done / elapsed if elapsed > 0 else 0.0
        self._out.write(
            f"\r[{bar:<{width}}] {count} requests  {self.failed} failed  "
            f"{rate:.1f} req/s  {elapsed:.1f}s "
        )
        self._out.flush()

    def finish(self) -> None:
        if self._enabled:
            self._out.write("\n")
            self._out.flush()


def engine_split(s: StreamResult | None) -> dict[str, Any]:
    """The request's TTFT split by the engine's own timing of it, as the probe splits it
    (exporter/probing/server_timing.py): nulls where there was no first token or no
    usable timing, and ``server_split`` says which."""
    decided, parts = (server_timing.split(server_timing.parse(s.server_timing), s.ttft)
                      if s is not None and s.ttft is not None else (None, None))
    return {
        "server_split": decided.value if decided is not None else None,
        "queue_s": parts.queue if parts else None,
        "prefill_s": parts.prefill if parts else None,
        "network_frontend_s": parts.network_frontend if parts else None,
        "decode_s": parts.decode if parts else None,
    }


def to_record(i: int, max_tokens: int, res: RequestResult, origin: float) -> dict[str, Any]:
    """One request as stored in --json: times in seconds; start_s is when the request was
    written on its connection (relative to the run's start); TTFT/E2E count from there."""
    s = res.stream
    start = res.started_at if res.started_at is not None else res.issued_at
    return {
        "id": i,
        "start_s": start - origin,
        "setup_s": start - res.issued_at,
        "connection": res.connection,
        "outcome": res.outcome.value,
        "status": res.status,
        "detail": record_detail(res.detail, res.error_body),
        "ttft_s": s.ttft if s else None,
        "ttfc_s": s.ttfc if s else None,
        "tpot_s": s.tpot if s else None,
        "itl_s": s.itl if s else [],
        "e2e_s": s.e2e if s else None,
        "finish_s": s.finish if s else None,
        "output_tokens": s.output_tokens if s else None,
        "output_tokens_estimated": s.tokens_estimated if s else None,
        "prompt_tokens": s.prompt_tokens if s else None,
        "cached_tokens": s.cached_tokens if s else None,
        "max_tokens": max_tokens,
        **engine_split(s),
    }


@dataclass
class RunResult:
    records: list[dict[str, Any]]
    duration: float
    origin: float
    run_id: str
    started_at: str


async def run_bench(cfg: BenchConfig, progress: Progress) -> RunResult:
    run_id = uuid.uuid4().hex[:12]
    source = RequestSource(cfg, run_id)
    arrivals = random.Random(cfg.seed + 1)
    client = Client(
        limit=cfg.concurrency or 0,  # rate mode: no client-side queue hiding server latency
        max_response_bytes=MAX_RESPONSE_BYTES,
        ca_file=cfg.ca_file,
        # The server's error message is what a failed run's report most needs.
        error_body_bytes=ERROR_BODY_BYTES,
    )
    records: list[dict[str, Any]] = []
    issued = 0
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    origin = time.monotonic()

    def take() -> int | None:
        nonlocal issued
        if cfg.requests is not None and issued >= cfg.requests:
            return None
        if cfg.duration is not None and time.monotonic() - origin >= cfg.duration:
            return None
        issued += 1
        return issued - 1

    async def one(i: int) -> None:
        spec = source.spec(i)
        res = await client.send(spec, cfg.timeouts)
        records.append(to_record(i, spec.max_tokens, res, origin))
        progress.update(res.ok, origin)

    try:
        if cfg.concurrency is not None:

            async def worker() -> None:
                while (i := take()) is not None:
                    await one(i)

            await asyncio.gather(*(worker() for _ in range(cfg.concurrency)))
        else:
            assert cfg.rate is not None
            tasks: list[asyncio.Task[None]] = []
            next_at = origin
            while True:
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                i = take()
                if i is None:
                    break
                tasks.append(asyncio.create_task(one(i)))
                next_at += arrivals.expovariate(cfg.rate)
            await asyncio.gather(*tasks)
    finally:
        await client.close()
        progress.finish()
    records.sort(key=lambda r: r["id"])
    return RunResult(records, time.monotonic() - origin, origin, run_id, started_at)
