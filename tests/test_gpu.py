"""GPU check against a scripted NVML library: the real nvidia-ml-py wrappers run, only the
driver below them is fake (tests/support/fake_nvml.py). No GPU needed."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pynvml
import pytest

from exporter import __version__, metrics
from exporter import checks as checks_pkg
from exporter.checks import Check
from exporter.checks.batch import Batch
from exporter.checks.gpu import check as gpu_check
from exporter.checks.gpu.bandwidth import formula_peak_bandwidth, spec_peak_bandwidth
from exporter.checks.gpu.check import GpuCheck, gpu_samples
from exporter.checks.gpu.sampler import MAX_EVENTS_PER_TICK, RESCAN_FIRST, NvmlSampler
from exporter.config.load import parse_config
from exporter.runtime.app import App
from exporter.runtime.exposition import Store
from tests.support import ROOT
from tests.support.fake_nvml import (
    OLD_DRIVER_MISSING,
    PROCESS_NAMES,
    FakeGpu,
    FakeNvml,
    GiB,
    eight_mixed,
    h200,
)
from tests.support.procs import free_port, wait_until
from tests.support.samples import find, parse, value

GPU_FAMILIES = [f for f in metrics.SCHEMA.values() if f.section == "gpu"]
PER_GPU = {f.name for f in GPU_FAMILIES if "gpu" in f.labels}
#: Only on GPUs with NVLink (the fake's H200 and A100 have it).
NVLINK_ONLY = {metrics.GPU_NVLINK_UP.name, metrics.GPU_NVLINK_ERRORS.name}
GPM_ONLY = {
    metrics.GPU_DRAM_BANDWIDTH_UTILIZATION.name,
    metrics.GPU_SM_ACTIVE.name,
    metrics.GPU_SM_OCCUPANCY.name,
    metrics.GPU_TENSOR_ACTIVE.name,
    metrics.GPU_MEMORY_BANDWIDTH.name,
}
CLOCK_REASONS = {
    "gpu_idle",
    "clocks_setting",
    "power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "hw_power_brake",
    "display_clocks",
}


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Scrape:
    """The samples of the sampler's snapshot as /metrics renders them, parsed back: what
    Prometheus would see."""

    def __init__(self, sampler: NvmlSampler) -> None:
        store = Store()
        store.publish("gpu/nvml", gpu_samples(sampler.snapshot))
        self.text = store.text(False).decode()
        self.parsed = parse(self.text)
        self.samples = [(n, dict(lab), v) for (n, lab), v in self.parsed.items()]

    def find(self, family: str, /, **labels: str) -> list[tuple[dict[str, str], float]]:
        return find(self.parsed, family, **labels)

    def get(self, family: str, /, **labels: str) -> float | None:
        return value(self.parsed, family, **labels)

    def names(self, gpu: int) -> set[str]:
        return {n for n, lab, _ in self.samples if lab.get("gpu") == str(gpu)}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def install() -> Iterator[Callable[[FakeNvml | None], None]]:
    """Put a fake library where nvidia-ml-py loads it; restore pynvml's globals after."""
    saved = (pynvml.nvmlLib, dict(pynvml._nvmlGetFunctionPointer_cache), pynvml._nvmlLib_refcount)

    def _install(fake: FakeNvml | None) -> None:
        pynvml.nvmlLib = fake
        pynvml._nvmlGetFunctionPointer_cache.clear()

    yield _install
    pynvml.nvmlLib = saved[0]
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml._nvmlGetFunctionPointer_cache.update(saved[1])
    pynvml._nvmlLib_refcount = saved[2]


#: The make fixture: (gpus, devices, missing) -> a fake library installed, a sampler on it.
MakeSampler = Callable[..., tuple[FakeNvml, NvmlSampler]]


@pytest.fixture
def make(
    install: Callable[[FakeNvml | None], None], clock: FakeClock
) -> Iterator[MakeSampler]:
    samplers: list[NvmlSampler] = []

    def _make(
        gpus: list[FakeGpu] | None = None,
        devices: list[int] | None = None,
        missing: frozenset[str] = frozenset(),
    ) -> tuple[FakeNvml, NvmlSampler]:
        fake = FakeNvml(eight_mixed() if gpus is None else gpus, missing=missing, clock=clock)
        fake.process_names.update(PROCESS_NAMES)
        install(fake)
        sampler = NvmlSampler(devices, clock=clock)
        samplers.append(sampler)
        return fake, sampler

    yield _make
    for sampler in samplers:
        sampler.close()


