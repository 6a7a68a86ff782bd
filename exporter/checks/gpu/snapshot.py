"""What one tick of the NVML sampler publishes for the check's collector to render."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.metrics import Family


@dataclass(frozen=True, slots=True)
class ProcessReading:
    pid: int
    name: str
    used_bytes: int


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    uuid: str
    name: str
    up: bool
    #: Families labelled only by gpu/uuid/name, in base units; only what NVML answered.
    values: Mapping[Family, float] = field(default_factory=dict)
    clock_events: Mapping[str, bool] = field(default_factory=dict)
    ecc: Mapping[str, int] = field(default_factory=dict)
    xid: Mapping[int, int] = field(default_factory=dict)
    #: NVLink link -> (active, error counts by kind); empty without NVLink.
    nvlink: Mapping[int, tuple[bool, Mapping[str, int]]] = field(default_factory=dict)
    #: (bytes/s, "spec" | "clock_x_bus_width")
    peak: tuple[float, str] | None = None
    bandwidth: float | None = None
    processes: tuple[ProcessReading, ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    nvml_up: bool
    driver_version: str = ""
    cuda_version: str = ""
    gpus: tuple[GpuReading, ...] = ()
