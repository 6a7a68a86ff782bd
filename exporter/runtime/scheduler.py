"""Runs each check on its own interval: start jitter, per-run timeout, no overlap, isolation.

A check that raises or hangs only affects its own series: the run is recorded as ``error``
or ``timeout`` and the loop carries on. Ticks missed while a run overran are skipped rather
than bunched, so a slow target never turns into a burst of requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from dataclasses import dataclass

from exporter import metrics, redact
from exporter.checks.base import Check, RunSkipped
from exporter.checks.batch import Ledger
from exporter.runtime.exposition import Store

log = logging.getLogger("exporter.runtime.scheduler")

#: Start jitter is capped so a 10-minute route check still starts within a few seconds.
MAX_START_JITTER = 5.0
#: After cancelling a timed-out run, how long to wait for it to unwind before moving on.
CANCEL_GRACE = 1.0


@dataclass
class CheckState:
    runs: int = 0
    last_outcome: str = ""
    last_error: str = ""
    last_duration: float = 0.0
    last_run_at: float = 0.0
    failing: bool = False
    inflight: asyncio.Task[None] | None = None


class Scheduler:
    """Runs the checks and, whenever a run ends, publishes the check's batch together with
    its ``llm_exporter_check_*`` series into ``store`` (what /metrics and the diagnosis read)."""

    def __init__(
        self,
        checks: list[Check],
        rng: random.Random | None = None,
        store: Store | None = None,
    ) -> None:
        self.checks = checks
        self.store = store if store is not None else Store()
        self.state = {c.name: CheckState() for c in checks}
        self._rng = rng or random.Random()
        self._tasks: list[asyncio.Task[None]] = []
        self._own: dict[str, Ledger] = {}
        for check in checks:
            own = self._own[check.name] = Ledger()
            # Pre-create the series so a rate() over them works from the first failure on.
            for outcome in metrics.CHECK_OUTCOMES:
                own.counter(metrics.EXPORTER_CHECK_RUNS, {"check": check.name, "outcome": outcome})
            own.histogram(metrics.EXPORTER_CHECK_DURATION, {"check": check.name})
            self._publish(check)

    def _publish(self, check: Check) -> None:
        try:
            batch = check.batch()
        except Exception as exc:  # a check's bug must not stop its loop: its series go
            log.error("check batch failed", extra={"check": check.name, "error": str(exc)})
            batch = ()
        self.store.publish(check.name, batch + self._own[check.name].batch())

    @property
    def all_ran(self) -> bool:
        return all(s.runs > 0 for s in self.state.values())

    def start(self) -> None:
        for check in self.checks:
            self._tasks.append(asyncio.create_task(self._loop(check), name=check.name))

    async def stop(self, timeout: float = 3.0) -> None:
        """Cancel every loop and in-flight run, then close the checks."""
        for task in self._tasks:
            task.cancel()
        inflight = [s.inflight for s in self.state.values() if s.inflight is not None]
        for task in inflight:
            task.cancel()
        pending = [*self._tasks, *inflight]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        self._tasks.clear()
        for check in self.checks:
            try:
                await asyncio.wait_for(check.close(), timeout=1.0)
            except Exception as exc:  # a check's cleanup must not block the others'
                log.warning("check close failed", extra={"check": check.name, "error": str(exc)})

    async def _loop(self, check: Check) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self._rng.uniform(0, min(check.interval, MAX_START_JITTER)))
        next_at = loop.time()
        while True:
            await self.run_once(check)
            next_at += check.interval
            now = loop.time()
            if next_at < now:
                next_at += math.ceil((now - next_at) / check.interval) * check.interval
            await asyncio.sleep(next_at - now)

    async def run_once(self, check: Check) -> str:
        """One scheduled run of ``check``; returns and records its outcome."""
        state = self.state[check.name]
        if state.inflight is not None and not state.inflight.done():
            # The previous run ignored cancellation; never start a second one beside it.
            return self._record(check, metrics.CHECK_SKIPPED, 0.0, "previous run still in progress")
        started = time.monotonic()
        task = asyncio.create_task(check.run(), name=f"run:{check.name}")
        try:
            done, _ = await asyncio.wait({task}, timeout=check.timeout)
        except asyncio.CancelledError:
            task.cancel()
            raise
        elapsed = time.monotonic() - started
        if task in done:
            exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
            if exc is None:
                return self._record(check, metrics.CHECK_SUCCESS, elapsed, "")
            if isinstance(exc, RunSkipped):
                return self._record(check, metrics.CHECK_SKIPPED, elapsed, str(exc), held=True)
            return self._record(check, metrics.CHECK_ERROR, elapsed, _describe(exc))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({task}, timeout=CANCEL_GRACE)
        if not task.done():
            state.inflight = task
        else:
            # Retrieve the result so asyncio does not warn about an unretrieved exception.
            with contextlib.suppress(BaseException):
                task.result()
        return self._record(
            check, metrics.CHECK_TIMEOUT, elapsed, f"run exceeded timeout of {check.timeout:g}s"
        )

    def _record(
        self, check: Check, outcome: str, elapsed: float, error: str, held: bool = False
    ) -> str:
        state = self.state[check.name]
        state.runs += 1
        state.last_run_at = time.time()
        own, labels = self._own[check.name], {"check": check.name}
        own.counter(metrics.EXPORTER_CHECK_RUNS, {**labels, "outcome": outcome}).inc()
        own.histogram(metrics.EXPORTER_CHECK_DURATION, labels).observe(elapsed)
        if held:
            # Nothing was measured: the last real outcome (and its error) is still the news,
            # and a check held between failures must not flap failing/recovered in the log.
            self._publish(check)
            return outcome
        state.last_outcome = outcome
        state.last_duration = elapsed
        state.last_error = redact.text(error)  # shown on `/` and logged
        failing = outcome != metrics.CHECK_SUCCESS
        if failing and not state.failing:
            log.warning(
                "check failing",
                extra={"check": check.name, "outcome": outcome, "error": error},
            )
        elif not failing:
            # Stamped with the run's start, as Prometheus stamps a scrape: what the run read
            # is no older than that (the diagnosis aligns probes to an engine's, alignment.py).
            own.gauge(metrics.EXPORTER_CHECK_LAST_SUCCESS, labels).set(state.last_run_at - elapsed)
            if state.failing:
                log.info("check recovered", extra={"check": check.name})
        state.failing = failing
        self._publish(check)
        return outcome


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    # One line, bounded: a check's exception text is its own and carries no secrets, but an
    # upstream error body could be long.
    text = " ".join(text.split())
    return text[:300]