@pytest.fixture
def no_library(
    monkeypatch: pytest.MonkeyPatch, install: Callable[[FakeNvml | None], None]
) -> list[str]:
    """libnvidia-ml.so.1 cannot be loaded (no driver), here or on a machine that has one."""
    attempts: list[str] = []

    def cdll(name: str, *args: Any, **kwargs: Any) -> Any:
        attempts.append(name)
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    install(None)
    monkeypatch.setattr(pynvml, "CDLL", cdll)
    return attempts


def two_ticks(sampler: NvmlSampler, clock: FakeClock) -> Scrape:
    """GPM needs a baseline sample and a second one >= 100 ms later: one check interval."""
    sampler.tick()
    clock.advance(1.0)
    sampler.tick()
    return Scrape(sampler)


# --- values and units --------------------------------------------------------------------


def test_h200_has_every_series_with_values_converted(
    make: MakeSampler, clock: FakeClock
) -> None:
    fake, sampler = make()
    fake.xid(0, 79)
    s = two_ticks(sampler, clock)
    g = {"gpu": "0", "uuid": "GPU-h200-0000", "name": "NVIDIA H200"}

    assert s.names(0) == PER_GPU, PER_GPU ^ s.names(0)
    assert s.get("llm_gpu_nvml_up") == 1
    assert s.get("llm_gpu_info", driver_version="550.54.15", cuda_version="12.4") == 1
    assert s.get("llm_gpu_up", **g) == 1
    assert s.get("llm_gpu_utilization_ratio", **g) == pytest.approx(0.87)
    assert s.get("llm_gpu_memory_controller_busy_ratio", **g) == pytest.approx(0.42)
    assert s.get("llm_gpu_memory_used_bytes", **g) == 128 * GiB
    assert s.get("llm_gpu_memory_total_bytes", **g) == 150_754_820_096
    assert s.get("llm_gpu_memory_reserved_bytes", **g) == 567_279_616
    assert s.get("llm_gpu_power_watts", **g) == pytest.approx(512.345)  # mW -> W
    assert s.get("llm_gpu_power_limit_watts", **g) == pytest.approx(700.0)
    assert s.get("llm_gpu_energy_joules_total", **g) == pytest.approx(987_654.321)  # mJ -> J
    assert s.get("llm_gpu_temperature_celsius", **g) == 61
    assert s.get("llm_gpu_sm_clock_hertz", **g) == 1980e6  # MHz -> Hz
    assert s.get("llm_gpu_memory_clock_hertz", **g) == 3201e6
    assert s.get("llm_gpu_pcie_rx_bytes_per_second", **g) == 1_234_567 * 1024  # KB/s -> B/s
    assert s.get("llm_gpu_pcie_tx_bytes_per_second", **g) == 234_567 * 1024
    events = {lab["reason"]: v for lab, v in s.find("llm_gpu_clock_event_active", **g)}
    assert events == {r: float(r == "power_cap") for r in CLOCK_REASONS}
    assert s.get("llm_gpu_xid_errors_total", xid="79", **g) == 1
    assert s.get("llm_gpu_ecc_errors_total", type="corrected", **g) == 3
    assert s.get("llm_gpu_ecc_errors_total", type="uncorrected", **g) == 0
    assert s.get("llm_gpu_dram_bandwidth_utilization_ratio", **g) == pytest.approx(0.635)
    assert s.get("llm_gpu_sm_active_ratio", **g) == pytest.approx(0.9125)
    assert s.get("llm_gpu_sm_occupancy_ratio", **g) == pytest.approx(0.375)
    assert s.get("llm_gpu_tensor_active_ratio", **g) == pytest.approx(0.55)
    assert (
        s.get("llm_gpu_memory_bandwidth_peak_bytes_per_second", peak_source="spec", **g) == 4.8e12
    )
    assert s.get(
        "llm_gpu_memory_bandwidth_bytes_per_second", peak_source="spec", **g
    ) == pytest.approx(0.635 * 4.8e12)
    procs = {
        (lab["pid"], lab["process"]): v for lab, v in s.find("llm_gpu_process_memory_bytes", **g)
    }
    assert procs == {("4242", "python3"): 120 * GiB, ("4343", "tritonserver"): 6 * GiB}


