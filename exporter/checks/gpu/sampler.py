"""Blocking NVML sampling for the GPU check: one NVML session, per-GPU reads, one snapshot.

Everything here blocks (NVML calls are ioctls; the PCIe counters hold the caller for a 20 ms
window) and runs on the GPU check's single worker thread, never on the event loop. A tick
ends by publishing an immutable ``Snapshot`` that the check's collector renders, so a value
NVML did not give is simply not in it: absent, never 0.

What each sort of NVML error takes down is set out in nvml.py; the recovery happens here:
marking a GPU down and attaching it again, re-initializing NVML with back-off.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml as N

from exporter import metrics
from exporter.checks.gpu.device import (
    Gpu,
    free_gpm,
    read_clock_events,
    read_ecc,
    read_gpm,
    read_nvlink,
    read_peak,
    read_values,
    top_processes,
)
from exporter.checks.gpu.nvml import GpuLost, Read, SessionLost, fatal, system
from exporter.checks.gpu.snapshot import GpuReading, ProcessReading, Snapshot

log = logging.getLogger("exporter.checks.gpu")

#: Bound on XID events drained per tick; the rest stay queued in NVML for the next tick.
MAX_EVENTS_PER_TICK = 256
#: NVML init retries back off from 1 s to this, so a host without a GPU costs ~nothing.
INIT_BACKOFF_MAX = 60.0
#: While a GPU is down, NVML is re-initialized after this long (doubling up to RESCAN_MAX),
#: since a GPU that was reset or re-attached may only appear in a fresh enumeration. Each
#: re-init costs the other GPUs one tick of GPM series, hence the back-off.
RESCAN_FIRST = 30.0
RESCAN_MAX = 600.0
PROCESS_NAME_MAX = 64


def _address(pointer: Any) -> int:
    """A handle's identity: the opaque pointer NVML gave out."""
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


@dataclass
class _Session:
    driver_version: str = ""
    cuda_version: str = ""
    count: int = -1
    gpus: dict[int, Gpu] = field(default_factory=dict)
    by_handle: dict[int, Gpu] = field(default_factory=dict)
    events: Any = None
    #: Calls this driver lacks (FunctionNotFound): skipped for every GPU until re-init.
    missing: set[Read] = field(default_factory=set)
    rescan_at: float | None = None


