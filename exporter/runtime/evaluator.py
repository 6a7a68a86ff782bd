"""The embedded diagnosis: every ``diagnosis.interval``, take the samples, evaluate the
decision chain over the windows, keep the ``Diagnosis`` to show (a new primary verdict once
it held for ``diagnosis.confirm`` evaluations, ``diagnosis/stability.py``) and export it.
What the chain read (the ``Observations``) and the last hour of points (``trends.py``) are
kept beside it for the ``/`` page.

The whole evaluation (collecting the samples, the window math, the chain) runs on a worker
thread, so neither /metrics nor a check waits on it: collecting is safe there because the
samples come from the immutable batches the checks published (``runtime/exposition.py``).
Pure Python still holds the GIL, so the loop may wait up to one switch interval (0.1 ms, set
in app.py) at a time while it runs; the cost per evaluation is in docs/dev/diagnosis.md. The
cyclic garbage collector is off while it runs: its transient samples (40k at 1000 path
targets) otherwise set off a young collection every few milliseconds, each stopping every
thread for ~10 ms, and promoted enough to the old generation for a full collection (100 to
220 ms, every thread stopped) about every 50 s; what a scrape of /metrics met of those
decided its p99 (docs/benchmarks.md). Reference counting still frees them as they go.
An evaluation that raises is logged once (until one succeeds again), counted in
``llm_diagnosis_evaluation_errors_total`` and skipped; the exporter carries on.

SIGHUP keeps the history when ``diagnosis.window``, ``interval`` and ``history`` are
unchanged (the new generation's counters restart at zero, which the windows take as a
counter reset), and starts a new, empty one when any of them changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial

from prometheus_client import CollectorRegistry

from exporter import metrics
from exporter.config.models import Config
from exporter.diagnosis import chain, recent
from exporter.diagnosis.embedded import observe
from exporter.diagnosis.families import RawSample
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.result import Diagnosis
from exporter.diagnosis.stability import Hold
from exporter.diagnosis.thresholds import resolve
from exporter.diagnosis.trends import Point, Trends
from exporter.diagnosis.windows import History

log = logging.getLogger("exporter.diagnosis")

Evaluate = Callable[[Observations], Diagnosis]
VerdictLabels = tuple[str, ...]

_UNKNOWN = metrics.DIAGNOSIS_STATUSES[-1]
assert _UNKNOWN == "unknown"


def chain_evaluator(config: Config) -> Evaluate:
    """The decision chain with ``config``'s thresholds (resolved once per config, so a
    SIGHUP picks up new ones)."""
    thresholds = resolve(config)
    return partial(chain.diagnose, thresholds=thresholds)


def verdict_labels(diagnosis: Diagnosis) -> dict[VerdictLabels, float]:
    """``llm_diagnosis_verdict`` series: 2 for the primary verdict, 1 for the others (the
    primary wins where two verdicts share one label set)."""
    out: dict[VerdictLabels, float] = {}
    for i, v in enumerate(diagnosis.verdicts):
        # layer, cause, then the scope keys the label names share with result.SCOPE_KEYS.
        scope = metrics.DIAGNOSIS_VERDICT_LABELS[2:]
        labels = (v.layer, v.cause, *(v.scope.get(name, "") for name in scope))
        out[labels] = max(out.get(labels, 0.0), 2.0 if i == 0 else 1.0)
    return out


class Evaluator:
    def __init__(
        self,
        registry: CollectorRegistry,
        config: Callable[[], Config],
        collect: Callable[[], Iterable[RawSample]],
        evaluate_for: Callable[[Config], Evaluate] = chain_evaluator,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._collect = collect
        self._evaluate_for = evaluate_for
        self._clock = clock
        self._evaluate: tuple[Config, Evaluate] | None = None
        self.history = History.from_config(config().diagnosis)
        #: The shown diagnosis (``stability.Hold``): what the API, the page and the verdict
        #: gauges say, which is the chain's last one unless a new primary waits to be confirmed.
        self.last: Diagnosis | None = None
        self._hold = Hold()
        #: What the last evaluation read, and the last hour of it, for the `/` page.
        self.observations: Observations | None = None
        self.trend: tuple[Point, ...] = ()
        self._trends = Trends()
        self._failing: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._verdict = metrics.DIAGNOSIS_VERDICT.gauge(registry)
        self._status = metrics.DIAGNOSIS_STATUS.gauge(registry)
        self._evaluations = metrics.DIAGNOSIS_EVALUATIONS.counter(registry)
        self._errors = metrics.DIAGNOSIS_EVALUATION_ERRORS.counter(registry)
        self._shown: dict[VerdictLabels, float] = {}
        self._set_status(_UNKNOWN)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="diagnosis")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await self.tick()
            interval = self._config().diagnosis.interval
            await asyncio.sleep(max(0.0, interval - (loop.time() - started)))

    async def tick(self) -> Diagnosis | None:
        """One evaluation: the chain's diagnosis (the shown one is ``last``); None (counted
        and logged) if it failed."""
        try:
            config = self._config()
            if not self.history.same_shape(config.diagnosis):
                log.info("diagnosis windows changed; the history starts again")
                self.history = History.from_config(config.diagnosis)
                self._trends = Trends()
            evaluate = self._evaluator(config)
            diagnosis, obs, trend = await asyncio.to_thread(
                self._step, self.history, self._trends, config, evaluate
            )
            shown = self._held(diagnosis, config)
            self._publish(shown)
            # The page's tiles and the shown verdict's evidence are one evaluation's numbers:
            # while a candidate is pending, the shown (older) diagnosis keeps its own.
            if shown.at == diagnosis.at or self.observations is None:
                self.observations = obs
            self.trend = trend
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._errors.inc()
            text = f"{type(exc).__name__}: {exc}"
            if self._failing is None:
                log.exception("diagnosis evaluation failed", extra={"error": text})
            self._failing = text
            return None
        if self._failing is not None:
            log.info("diagnosis evaluation recovered")
            self._failing = None
        return diagnosis

    def _evaluator(self, config: Config) -> Evaluate:
        if self._evaluate is None or self._evaluate[0] is not config:
            self._evaluate = (config, self._evaluate_for(config))
        return self._evaluate[1]

    def _step(
        self, history: History, trends: Trends, config: Config, evaluate: Evaluate
    ) -> tuple[Diagnosis, Observations, tuple[Point, ...]]:
        with _collector_paused():
            return self._evaluate_now(history, trends, config, evaluate)

    def _evaluate_now(
        self, history: History, trends: Trends, config: Config, evaluate: Evaluate
    ) -> tuple[Diagnosis, Observations, tuple[Point, ...]]:
        samples = self._collect()
        # The snapshot's time is taken once its values are: nothing in it is newer, which is
        # what aligning a probe to an engine's scrape relies on (alignment.py).
        now = self._clock()
        history.record(samples, now)
        obs = observe(history, config, now)
        diagnosis = evaluate(obs)
        short = config.diagnosis.recent
        if short is not None:
            diagnosis = recent.combine(diagnosis, evaluate(observe(history, config, now, short)))
        return diagnosis, obs, trends.points(history, config, now)

    def _held(self, diagnosis: Diagnosis, config: Config) -> Diagnosis:
        """What to show for the chain's ``diagnosis``: a new primary verdict only once it
        held for ``diagnosis.confirm`` evaluations (SIGHUP keeps the hold's state)."""
        return self._hold.update(diagnosis, config.diagnosis.confirm)

    def _publish(self, diagnosis: Diagnosis) -> None:
        self.last = diagnosis
        self._evaluations.inc()
        self._set_status(diagnosis.status)
        shown = verdict_labels(diagnosis)
        for labels in self._shown.keys() - shown.keys():
            self._verdict.remove(*labels)
        for labels, value in shown.items():
            self._verdict.labels(*labels).set(value)
        self._shown = shown

    def _set_status(self, status: str) -> None:
        for s in metrics.DIAGNOSIS_STATUSES:
            self._status.labels(s).set(1 if s == status else 0)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No automatic garbage collection meanwhile (it is process-wide: the first evaluation
    to end turns it back on if another overlaps)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