def test_eight_mixed_gpus_values_match_the_fake(make: MakeSampler, clock: FakeClock) -> None:
    fake, sampler = make()
    s = two_ticks(sampler, clock)
    assert len(s.find("llm_gpu_up")) == 8
    for i, f in enumerate(fake.gpus):
        g = {"gpu": str(i), "uuid": f.uuid, "name": f.name}
        assert s.get("llm_gpu_up", **g) == 1
        assert s.get("llm_gpu_utilization_ratio", **g) == pytest.approx(f.util_gpu / 100)
        assert s.get("llm_gpu_memory_controller_busy_ratio", **g) == pytest.approx(
            f.util_memory / 100
        )
        assert s.get("llm_gpu_memory_used_bytes", **g) == f.memory_used
        assert s.get("llm_gpu_memory_reserved_bytes", **g) == f.memory_reserved
        assert s.get("llm_gpu_power_watts", **g) == pytest.approx(f.power_mw / 1000)
        assert s.get("llm_gpu_power_limit_watts", **g) == pytest.approx(f.power_limit_mw / 1000)
        assert s.get("llm_gpu_energy_joules_total", **g) == pytest.approx(f.energy_mj / 1000)
        assert s.get("llm_gpu_temperature_celsius", **g) == f.temperature_c
        assert s.get("llm_gpu_memory_clock_hertz", **g) == f.memory_clock_mhz * 1e6
        assert s.get("llm_gpu_pcie_tx_bytes_per_second", **g) == f.pcie_tx_kbs * 1024
        # Every series on every generation, but for what this GPU lacks (absent, never 0)
        # and XID counts, which appear with a first event.
        expected = PER_GPU - {"llm_gpu_xid_errors_total"}
        if f.gpm is None:
            expected -= GPM_ONLY
        else:
            dram = f.gpm[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL] / 100
            assert s.get("llm_gpu_dram_bandwidth_utilization_ratio", **g) == pytest.approx(dram)
        if f.ecc_corrected is None:
            expected -= {"llm_gpu_ecc_errors_total"}
        if not f.processes:
            expected -= {"llm_gpu_process_memory_bytes"}
        if f.nvlink is None:
            expected -= NVLINK_ONLY
        assert s.names(i) == expected, (f.name, expected ^ s.names(i))

    def peak(i: int) -> tuple[str, Any]:
        ((lab, v),) = s.find("llm_gpu_memory_bandwidth_peak_bytes_per_second", gpu=str(i))
        return lab["peak_source"], pytest.approx(v)

    assert peak(0) == ("spec", 4.8e12)  # H200
    assert peak(1) == ("spec", 3.35e12)  # H100 SXM
    assert peak(2) == ("spec", 2.039e12)  # A100 80GB
    assert peak(3) == ("spec", 0.864e12)  # L40S
    assert peak(4) == ("spec", 1.008e12)  # RTX 4090
    assert peak(5) == ("clock_x_bus_width", 877e6 * 2 * 4096 / 8)  # V100: not in the table
    assert peak(7) == ("clock_x_bus_width", 2619e6 * 2 * 6144 / 8)  # GH200: not in the table
    ((labels, bandwidth),) = s.find("llm_gpu_memory_bandwidth_bytes_per_second", gpu="7")
    assert labels["peak_source"] == "clock_x_bus_width"
    assert bandwidth == pytest.approx(0.80 * 2619e6 * 2 * 6144 / 8)


