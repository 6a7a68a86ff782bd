"""Synthetic streaming probes: one real chat/completions request per interval, measured the
way a user feels it (TTFT, time to first content, TPOT, inter-token gaps, E2E, stalls) with
connection phases kept apart, every failure named by its outcome.

The request path is :mod:`exporter.probing.client`, shared with ``bench``. Safety: requests to one
endpoint (host:port) pass a gate with a concurrency cap and a minimum spacing between
starts; responses are capped in size; prompts, responses and keys are never logged (the
only text that leaves a run is its outcome and a short transport-level detail).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from exporter import metrics
from exporter.checks.base import Check, Registration, RunSkipped
from exporter.checks.batch import Batch, Ledger, Named
from exporter.config.models import Config, ProbeConfig, SloConfig
from exporter.metrics import ProbeOutcome
from exporter.probing import server_timing
from exporter.probing.client import Client
from exporter.probing.prompts import nonce, probe_max_tokens, probe_prompt
from exporter.probing.request import (
    RequestResult,
    RequestSpec,
    Timeouts,
    endpoint_url,
    target_of,
)
from exporter.probing.tcpinfo import TcpDelta

#: Longest a probe waits for its endpoint's gate before giving up on this run (the run then
#: fails as "endpoint busy" and no request is counted: the endpoint did nothing wrong).
GATE_WAIT = 5.0
#: Scheduler timeout above the probe's own: the probe's deadlines decide the outcome, the
#: scheduler's only catches a run that failed to honour them.
SCHEDULER_MARGIN = 1.0


class ProbeFailed(Exception):
    pass


class EndpointBusy(ProbeFailed):
    pass


class EndpointGate:
    """Concurrency cap and minimum spacing between request starts, for one endpoint."""

    def __init__(self, max_concurrency: int, min_spacing: float) -> None:
        self.max_concurrency = max_concurrency
        self.min_spacing = min_spacing
        self._sem: asyncio.Semaphore | None = None
        self._lock: asyncio.Lock | None = None
        self._next_start = 0.0

    def tighten(self, max_concurrency: int, min_spacing: float) -> None:
        """Probes sharing the endpoint: the strictest of their limits applies."""
        self.max_concurrency = min(self.max_concurrency, max_concurrency)
        self.min_spacing = max(self.min_spacing, min_spacing)

    @contextlib.asynccontextmanager
    async def slot(self, wait: float = GATE_WAIT) -> AsyncIterator[None]:
        if self._sem is None or self._lock is None:
            self._sem = asyncio.Semaphore(self.max_concurrency)
            self._lock = asyncio.Lock()
        loop = asyncio.get_running_loop()
        acquired = False
        try:
            async with asyncio.timeout(wait):
                await self._sem.acquire()
                acquired = True
                async with self._lock:
                    delay = self._next_start - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    self._next_start = loop.time() + self.min_spacing
        except TimeoutError:
            if acquired:
                self._sem.release()
            raise EndpointBusy(
                f"endpoint busy: no slot within {wait:g}s "
                f"(max_concurrency {self.max_concurrency}, min_spacing {self.min_spacing:g}s)"
            ) from None
        try:
            yield
        finally:
            self._sem.release()


class ProbeCheck(Check):
    kind = "probe"

    def __init__(
        self, cfg: ProbeConfig, slo: SloConfig, gate: EndpointGate) -> None:
        super().__init__(cfg.name, cfg.interval, cfg.timeouts.total + GATE_WAIT + SCHEDULER_MARGIN)
        self.cfg = cfg
        self.url = endpoint_url(cfg.url, cfg.api)
        self.endpoint = target_of(self.url)
        self.gate = gate
        self.ttft_slo = cfg.slo.ttft_p95_seconds or slo.ttft_p95_seconds
        self.tpot_slo = cfg.slo.tpot_p95_seconds or slo.tpot_p95_seconds
        self.timeouts = Timeouts(
            connect=cfg.timeouts.connect,
            first_token=cfg.timeouts.first_token,
            total=cfg.timeouts.total,
        )
        self._labels: Named = {
            "probe": cfg.name, "target": self.endpoint, "profile": cfg.profile,
            "carrier": cfg.carrier or "", "engine_target": cfg.engine or "",
        }
        labels = self._labels
        self._own = own = Ledger()
        # Every outcome exists from the start, so rate() and goodput ratios work at once.
        for outcome in ProbeOutcome:
            own.counter(metrics.PROBE_REQUESTS, {**labels, "outcome": outcome.value})
        own.counter(metrics.PROBE_SLO_GOOD, labels)
        for split in metrics.ServerSplit:
            own.counter(metrics.PROBE_SERVER_SPLIT, {**labels, "split": split.value})
        own.counter(metrics.PROBE_HELD_OFF, labels)
        #: Monotonic time before which the endpoint asked us not to call (Retry-After).
        self._hold_until = 0.0
        self._client = Client(max_response_bytes=cfg.max_response_bytes, ca_file=cfg.ca_file)

    @property
    def series_labels(self) -> dict[str, str]:
        """The label set of this probe's series (without outcome, phase, ...)."""
        return dict(self._labels)

    def describe(self) -> str:
        c = self.cfg
        return f"{c.api} {self.endpoint} model={c.model} profile={c.profile}"

    def request(self) -> RequestSpec:
        c = self.cfg
        return RequestSpec(
            url=self.url,
            api=c.api,
            model=c.model,
            prompt=probe_prompt(c.profile, c.prompt_tokens, nonce()),
            max_tokens=probe_max_tokens(c.profile, c.max_tokens),
            api_key=c.api_key.value() if c.api_key is not None else None,
        )

    async def run(self) -> None:
        if (wait := self._hold_until - time.monotonic()) > 0:
            # Not a failure of this run: the endpoint said when to come back.
            self._own.counter(metrics.PROBE_HELD_OFF, self._labels).inc()
            raise RunSkipped(f"held off: the endpoint asked for {wait:.0f}s more (Retry-After)")
        spec = self.request()
        async with self.gate.slot():
            result = await self._client.send(spec, self.timeouts)
        if result.retry_after is not None:
            self._hold_until = time.monotonic() + result.retry_after
        self.record(result)
        if not result.ok:
            raise ProbeFailed(f"{result.outcome.value}: {result.detail}")

    def record(self, result: RequestResult) -> None:
        own, labels = self._own, self._labels
        own.counter(metrics.PROBE_REQUESTS, {**labels, "outcome": result.outcome.value}).inc()
        connection = result.connection or "new"  # a failed connect was a new one
        for phase, seconds in result.phases.items():
            own.histogram(
                metrics.PROBE_PHASE, {**labels, "phase": phase, "connection": connection}
            ).observe(seconds)
        if result.tcp is not None:
            self._record_tcp(result.tcp)
        s = result.stream
        if not result.ok or s is None or s.ttft is None or s.e2e is None:
            return
        self._record_split(server_timing.split(server_timing.parse(s.server_timing), s.ttft))
        own.histogram(metrics.PROBE_TTFT, labels).observe(s.ttft)
        if s.ttfc is not None:
            own.histogram(metrics.PROBE_TTFC, labels).observe(s.ttfc)
        own.histogram(metrics.PROBE_E2E, labels).observe(s.e2e)
        itl = own.histogram(metrics.PROBE_ITL, labels)
        for gap in s.itl:
            itl.observe(gap)
        if s.stall is not None:
            own.histogram(metrics.PROBE_STALL, labels).observe(s.stall)
        tpot = s.tpot
        if tpot is not None:
            own.histogram(metrics.PROBE_TPOT, labels).observe(tpot)
        source = "chunks" if s.tokens_estimated else "usage"
        own.counter(metrics.PROBE_OUTPUT_TOKENS, {**labels, "source": source}).inc(s.output_tokens)
        if s.prompt_tokens is not None:
            own.counter(metrics.PROBE_PROMPT_TOKENS, labels).inc(s.prompt_tokens)
        if s.cached_tokens is not None:
            own.counter(metrics.PROBE_CACHED_PROMPT_TOKENS, labels).inc(s.cached_tokens)
        if s.ttft <= self.ttft_slo and (tpot is None or tpot <= self.tpot_slo):
            own.counter(metrics.PROBE_SLO_GOOD, labels).inc()
        own.gauge(metrics.PROBE_LAST_SUCCESS, labels).set(time.time())

    def _record_tcp(self, tcp: TcpDelta) -> None:
        """Every request that got a response, failed ones included: a stream that timed out
        while its connection retransmitted is the network's doing."""
        own, labels = self._own, self._labels
        for family, seconds in (
            (metrics.PROBE_TCP_RTT, tcp.rtt),
            (metrics.PROBE_TCP_RTTVAR, tcp.rttvar),
            (metrics.PROBE_TCP_MIN_RTT, tcp.min_rtt),
        ):
            if seconds is not None:
                own.histogram(family, labels).observe(seconds)
        for kind, count in (
            (metrics.TcpSegments.SENT, tcp.segs_out),
            (metrics.TcpSegments.RETRANSMITTED, tcp.retransmitted),
            (metrics.TcpSegments.RECEIVED, tcp.data_segs_in),
            (metrics.TcpSegments.OUT_OF_ORDER, tcp.out_of_order),
        ):
            if count is not None:
                segments = {**labels, "segments": kind.value}
                own.counter(metrics.PROBE_TCP_SEGMENTS, segments).inc(count)

    def _record_split(self, decided: tuple[metrics.ServerSplit, server_timing.Split | None]
                      ) -> None:
        own, labels = self._own, self._labels
        kind, parts = decided
        own.counter(metrics.PROBE_SERVER_SPLIT, {**labels, "split": kind.value}).inc()
        if parts is None:
            return
        for part, seconds in (
            (metrics.ServerPart.NETWORK_FRONTEND, parts.network_frontend),
            (metrics.ServerPart.QUEUE, parts.queue),
            (metrics.ServerPart.PREFILL, parts.prefill),
            (metrics.ServerPart.DECODE, parts.decode),
        ):
            if seconds is not None:
                own.histogram(
                    metrics.PROBE_SERVER_TIMING, {**labels, "part": part.value}
                ).observe(seconds)

    def batch(self) -> Batch:
        return self._own.batch()

    async def close(self) -> None:
        await self._client.close()


def build(config: Config) -> list[Check]:
    if not config.probes:
        return []
    gates: dict[str, EndpointGate] = {}
    for p in config.probes:
        endpoint = target_of(endpoint_url(p.url, p.api))
        if endpoint in gates:
            gates[endpoint].tighten(p.max_concurrency, p.min_spacing)
        else:
            gates[endpoint] = EndpointGate(p.max_concurrency, p.min_spacing)
    return [
        ProbeCheck(p, config.slo, gates[target_of(endpoint_url(p.url, p.api))])
        for p in config.probes
    ]


REGISTRATION = Registration("probes", build)
