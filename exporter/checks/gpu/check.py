"""GPU check: NVML telemetry per GPU (utilization, memory, power, bandwidth, errors).

The blocking NVML work lives in exporter/checks/gpu/sampler.py and runs on one dedicated
worker thread. Each tick publishes a snapshot whole, and the check's batch is the samples of
the latest one, so a value NVML did not give is simply not there (absent, not 0) and a
scrape never touches NVML. Failing to load NVML is not a check failure: llm_gpu_nvml_up says so and
the exporter and its other checks carry on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from exporter import metrics
from exporter.checks.base import Check, Registration
from exporter.checks.batch import Batch, Sample
from exporter.checks.gpu.sampler import NvmlSampler
from exporter.checks.gpu.snapshot import GpuReading, Snapshot
from exporter.config.models import Config, GpuConfig
from exporter.metrics import Family

T = TypeVar("T")

#: A first NVML init without persistence mode can take seconds; a 1 s timeout would record
#: it as a failure. A run past the timeout keeps the worker, and the next run reports that.
MIN_TIMEOUT = 5.0

#: Families labelled only by gpu/uuid/name, rendered straight from GpuReading.values.
PLAIN_FAMILIES: tuple[Family, ...] = (
    metrics.GPU_UTILIZATION,
    metrics.GPU_MEMORY_CONTROLLER_BUSY,
    metrics.GPU_MEMORY_USED,
    metrics.GPU_MEMORY_TOTAL,
    metrics.GPU_MEMORY_RESERVED,
    metrics.GPU_POWER,
    metrics.GPU_POWER_LIMIT,
    metrics.GPU_ENERGY,
    metrics.GPU_TEMPERATURE,
    metrics.GPU_SM_CLOCK,
    metrics.GPU_MEMORY_CLOCK,
    metrics.GPU_PCIE_RX,
    metrics.GPU_PCIE_TX,
    metrics.GPU_DRAM_BANDWIDTH_UTILIZATION,
    metrics.GPU_SM_ACTIVE,
    metrics.GPU_SM_OCCUPANCY,
    metrics.GPU_TENSOR_ACTIVE,
    metrics.GPU_PCIE_LINK_GENERATION,
    metrics.GPU_PCIE_LINK_GENERATION_MAX,
    metrics.GPU_PCIE_LINK_WIDTH,
    metrics.GPU_PCIE_LINK_WIDTH_MAX,
    metrics.GPU_PCIE_REPLAYS,
)


def gpu_samples(snap: Snapshot | None) -> Batch:
    """The samples of one NVML snapshot; none before the first tick."""
    return () if snap is None else tuple(_samples(snap))


def _samples(snap: Snapshot) -> Iterator[Sample]:
    yield metrics.GPU_NVML_UP, (), 1.0 if snap.nvml_up else 0.0
    if not snap.nvml_up:
        return
    yield metrics.GPU_INFO, (snap.driver_version, snap.cuda_version), 1.0
    for g in snap.gpus:
        yield metrics.GPU_UP, _labels(g), 1.0 if g.up else 0.0
    for fam in PLAIN_FAMILIES:
        for g in snap.gpus:
            value = g.values.get(fam)
            if value is not None:
                yield fam, _labels(g), value
    for g in snap.gpus:
        base = _labels(g)
        for reason, active in g.clock_events.items():
            yield metrics.GPU_CLOCK_EVENT, (*base, reason), 1.0 if active else 0.0
        for code, count in sorted(g.xid.items()):
            yield metrics.GPU_XID_ERRORS, (*base, str(code)), float(count)
        for kind, count in g.ecc.items():
            yield metrics.GPU_ECC_ERRORS, (*base, kind), float(count)
        for link, (active, errors) in sorted(g.nvlink.items()):
            yield metrics.GPU_NVLINK_UP, (*base, str(link)), 1.0 if active else 0.0
            for kind, count in errors.items():
                yield metrics.GPU_NVLINK_ERRORS, (*base, str(link), kind), float(count)
        if g.peak is not None:
            yield metrics.GPU_MEMORY_BANDWIDTH_PEAK, (*base, g.peak[1]), g.peak[0]
            if g.bandwidth is not None:
                yield metrics.GPU_MEMORY_BANDWIDTH, (*base, g.peak[1]), g.bandwidth
        for p in g.processes:
            yield metrics.GPU_PROCESS_MEMORY, (*base, str(p.pid), p.name), float(p.used_bytes)


def _labels(g: GpuReading) -> tuple[str, str, str]:
    return (str(g.index), g.uuid, g.name)


class GpuCheck(Check):
    kind = "gpu"

    def __init__(self, config: GpuConfig, sampler: NvmlSampler | None = None) -> None:
        super().__init__("nvml", config.interval, max(config.interval, MIN_TIMEOUT))
        self.devices = config.devices
        self.sampler = sampler or NvmlSampler(config.devices)
        self._published: tuple[Snapshot | None, Batch] = (None, ())
        self._worker = _Worker("nvml")
        self._inflight: concurrent.futures.Future[Snapshot] | None = None

    async def run(self) -> None:
        if self._inflight is not None and not self._inflight.done():
            raise RuntimeError("previous NVML sample is still running (a driver call hangs)")
        self._inflight = self._worker.submit(self.sampler.tick)
        await asyncio.wrap_future(self._inflight)

    def batch(self) -> Batch:
        snap = self.sampler.snapshot  # one read: a tick publishing meanwhile cannot mix two
        if snap is not self._published[0]:
            self._published = (snap, gpu_samples(snap))
        return self._published[1]

    def describe(self) -> str:
        which = "all GPUs" if self.devices is None else f"GPUs {self.devices}"
        return f"NVML, {which}"

    async def close(self) -> None:
        # Queued behind a running tick, so NVML is shut down on the thread that used it;
        # shielded so the scheduler's close timeout cannot cancel the queued shutdown.
        done = self._worker.submit(self.sampler.close)
        self._worker.stop()
        await asyncio.shield(asyncio.wrap_future(done))


class _Worker:
    """One daemon thread running submitted calls in order.

    Not asyncio.to_thread: its shared pool gives no single-thread guarantee, and a call the
    scheduler gave up on keeps running there while the next one starts on another thread.
    Not a ThreadPoolExecutor either: its threads are joined at exit, so an NVML call hung
    in the driver would keep the exporter from shutting down on SIGTERM.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def submit(self, fn: Callable[[], T]) -> concurrent.futures.Future[T]:
        # Started on first use: `check-config` builds checks it never runs.
        if self._thread.ident is None:
            self._thread.start()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._jobs.put((fn, future))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the awaiting coroutine, not lost
                future.set_exception(exc)


def build(config: Config) -> list[Check]:
    if config.gpu is None or not config.gpu.enabled:
        return []
    return [GpuCheck(config.gpu)]


REGISTRATION = Registration("gpu", build)