def test_a_narrow_pcie_link_and_a_down_nvlink_show(make: MakeSampler, clock: FakeClock) -> None:
    fake, sampler = make()
    h200 = fake.gpus[0]
    h200.pcie_width, h200.pcie_replays = 8, 41  # a x16 card trained at x8
    assert h200.nvlink is not None
    h200.nvlink[5] = False
    s = two_ticks(sampler, clock)
    assert s.get("llm_gpu_pcie_link_width", gpu="0") == 8
    assert s.get("llm_gpu_pcie_link_width_max", gpu="0") == 16
    assert s.get("llm_gpu_pcie_replays_total", gpu="0") == 41
    assert s.get("llm_gpu_pcie_link_generation", gpu="2") == 4
    links = {lab["link"]: v for lab, v in s.find("llm_gpu_nvlink_up", gpu="0")}
    assert len(links) == 18 and links["5"] == 0 and links["4"] == 1
    assert s.get("llm_gpu_nvlink_errors_total", gpu="0", link="3", kind="replay") == 12
    assert s.get("llm_gpu_nvlink_errors_total", gpu="0", link="5", kind="replay") is None
    # Without NVLink, link 0 answers NotSupported once and is not asked again.
    assert not s.find("llm_gpu_nvlink_up", gpu="3")
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 2 * (18 + 1) + 2 * (12 + 1) + 6


def test_a100_has_everything_but_gpm(make: MakeSampler, clock: FakeClock) -> None:
    fake, sampler = make()
    fake.xid(2, 48)
    s = two_ticks(sampler, clock)
    assert s.names(2) == PER_GPU - GPM_ONLY
    assert fake.calls["nvmlGpmSampleGet"] == 2 * 3  # two ticks, three Hopper GPUs only


# --- GPM -----------------------------------------------------------------------------------


def test_gpm_two_samples_at_least_100ms_apart(make: MakeSampler, clock: FakeClock) -> None:
    fake, sampler = make()
    sampler.tick()
    assert not Scrape(sampler).names(0) & GPM_ONLY  # one sample is no window yet
    assert fake.calls["nvmlGpmMetricsGet"] == 0
    clock.advance(0.05)
    sampler.tick()
    assert not Scrape(sampler).names(0) & GPM_ONLY
    assert fake.calls["nvmlGpmSampleGet"] == 3  # too soon: no new sample taken
    clock.advance(0.95)
    sampler.tick()
    assert Scrape(sampler).get("llm_gpu_sm_occupancy_ratio", gpu="0") == pytest.approx(0.375)
    # The fake answers with its current values: a change shows in the next window.
    gpm = fake.gpus[0].gpm
    assert gpm is not None  # GPU 0 is the H200, a Hopper
    gpm[pynvml.NVML_GPM_METRIC_SM_OCCUPANCY] = 12.5
    clock.advance(0.03)
    sampler.tick()  # closer than 100 ms to the last sample: the last window stands
    assert Scrape(sampler).get("llm_gpu_sm_occupancy_ratio", gpu="0") == pytest.approx(0.375)
    for _ in range(3):
        clock.advance(1.0)
        sampler.tick()
    assert Scrape(sampler).get("llm_gpu_sm_occupancy_ratio", gpu="0") == pytest.approx(0.125)
    assert fake.gpm_short_windows == []
    # Each window starts where the previous one ended: no gap, no overlap, per GPU.
    for gpu in (0, 1, 7):
        pairs = [(a, b) for g, a, b in fake.gpm_pairs if g == gpu]
        assert len(pairs) == 4
        assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(pairs))
    assert len(fake.gpm_samples) == 6  # two per Hopper GPU, reused every tick


# --- degrading per metric ------------------------------------------------------------------