class NvmlSampler:
    """One NVML session, the state kept across ticks (GPM baselines, XID counts) and the last
    snapshot. The GPU check calls tick() from one worker thread; a lock serializes any other
    caller (the benchmark, tests) so two ticks never interleave NVML state."""

    def __init__(
        self,
        devices: Sequence[int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.devices = None if devices is None else sorted(set(devices))
        self._clock = clock
        # Guards against two ticks at once even if a caller forgets to serialize them.
        self._lock = threading.Lock()
        self._s: _Session | None = None
        self._next_init_at = 0.0
        self._init_failures = 0
        self._reported_down = False
        self._rescan_delay = RESCAN_FIRST
        self._closed = False
        # Across sessions, so a driver restart neither resets XID counts nor loses the labels
        # of a GPU that is down when NVML comes back.
        self._xid: dict[str, dict[int, int]] = {}
        self._labels: dict[int, tuple[str, str]] = {}
        self._process_names: dict[int, str] = {}
        #: The last published snapshot; None until the first tick.
        self.snapshot: Snapshot | None = None

    # --- public ----------------------------------------------------------------------------
    def tick(self) -> Snapshot:
        """Sample every GPU once, publish and return the snapshot. Blocks; never raises NVML."""
        with self._lock:
            if self._closed:
                raise RuntimeError("sampler is closed")
            now = self._clock()
            try:
                snap = self._tick(now)
            except SessionLost as exc:
                self._drop_session(str(exc), now)
                snap = Snapshot(nvml_up=False)
            self.snapshot = snap
            return snap

    def close(self) -> None:
        """Free NVML resources and shut the session down. Idempotent."""
        with self._lock:
            self._closed = True
            if self._s is not None:
                self._close_session()

    # --- session -------------------------------------------------------------------------
    def _tick(self, now: float) -> Snapshot:
        s = self._s
        if s is not None and s.rescan_at is not None and now >= s.rescan_at:
            log.info("re-initializing NVML to look for lost GPUs")
            self._rescan_delay = min(self._rescan_delay * 2, RESCAN_MAX)
            self._close_session()
            self._next_init_at = now
            s = None
        if s is None:
            if now < self._next_init_at:
                return Snapshot(nvml_up=False)
            s = self._open(now)
            if s is None:
                return Snapshot(nvml_up=False)
        return self._sample(s, now)

    def _open(self, now: float) -> _Session | None:
        try:
            N.nvmlInit()
        except N.NVMLError as exc:
            self._init_failed(str(exc), now)
            return None
        s = _Session()
        self._s = s
        try:
            s.driver_version = system(N.nvmlSystemGetDriverVersion) or ""
            cuda = system(N.nvmlSystemGetCudaDriverVersion)
            s.cuda_version = f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else ""
            s.events = system(N.nvmlEventSetCreate)
            self._discover(s, self._count())
        except SessionLost as exc:
            self._drop_session(str(exc), now)
            return None
        self._init_failures = 0
        if self._reported_down or self.snapshot is None:
            log.info(
                "NVML initialized",
                extra={"driver_version": s.driver_version, "gpus": len(s.gpus)},
            )
        self._reported_down = False
        return s

    def _init_failed(self, reason: str, now: float) -> None:
        self._init_failures += 1
        self._next_init_at = now + min(2.0 ** (self._init_failures - 1), INIT_BACKOFF_MAX)
        if not self._reported_down:
            # One line per outage: a host without a GPU must not log every second.
            log.warning(
                "NVML unavailable; GPU series are absent, other checks are unaffected",
                extra={"reason": reason},
            )
            self._reported_down = True

    def _drop_session(self, reason: str, now: float) -> None:
        if self._s is not None:
            self._close_session()
        self._init_failed(reason, now)
        # A driver restart should be picked up on the next tick, not after the back-off.
        self._next_init_at = now if self._init_failures == 1 else self._next_init_at

    def _close_session(self) -> None:
        s, self._s = self._s, None
        if s is None:
            return
        for gpu in s.gpus.values():
            free_gpm(gpu)
        # Errors are ignored: after a driver restart the old session has nothing left to free.
        if s.events is not None:
            with contextlib.suppress(N.NVMLError):
                N.nvmlEventSetFree(s.events)
        with contextlib.suppress(N.NVMLError):
            N.nvmlShutdown()

    def _count(self) -> int:
        try:
            return int(N.nvmlDeviceGetCount())
        except N.NVMLError as exc:
            # The count is every tick's liveness probe: if it fails, nothing else will work.
            raise SessionLost(str(exc)) from exc

    def _discover(self, s: _Session, count: int) -> None:
        s.count = count
        wanted = range(count) if self.devices is None else self.devices
        for index in wanted:
            if index >= count:
                if index not in s.gpus:
                    log.warning(
                        "configured GPU index not present",
                        extra={"gpu": index, "gpus_present": count},
                    )
                    s.gpus[index] = Gpu(index, *self._labels.get(index, ("", "")))
                continue
            if index not in s.gpus or not s.gpus[index].handle:
                s.gpus[index] = self._attach(s, index)

    def _attach(self, s: _Session, index: int) -> Gpu:
        uuid, name = self._labels.get(index, ("", ""))
        gpu = Gpu(index, uuid, name)
        try:
            handle = N.nvmlDeviceGetHandleByIndex(index)
            uuid = N.nvmlDeviceGetUUID(handle)
        except N.NVMLError as exc:
            fatal(exc)
            return gpu  # down until NVML gives a handle
        name = system(N.nvmlDeviceGetName, handle) or name
        gpu.uuid, gpu.name, gpu.handle, gpu.up = uuid, name, handle, True
        self._labels[index] = (uuid, name)
        s.by_handle[_address(handle)] = gpu
        if s.events is not None:
            try:
                N.nvmlDeviceRegisterEvents(handle, N.nvmlEventTypeXidCriticalError, s.events)
            except N.NVMLError as exc:
                fatal(exc)  # otherwise: no XID events from this GPU (NotSupported)
        return gpu

    # --- one tick ------------------------------------------------------------------------
    def _sample(self, s: _Session, now: float) -> Snapshot:
        count = self._count()
        if count != s.count:
            self._discover(s, count)
        self._poll_events(s)
        readings = []
        seen_pids: set[int] = set()
        for index in sorted(s.gpus):
            gpu = s.gpus[index]
            if not gpu.up and index < count:
                gpu = self._reattach(s, gpu)
            if gpu.up:
                try:
                    readings.append(self._sample_gpu(s, gpu, seen_pids))
                    continue
                except GpuLost as exc:
                    self._mark_down(gpu, str(exc))
            readings.append(
                GpuReading(gpu.index, gpu.uuid, gpu.name, up=False, xid=self._xid_of(gpu))
            )
        for pid in self._process_names.keys() - seen_pids:
            del self._process_names[pid]
        if all(g.up for g in s.gpus.values() if g.index < count):
            s.rescan_at = None
            self._rescan_delay = RESCAN_FIRST
        elif s.rescan_at is None:
            s.rescan_at = now + self._rescan_delay
        return Snapshot(True, s.driver_version, s.cuda_version, tuple(readings))

    def _reattach(self, s: _Session, old: Gpu) -> Gpu:
        gpu = self._attach(s, old.index)
        if gpu.up:
            s.gpus[old.index] = gpu
            log.info("GPU is back", extra={"gpu": gpu.index, "uuid": gpu.uuid})
            return gpu
        return old

    def _mark_down(self, gpu: Gpu, reason: str) -> None:
        log.warning(
            "GPU lost; its series are marked down",
            extra={"gpu": gpu.index, "uuid": gpu.uuid, "reason": reason},
        )
        free_gpm(gpu)
        gpu.up = False

    def _sample_gpu(self, s: _Session, gpu: Gpu, seen_pids: set[int]) -> GpuReading:
        values = read_values(gpu, s.missing)
        clock_events = read_clock_events(gpu, s.missing)
        ecc = read_ecc(gpu, s.missing)
        nvlink = read_nvlink(gpu, s.missing)
        values.update(read_gpm(gpu, s.missing, self._clock))
        if not gpu.peak_done:
            gpu.peak = read_peak(gpu, s.missing)
            gpu.peak_done = True
        bandwidth = None
        dram = values.get(metrics.GPU_DRAM_BANDWIDTH_UTILIZATION)
        if dram is not None and gpu.peak is not None:
            bandwidth = dram * gpu.peak[0]
        return GpuReading(
            gpu.index,
            gpu.uuid,
            gpu.name,
            up=True,
            values=values,
            clock_events=clock_events,
            ecc=ecc,
            nvlink=nvlink,
            xid=self._xid_of(gpu),
            peak=gpu.peak,
            bandwidth=bandwidth,
            processes=self._processes(s, gpu, seen_pids),
        )

    # --- events and processes ------------------------------------------------------------
    def _poll_events(self, s: _Session) -> None:
        if s.events is None:
            return
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                # Zero timeout: drain what is queued, never wait on the worker thread.
                data = N.nvmlEventSetWait_v2(s.events, 0)
            except N.NVMLError as exc:
                fatal(exc)
                if exc.value == N.NVML_ERROR_FUNCTION_NOT_FOUND:
                    system(N.nvmlEventSetFree, s.events)
                    s.events = None
                return  # Timeout: the queue is empty
            if not data.eventType & N.nvmlEventTypeXidCriticalError:
                continue
            gpu = s.by_handle.get(_address(data.device))
            if gpu is None:
                continue
            counts = self._xid.setdefault(gpu.uuid, {})
            counts[data.eventData] = counts.get(data.eventData, 0) + 1

    def _xid_of(self, gpu: Gpu) -> Mapping[int, int]:
        counts = self._xid.get(gpu.uuid)
        return dict(counts) if counts else {}

    def _processes(self, s: _Session, gpu: Gpu, seen_pids: set[int]) -> tuple[ProcessReading, ...]:
        top = top_processes(gpu, s.missing)
        seen_pids.update(pid for pid, _ in top)
        return tuple(ProcessReading(pid, self._process_name(pid), b) for pid, b in top)

    def _process_name(self, pid: int) -> str:
        name = self._process_names.get(pid)
        if name is None:
            full = system(N.nvmlSystemGetProcessName, pid) or ""
            name = self._process_names[pid] = os.path.basename(full)[:PROCESS_NAME_MAX]
        return name
