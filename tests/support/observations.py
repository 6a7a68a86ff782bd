"""Builders of synthetic diagnosis ``Observations``: a healthy fleet at moderate values, and
``replace`` to inject one fault. Shared by tests/test_diagnosis_chain.py and
benchmarks/diagnosis_eval.py."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from exporter.diagnosis.host_window import HostWindow
from exporter.diagnosis.observations import (
    EngineWindow,
    GpuWindow,
    Observations,
    PathWindow,
    ProbeWindow,
)

AT = dt.datetime(2026, 12, 1, 21, 30, tzinfo=dt.UTC)
CARRIERS = ("telecom", "unicom", "mobile")


def probe(name: str = "chat", **kw: Any) -> ProbeWindow:
    base: dict[str, Any] = dict(
        probe=name, target="gpu-sh", profile="short", engine="main", requests=20,
        outcomes={"ok": 20}, ttft_p95=0.45, tpot_p95=0.04, itl_p99=0.09, stalls=0,
        connect_p95=0.05, prompt_tokens_mean=200.0, ttft_p95_baseline=0.42,
        tpot_p95_baseline=0.04, prompt_tokens_baseline=200.0, timeout_total=120.0,
    )
    base.update(kw)
    return ProbeWindow(**base)


def path(carrier: str, **kw: Any) -> PathWindow:
    base: dict[str, Any] = dict(
        carrier=carrier, target="gpu-sh", sent=200, lost=0, rtt_mean=0.035, jitter=0.004,
        loss_baseline=0.0, rtt_baseline=0.034, route_class="cn2_gia",
        best_route_class="cn2_gia",
    )
    base.update(kw)
    return PathWindow(**base)


def engine(name: str = "main", **kw: Any) -> EngineWindow:
    base: dict[str, Any] = dict(
        engine=name, target=f"{name}:8000", up=True, requests=300.0, queue_seconds=6.0,
        prefill_seconds=45.0, decode_seconds=900.0, ttft_p95=0.3, itl_p95=0.03, running=12.0,
        waiting=0.0, running_max=64.0, kv_cache_usage=0.4, preemptions=0.0,
        prompt_tokens_mean=1500.0, prompt_tokens_baseline=1400.0, request_rate=0.5,
        request_rate_baseline=0.45,
        # The healthy window's own prefill rate (1500 tokens x 300 requests / 45 s).
        prefill_rate_max=10000.0,
    )
    base.update(kw)
    return EngineWindow(**base)


def gpu(index: int = 0, **kw: Any) -> GpuWindow:
    base: dict[str, Any] = dict(
        gpu=str(index), name="NVIDIA H200", utilization=0.8, memory_used_ratio=0.9,
        dram_bandwidth_utilization=0.55, pcie_gen=5.0, pcie_gen_max=5.0, pcie_width=16.0,
        pcie_width_max=16.0,
    )
    base.update(kw)
    return GpuWindow(**base)


def host(**pressure: float) -> HostWindow:
    """A host whose engine cgroup stalls little: PSI some per resource, overridden by
    ``pressure`` (cpu=0.8)."""
    shares = {"cpu": 0.02, "memory": 0.0, "io": 0.01, **pressure}
    return HostWindow(pressure={(scope, r): v for r, v in shares.items()
                                for scope in ("host", "engine")},
                      memory_available_ratio=0.6, swap_pages=0.0, cpu_busy=0.4, cpus=64.0,
                      engine_cpu=6.0)


def healthy() -> Observations:
    """One probe per carrier plus an untagged one, each carrier's path, one engine, 2 GPUs,
    and the host under them."""
    probes = (probe("chat"), *(probe(f"chat-{c}", carrier=c) for c in CARRIERS))
    return Observations(at=AT, window=600.0, source="exporter", probes=probes,
                        paths=tuple(path(c) for c in CARRIERS), engines=(engine(),),
                        gpus=(gpu(0), gpu(1)), hosts=(host(),))


def with_host(obs: Observations, **pressure: float) -> Observations:
    return replace(obs, hosts=(host(**pressure),))


def with_probe(obs: Observations, name: str, **kw: Any) -> Observations:
    return replace(obs, probes=tuple(replace(p, **kw) if p.probe == name else p
                                     for p in obs.probes))


def with_path(obs: Observations, carrier: str, **kw: Any) -> Observations:
    return replace(obs, paths=tuple(replace(p, **kw) if p.carrier == carrier else p
                                    for p in obs.paths))


def with_engine(obs: Observations, **kw: Any) -> Observations:
    return replace(obs, engines=tuple(replace(e, **kw) for e in obs.engines))


def with_gpu(obs: Observations, index: int, **kw: Any) -> Observations:
    return replace(obs, gpus=tuple(replace(g, **kw) if g.gpu == str(index) else g
                                   for g in obs.gpus))


def all_probes(obs: Observations, **kw: Any) -> Observations:
    return replace(obs, probes=tuple(replace(p, **kw) for p in obs.probes))


def fleet(probes: int = 10, engines: int = 3, paths: int = 30, gpus: int = 8) -> Observations:
    """The benchmark's size: probes spread over carriers and engines, paths over carriers x
    targets, GPUs over engines."""
    names = [f"e{i}" for i in range(engines)]
    targets = [f"gpu-{i}" for i in range(max(1, paths // len(CARRIERS)))]
    ps = tuple(probe(f"p{i}", carrier=CARRIERS[i % 3], engine=names[i % engines],
                     target=targets[i % len(targets)]) for i in range(probes))
    pa = tuple(path(CARRIERS[i % 3], target=targets[i // 3 % len(targets)])
               for i in range(paths))
    es = tuple(engine(n) for n in names)
    gs = tuple(gpu(i, engine=names[i % engines]) for i in range(gpus))
    return Observations(at=AT, window=600.0, source="exporter", probes=ps, paths=pa,
                        engines=es, gpus=gs, hosts=(host(),))