def test_not_supported_drops_only_that_series(make: MakeSampler, clock: FakeClock) -> None:
    fake, sampler = make()
    fake.gpus[1].not_supported |= {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperatureV"}
    s = two_ticks(sampler, clock)
    assert s.get("llm_gpu_power_watts", gpu="1") is None  # absent, never 0
    assert s.get("llm_gpu_temperature_celsius", gpu="1") is None
    assert s.names(1) == PER_GPU - NVLINK_ONLY - {
        "llm_gpu_power_watts",
        "llm_gpu_temperature_celsius",
        "llm_gpu_xid_errors_total",
    }
    assert all(s.get("llm_gpu_power_watts", gpu=str(i)) is not None for i in (0, *range(2, 8)))
    # NotSupported is a property of the GPU: not asked again on the next tick.
    before = fake.calls["nvmlDeviceGetPowerUsage"]
    clock.advance(1.0)
    sampler.tick()
    assert fake.calls["nvmlDeviceGetPowerUsage"] - before == 7
    # ... and not answered by the legacy call either: the GPU lacks it, not the driver.
    assert fake.calls["nvmlDeviceGetTemperature"] == 0


def test_old_driver_missing_symbols_fall_back_or_go_absent(
    make: MakeSampler, clock: FakeClock
) -> None:
    fake, sampler = make(missing=OLD_DRIVER_MISSING | {"nvmlDeviceGetTotalEnergyConsumption"})
    s = two_ticks(sampler, clock)
    h = fake.gpus[0]
    # memory v1: no reserved field, and the driver counts reserved memory as used
    assert s.get("llm_gpu_memory_used_bytes", gpu="0") == h.memory_used + h.memory_reserved
    assert s.get("llm_gpu_memory_total_bytes", gpu="0") == h.memory_total
    assert s.get("llm_gpu_memory_reserved_bytes", gpu="0") is None
    assert s.get("llm_gpu_temperature_celsius", gpu="0") == 61  # nvmlDeviceGetTemperature
    assert s.get("llm_gpu_clock_event_active", gpu="0", reason="power_cap") == 1  # ThrottleReasons
    assert s.get("llm_gpu_process_memory_bytes", gpu="0", pid="4242") == 120 * GiB  # processes v2
    for i in range(8):
        assert not s.names(i) & GPM_ONLY  # no GPM in this driver, even on Hopper
        assert s.get("llm_gpu_energy_joules_total", gpu=str(i)) is None
        assert s.get("llm_gpu_power_watts", gpu=str(i)) is not None
    # The fallbacks were used on every GPU, every tick; the missing symbols cost nothing more.
    assert fake.calls["nvmlDeviceGetTemperature"] == 16
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 16
    # A sizing call, then a filling one where there are processes.
    per_tick = sum(2 if g.processes else 1 for g in fake.gpus)
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 2 * per_tick


def test_process_memory_capped_at_16_per_gpu(make: MakeSampler, clock: FakeClock) -> None:
    gpu = h200()
    gpu.processes = [(1000 + n, n * GiB) for n in range(1, 21)]
    gpu.processes += [(1020, 5 * GiB), (2000, None)]  # a second MIG slice of 1020; no data
    fake, sampler = make([gpu])
    fake.process_names = {1020: "/usr/bin/python3", 1019: "vllm"}
    sampler.tick()
    found = {
        lab["pid"]: (lab["process"], v)
        for lab, v in Scrape(sampler).find("llm_gpu_process_memory_bytes")
    }
    assert len(found) == 16
    assert found["1020"] == ("python3", 25 * GiB)  # summed over its slices
    assert found["1019"] == ("vllm", 19 * GiB)
    assert found["1005"] == ("", 5 * GiB)  # name not visible (another PID namespace)
    assert "1004" not in found and "2000" not in found


def test_devices_filter(
    make: MakeSampler, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fake, sampler = make(devices=[5, 0, 9])
    with caplog.at_level(logging.WARNING, "exporter.checks.gpu"):
        s = two_ticks(sampler, clock)
    assert {lab["gpu"] for lab, _ in s.find("llm_gpu_power_watts")} == {"0", "5"}
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 4  # two GPUs, two ticks: others untouched
    assert s.get("llm_gpu_up", gpu="9") == 0  # configured but not present
    assert [r.getMessage() for r in caplog.records] == ["configured GPU index not present"]


# --- GPUs lost and regained, driver restarts, no library ---------------------------------


def test_gpu_lost_and_regained(
    make: MakeSampler, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fake, sampler = make()
    two_ticks(sampler, clock)
    fake.xid(3, 79)  # "fallen off the bus", delivered as the GPU goes
    fake.lose(3)
    clock.advance(1.0)
    with caplog.at_level(logging.INFO, "exporter.checks.gpu"):
        caplog.clear()
        sampler.tick()
        s = Scrape(sampler)
        assert s.get("llm_gpu_up", gpu="3", uuid="GPU-l40s-0003", name="NVIDIA L40S") == 0
        assert s.names(3) == {"llm_gpu_up", "llm_gpu_xid_errors_total"}  # data absent, XID kept
        assert s.get("llm_gpu_xid_errors_total", gpu="3", xid="79") == 1
        for i in (0, 1, 2, 4, 5, 6, 7):
            assert s.get("llm_gpu_up", gpu=str(i)) == 1
            assert s.get("llm_gpu_power_watts", gpu=str(i)) == pytest.approx(
                fake.gpus[i].power_mw / 1000
            )
        assert s.get("llm_gpu_dram_bandwidth_utilization_ratio", gpu="0") is not None
        clock.advance(1.0)
        sampler.tick()
        assert Scrape(sampler).get("llm_gpu_up", gpu="3") == 0
        fake.regain(3)
        clock.advance(1.0)
        sampler.tick()
    s = Scrape(sampler)
    assert s.get("llm_gpu_up", gpu="3") == 1
    assert s.get("llm_gpu_power_watts", gpu="3") == pytest.approx(300.5)
    assert s.get("llm_gpu_xid_errors_total", gpu="3", xid="79") == 1
    assert fake.inits == 1  # found again by its handle, without re-initializing NVML
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["GPU lost; its series are marked down", "GPU is back"]


def test_lost_gpu_that_needs_a_fresh_enumeration(
    make: MakeSampler, clock: FakeClock
) -> None:
    fake, sampler = make()
    two_ticks(sampler, clock)
    fake.lose(1)  # an H100, with GPM
    clock.advance(1.0)
    sampler.tick()
    fake.regain(1, needs_init=True)  # reset: only a new nvmlInit enumerates it again
    for _ in range(int(RESCAN_FIRST) - 2):
        clock.advance(1.0)
        sampler.tick()
        s = Scrape(sampler)
        assert s.get("llm_gpu_up", gpu="1") == 0
        assert len(s.find("llm_gpu_power_watts")) == 7  # the others carry on
    assert fake.inits == 1
    clock.advance(2.0)
    sampler.tick()
    s = Scrape(sampler)
    assert fake.inits == 2 and fake.refcount == 1  # the old session was shut down
    assert s.get("llm_gpu_up", gpu="1") == 1
    assert len(s.find("llm_gpu_power_watts")) == 8
    clock.advance(1.0)
    sampler.tick()
    assert Scrape(sampler).get("llm_gpu_tensor_active_ratio", gpu="1") == pytest.approx(0.705)


def test_xid_events_polled_without_waiting(make: MakeSampler, clock: FakeClock) -> None:
    fake, sampler = make()
    for gpu, code in ((0, 79), (0, 79), (5, 13), (6, 999)):
        fake.xid(gpu, code)
    sampler.tick()
    s = Scrape(sampler)
    assert s.get("llm_gpu_xid_errors_total", gpu="0", xid="79") == 2
    assert s.get("llm_gpu_xid_errors_total", gpu="5", xid="13") == 1
    assert s.get("llm_gpu_xid_errors_total", gpu="6", xid="999") == 1
    assert len(s.find("llm_gpu_xid_errors_total")) == 3
    for _ in range(300):
        fake.xid(4, 31)
    clock.advance(1.0)
    sampler.tick()
    assert Scrape(sampler).get("llm_gpu_xid_errors_total", gpu="4", xid="31") == MAX_EVENTS_PER_TICK
    clock.advance(1.0)
    sampler.tick()  # the rest stayed queued in NVML
    assert Scrape(sampler).get("llm_gpu_xid_errors_total", gpu="4", xid="31") == 300
    assert set(fake.wait_timeouts) == {0}


def test_driver_restart_reinitializes_nvml(
    make: MakeSampler, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    fake, sampler = make()
    fake.xid(2, 94)
    two_ticks(sampler, clock)
    with caplog.at_level(logging.INFO, "exporter.checks.gpu"):
        caplog.clear()
        fake.unload_driver()
        for _ in range(5):
            clock.advance(1.0)
            sampler.tick()
            s = Scrape(sampler)
            assert [n for n, _, _ in s.samples] == ["llm_gpu_nvml_up"]
            assert s.get("llm_gpu_nvml_up") == 0
        fake.load_driver()  # a new driver: the old session and its handles are void
        clock.advance(60.0)
        sampler.tick()
    s = Scrape(sampler)
    assert s.get("llm_gpu_nvml_up") == 1
    assert len(s.find("llm_gpu_power_watts")) == 8
    assert s.get("llm_gpu_xid_errors_total", gpu="2", xid="94") == 1  # counts survive
    assert fake.refcount == 1
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "NVML unavailable; GPU series are absent, other checks are unaffected",
        "NVML initialized",
    ]


def test_library_not_found(
    no_library: list[str],
    install: Callable[[FakeNvml | None], None],
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sampler = NvmlSampler(clock=clock)
    with caplog.at_level(logging.INFO, "exporter.checks.gpu"):
        for _ in range(10):
            sampler.tick()
            s = Scrape(sampler)
            assert [(n, v) for n, _, v in s.samples] == [("llm_gpu_nvml_up", 0.0)]
            clock.advance(1.0)
    assert len(caplog.records) == 1 and "NVML unavailable" in caplog.records[0].getMessage()
    assert "Not Found" in caplog.records[0].__dict__["reason"]
    assert 2 <= len(no_library) < 10  # retried, with back-off
    assert set(no_library) == {"libnvidia-ml.so.1"}
    # A driver installed later is picked up without a restart.
    fake = FakeNvml(eight_mixed())
    install(fake)
    clock.advance(60.0)
    sampler.tick()
    assert Scrape(sampler).get("llm_gpu_nvml_up") == 1
    sampler.close()
    assert fake.refcount == 0


def test_close_releases_every_nvml_resource(make: MakeSampler, clock: FakeClock) -> None:
    fake, sampler = make()
    two_ticks(sampler, clock)
    assert fake.refcount == 1 and len(fake.gpm_samples) == 6 and len(fake.event_sets) == 1
    sampler.close()
    assert fake.refcount == 0 and fake.gpm_samples == {} and fake.event_sets == {}
    with pytest.raises(RuntimeError):
        sampler.tick()


# --- the check: worker thread, one sampler at a time, the App ------------------------------


async def test_check_never_runs_two_samplers_at_once(make: MakeSampler) -> None:
    fake, sampler = make()
    check = GpuCheck(parse_config("gpu: {}").gpu, sampler)  # type: ignore[arg-type]
    await check.run()
    fake.block = threading.Event()  # the driver hangs
    task = asyncio.create_task(check.run())
    await asyncio.sleep(0.1)
    assert not task.done()
    task.cancel()  # what the scheduler's timeout does
    await asyncio.gather(task, return_exceptions=True)
    with pytest.raises(RuntimeError, match="still running"):
        await check.run()
    fake.block.set()
    inflight = check._inflight
    assert inflight is not None
    await asyncio.to_thread(wait_until, inflight.done, 5.0, "the hung tick to finish")
    await check.run()
    assert fake.max_active == 1
    await check.close()
    assert fake.refcount == 0
    assert len(fake.threads) == 1 and threading.get_ident() not in fake.threads


def test_factory() -> None:
    assert gpu_check.build(parse_config("")) == []
    assert gpu_check.build(parse_config("gpu: {enabled: false}")) == []
    config = parse_config("gpu: {interval: 2s, devices: [1, 0]}")
    (check,) = gpu_check.build(config)
    assert check.name == "gpu/nvml" and check.interval == 2.0 and check.timeout >= 2.0
    assert check.describe() == "NVML, GPUs [1, 0]"


class Counting(Check):
    kind = "test"

    def __init__(self) -> None:
        super().__init__("other", 0.05, 1.0)
        self.runs = 0

    async def run(self) -> None:
        self.runs += 1

    def batch(self) -> Batch:
        return ()  # owns no series


@pytest.fixture
def other_check() -> Iterator[Counting]:
    check = Counting()
    checks_pkg.FACTORIES["test"] = lambda _cfg: [check]
    yield check
    checks_pkg.FACTORIES.pop("test", None)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def scrape_app(http: aiohttp.ClientSession, port: int) -> str:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def test_app_without_nvml_serves_and_runs_other_checks(
    no_library: list[str], other_check: Counting, http: aiohttp.ClientSession
) -> None:
    port = free_port()
    app = App(
        parse_config(f"server: {{listen_address: '127.0.0.1:{port}'}}\ngpu: {{interval: 100ms}}\n"),
        "test.yaml",
    )
    await app.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            text = await scrape_app(http, port)
            gpu_runs = value(
                text, "llm_exporter_check_runs_total", check="gpu/nvml", outcome="success"
            )
            other_runs = value(
                text, "llm_exporter_check_runs_total", check="test/other", outcome="success"
            )
            if (gpu_runs or 0) >= 5 and (other_runs or 0) >= 10:
                break
            await asyncio.sleep(0.05)
        assert value(text, "llm_gpu_nvml_up") == 0
        assert not [
            line
            for line in text.splitlines()
            if line.startswith("llm_gpu_") and "nvml_up" not in line
        ]
        assert value(text, "llm_exporter_check_runs_total", check="gpu/nvml", outcome="error") == 0
        assert (
            value(text, "llm_exporter_check_runs_total", check="test/other", outcome="success") or 0
        ) >= 10
        assert value(text, "llm_exporter_build_info", version=__version__) == 1
        assert other_check.runs >= 10
    finally:
        await app.shutdown()


async def test_app_serves_fake_gpus_from_one_worker_thread(
    install: Callable[[FakeNvml | None], None], http: aiohttp.ClientSession
) -> None:
    fake = FakeNvml(eight_mixed(), clock=time.monotonic)
    install(fake)
    port = free_port()
    app = App(
        parse_config(f"server: {{listen_address: '127.0.0.1:{port}'}}\ngpu: {{interval: 150ms}}\n"),
        "test.yaml",
    )
    await app.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            text = await scrape_app(http, port)
            if value(text, "llm_gpu_dram_bandwidth_utilization_ratio", gpu="0") is not None:
                break
            await asyncio.sleep(0.05)
        assert value(text, "llm_gpu_dram_bandwidth_utilization_ratio", gpu="0") == pytest.approx(
            0.635
        )
        assert len([ln for ln in text.splitlines() if ln.startswith("llm_gpu_power_watts{")]) == 8
        assert fake.gpm_short_windows == []
    finally:
        await app.shutdown()
    assert fake.refcount == 0
    # Sampling never ran on the event loop, and always on the same single thread.
    assert len(fake.threads) == 1 and threading.get_ident() not in fake.threads
    assert fake.max_active == 1


# --- peaks and docs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "tbps"),
    [
        ("NVIDIA H200", 4.8),
        ("NVIDIA H200 NVL", 4.8),
        ("NVIDIA H100 80GB HBM3", 3.35),
        ("NVIDIA H100 PCIe", 2.0),
        ("NVIDIA H100 NVL", 3.9),
        ("NVIDIA H20", 4.0),
        ("NVIDIA A100-SXM4-80GB", 2.039),
        ("NVIDIA A100 80GB PCIe", 1.935),
        ("NVIDIA A100-PCIE-40GB", 1.555),
        ("NVIDIA A10", 0.6),
        ("NVIDIA L40S", 0.864),
        ("NVIDIA L4", 0.3),
        ("NVIDIA GeForce RTX 4090", 1.008),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA GeForce RTX 3090", None),
    ],
)
def test_peak_bandwidth_table(name: str, tbps: float | None) -> None:
    assert spec_peak_bandwidth(name) == (None if tbps is None else pytest.approx(tbps * 1e12))


def test_peak_formula_matches_datasheets_where_known() -> None:
    # Max memory clocks seen in real captures: H100 SXM 2619 MHz x 5120 bit, L40S 9001 x 384.
    assert formula_peak_bandwidth(2619, 5120) == pytest.approx(3.35e12, rel=0.005)
    assert formula_peak_bandwidth(9001, 384) == pytest.approx(0.864e12, rel=0.001)


def test_docs_describe_every_gpu_family() -> None:
    gpu_doc = (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")
    metrics_doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    section = metrics_doc.partition("## GPU metrics")[2]
    for family in GPU_FAMILIES:
        assert f"`{family.name}`" in gpu_doc, family.name
        assert f"`{family.name}`" in section, family.name
    # The configuration example is copy-pasteable as it stands.
    example = gpu_doc.partition("```yaml\n")[2].partition("```")[0]
    gpu = parse_config(example).gpu
    assert gpu is not None and gpu.enabled and gpu.interval == 1.0 and gpu.devices == [0, 1]
