"""The config file's sections as typed, validated, frozen models (``Config`` at the root)."""

from __future__ import annotations

import datetime as dt
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from exporter.config.policy import AlertingConfig, DiagnosisConfig
from exporter.config.values import (
    Duration,
    HttpUrl,
    Name,
    PeakWindow,
    Ratio,
    Seconds,
    SecretRef,
    StrictModel,
    beside_config,
    format_duration,
    require_unique,
    split_host_port,
)
from exporter.config.yamlfile import YamlPath, format_path, line_of
from exporter.metrics import CLIENTS_OTHER_CARRIER


class ServerConfig(StrictModel):
    listen_address: str = "0.0.0.0:9400"
    log_format: Literal["logfmt", "json"] = "logfmt"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    #: Connections served at once; by default what the open-file limit allows (docs/security.md).
    max_connections: int | None = Field(default=None, ge=1)
    #: From accepting a connection (or TLS) to complete request headers: slowloris's bound.
    header_timeout: Duration = 10.0
    #: A kept-alive connection with no request is closed after this long.
    idle_timeout: Duration = 120.0

    @field_validator("listen_address")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, _ = split_host_port(value)
        if host is None:
            raise PydanticCustomError(
                "listen", 'expected host:port like "0.0.0.0:9400", got {v}', {"v": repr(value)}
            )
        return value

    @property
    def host(self) -> str:
        return split_host_port(self.listen_address)[0] or ""

    @property
    def port(self) -> int:
        return split_host_port(self.listen_address)[1]



class PeakWindowsConfig(StrictModel):
    timezone: str = "Asia/Shanghai"
    windows: dict[Name, PeakWindow] = Field(
        default_factory=lambda: {"evening": PeakWindow(start=dt.time(20), end=dt.time(23))}
    )

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise PydanticCustomError(
                "timezone",
                "unknown timezone {v} (use an IANA name like Asia/Shanghai)",
                {"v": repr(value)},
            ) from None
        return value

    @model_validator(mode="after")
    def _no_overlap(self) -> PeakWindowsConfig:
        # Overlapping windows would count the same minutes as two peaks in the drift rules.
        minutes = {name: _minutes_of(w) for name, w in self.windows.items()}
        names = sorted(minutes)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if minutes[a] & minutes[b]:
                    raise PydanticCustomError(
                        "window", "windows {a} and {b} overlap", {"a": a, "b": b}
                    )
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def _minutes_of(window: PeakWindow) -> set[int]:
    """The minutes of the day a window covers; one that ends before it starts wraps."""
    start = window.start.hour * 60 + window.start.minute
    end = window.end.hour * 60 + window.end.minute
    return set(range(start, end)) if start < end else set(range(start, 1440)) | set(range(end))




class SloConfig(StrictModel):
    ttft_p95_seconds: Seconds = 1.0
    tpot_p95_seconds: Seconds = 0.1
    e2e_p95_seconds: Seconds = 30.0
    probe_failure_ratio: Ratio = 0.05
    loss_ratio: Ratio = 0.02
    jitter_seconds: Seconds = 0.03
    # Goodput objective for burn-rate alerts: the share of requests meeting the TTFT SLO.
    objective: Annotated[float, Field(gt=0, lt=1)] = 0.99


class SloOverride(StrictModel):
    ttft_p95_seconds: Seconds | None = None
    tpot_p95_seconds: Seconds | None = None
    e2e_p95_seconds: Seconds | None = None


EngineType = Literal["vllm", "trtllm", "triton", "sglang"]


class EngineLimits(StrictModel):
    """Caps on what one engine target may add to /metrics: distinct values per label
    (per target), ``le`` bounds per histogram series, and Prometheus series in all (each
    bucket, ``_sum`` and ``_count`` counts as one). What does not fit is dropped and counted
    in llm_engine_dropped_series_total. The defaults fit 20 models x 2 DP ranks of vLLM with
    its default buckets (about 240 series per model and rank) with room to spare."""

    max_models: Annotated[int, Field(ge=1, le=1000)] = 20
    max_dp_ranks: Annotated[int, Field(ge=1, le=1024)] = 64
    #: finished_reason, reason and source, each counted on its own.
    max_label_values: Annotated[int, Field(ge=1, le=1000)] = 32
    max_buckets: Annotated[int, Field(ge=2, le=1000)] = 100
    max_series: Annotated[int, Field(ge=100, le=1_000_000)] = 20_000


class EngineConfig(EngineLimits):
    name: Name
    url: HttpUrl
    type: EngineType | None = None
    bearer_token: SecretRef | None = None
    interval: Duration = 5.0
    timeout: Duration = 4.0


class ProbeTimeouts(StrictModel):
    connect: Duration = 5.0
    first_token: Duration = 30.0
    total: Duration = 120.0


class ProbeConfig(StrictModel):
    name: Name
    url: HttpUrl
    api: Literal["chat", "completions"] = "chat"
    model: str
    api_key: SecretRef | None = None
    interval: Duration = 15.0
    profile: Literal["short", "long_context", "cached"] = "short"
    max_tokens: Annotated[int, Field(ge=1, le=32768)] = 64
    prompt_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 4000
    timeouts: ProbeTimeouts = ProbeTimeouts()
    slo: SloOverride = SloOverride()
    # Safety limits, applied per endpoint (host:port); probes sharing an endpoint get the
    # strictest of their values.
    max_concurrency: Annotated[int, Field(ge=1, le=64)] = 2
    min_spacing: Duration = 0.5
    max_response_bytes: Annotated[int, Field(ge=1024, le=256 * 1024 * 1024)] = 4 * 1024 * 1024
    # PEM bundle of the CAs to trust for an https endpoint behind a private CA.
    ca_file: str | None = None
    # What the probe's requests cross, as labels on its series: the paths.carriers key its
    # traffic rides and the engines[].name that serves it. Alertmanager needs them to let a
    # carrier's loss mute this probe's latency alerts and an engine-down mute its failures.
    carrier: Name | None = None
    engine: Name | None = None

    @field_validator("ca_file")
    @classmethod
    def _ca_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        path = beside_config(value, info)
        if not Path(path).is_file():
            raise PydanticCustomError(
                "ca_file", "expected an existing PEM file, got {v}", {"v": repr(path)}
            )
        return path


def increasing_buckets(value: list[float] | None) -> list[float] | None:
    if value is not None and (value[0] <= 0 or any(b <= a for a, b in pairwise(value))):
        raise PydanticCustomError("buckets", "bucket bounds must be positive and increasing")
    return value


class PathTarget(StrictModel):
    name: Name
    host: str
    region: Name
    protocol: Literal["icmp", "tcp"] = "icmp"
    port: Annotated[int, Field(ge=1, le=65535)] | None = None

    @model_validator(mode="after")
    def _port(self) -> PathTarget:
        if self.protocol == "icmp" and self.port is not None:
            raise PydanticCustomError("port", "port applies only to protocol: tcp")
        return self

    @property
    def tcp_port(self) -> int:
        return self.port or 443


class PathsConfig(StrictModel):
    interval: Duration = 30.0
    burst: Annotated[int, Field(ge=1, le=1000)] = 20
    spacing: Duration = 0.2
    timeout: Duration = 2.0
    route_interval: Duration = 600.0
    #: Traceroutes running at once across the section's targets (each one thread, one socket).
    route_parallelism: Annotated[int, Field(ge=1, le=64)] = 4
    #: Which ICMP socket the section shares: auto (ping socket if allowed, else raw), raw, dgram.
    icmp_socket: Literal["auto", "raw", "dgram"] = "auto"
    #: TCP connects in flight across the section; a probe finding none free is skipped (busy).
    max_tcp_connects: Annotated[int, Field(ge=1, le=10000)] = 256
    #: Upper bounds of the RTT histogram (default: 26 from 1 ms to 4 s); fewer is cheaper.
    rtt_buckets: Annotated[list[Duration], Field(min_length=1, max_length=40)] | None = None
    # Files, relative to the config file: carriers merged in (deploy/carriers-cn.yaml), and a
    # route table extending or replacing exporter/checks/path/data/routes-cn.yaml.
    include: str | None = None
    route_table: str | None = None
    carriers: dict[Name, list[PathTarget]] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> PathsConfig:
        for carrier, targets in self.carriers.items():
            require_unique([t.name for t in targets], f"carrier {carrier} target")
        return self

    _increasing = field_validator("rtt_buckets")(increasing_buckets)

    @model_validator(mode="after")
    def _burst_fits(self) -> PathsConfig:
        # The scheduler cancels a run at its interval, so a longer burst could never finish.
        longest = (self.burst - 1) * self.spacing + self.timeout
        if longest >= self.interval:
            raise PydanticCustomError(
                "burst",
                "a burst takes up to {t} ((burst - 1) x spacing + timeout), which must be less"
                " than interval {i}",
                {"t": format_duration(longest), "i": format_duration(self.interval)},
            )
        return self


class PathsInclude(StrictModel):
    """A ``paths.include`` file: carriers only, in the shape of ``paths.carriers``."""

    carriers: dict[Name, list[PathTarget]] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> PathsInclude:
        for carrier, targets in self.carriers.items():
            require_unique([t.name for t in targets], f"carrier {carrier} target")
        return self


Port = Annotated[int, Field(ge=1, le=65535)]


class ClientsConfig(StrictModel):
    """Real users' connections on local listening ports, per carrier (docs/clients.md)."""

    interval: Duration = 15.0
    #: The engine's or the gateway's listening ports: connections whose local port is one.
    ports: Annotated[list[Port], Field(min_length=1, max_length=32)]
    #: Carrier name (as in paths.carriers: telecom, unicom, mobile) -> a CIDR file, one
    #: prefix a line, relative to the config file; re-read on SIGHUP.
    carriers: dict[Name, str] = Field(min_length=1, max_length=64)
    #: Connections one run reads at most; a dump beyond is cut there and counted.
    max_connections: Annotated[int, Field(ge=1, le=1_000_000)] = 100_000
    #: Upper bounds of the RTT histogram (default: the paths' 26, 1 ms to 4 s).
    rtt_buckets: Annotated[list[Duration], Field(min_length=1, max_length=40)] | None = None

    @field_validator("ports")
    @classmethod
    def _unique_ports(cls, value: list[int]) -> list[int]:
        twice = sorted({p for p in value if value.count(p) > 1})
        if twice:
            raise PydanticCustomError("duplicate", "port {p} is listed twice", {"p": twice[0]})
        return value

    @field_validator("carriers")
    @classmethod
    def _not_other(cls, value: dict[str, str]) -> dict[str, str]:
        if CLIENTS_OTHER_CARRIER in value:
            raise PydanticCustomError(
                "carrier", "{o} is the carrier of unlisted addresses; name yours otherwise",
                {"o": repr(CLIENTS_OTHER_CARRIER)})
        return value

    _increasing = field_validator("rtt_buckets")(increasing_buckets)


class GpuConfig(StrictModel):
    enabled: bool = True
    interval: Duration = 1.0
    devices: list[Annotated[int, Field(ge=0)]] | None = None


class HostConfig(StrictModel):
    """The host under the engine: pressure, memory, swap, CPU (docs/host.md). On by default;
    a host without the kernel's PSI files publishes the rest."""

    enabled: bool = True
    interval: Duration = 5.0
    #: The engine's cgroup (cgroup v2, as in the ``0::`` line of /proc/<pid>/cgroup, e.g.
    #: /system.slice/vllm.service): its own pressure and CPU.
    engine_cgroup: str | None = None
    #: Or the engine's processes by name (/proc/<pid>/comm, case-insensitive prefix, e.g.
    #: vllm): the cgroup of the first found, each run.
    engine_process: Annotated[str, Field(min_length=1, max_length=15)] | None = None


class Config(StrictModel):
    server: ServerConfig = ServerConfig()
    peak_windows: PeakWindowsConfig = PeakWindowsConfig()
    slo: SloConfig = SloConfig()
    engines: list[EngineConfig] = Field(default_factory=list)
    probes: list[ProbeConfig] = Field(default_factory=list)
    paths: PathsConfig | None = None
    gpu: GpuConfig | None = None
    host: HostConfig = HostConfig()
    clients: ClientsConfig | None = None
    alerting: AlertingConfig = AlertingConfig()
    diagnosis: DiagnosisConfig = DiagnosisConfig()
    _source: tuple[str, dict[YamlPath, int]] = PrivateAttr(default=("config", {}))

    @field_validator("engines", "probes")
    @classmethod
    def _unique_names(
        cls, value: list[EngineConfig] | list[ProbeConfig], info: ValidationInfo
    ) -> Any:
        require_unique([item.name for item in value], str(info.field_name).rstrip("s"))
        return value

    @model_validator(mode="after")
    def _probe_references(self) -> Config:
        # A misspelt name would not fail anywhere else: the inhibition would just never match.
        engines = {e.name for e in self.engines}
        carriers = set(self.paths.carriers) if self.paths is not None else set()
        for i, probe in enumerate(self.probes):
            for key, value, known, where in (
                ("engine", probe.engine, engines, "engines[].name"),
                ("carrier", probe.carrier, carriers, "paths.carriers"),
            ):
                if value is not None and value not in known:
                    raise PydanticCustomError(
                        "reference",
                        "probes[{i}].{key}: {v} is not one of {where} ({known})",
                        {"i": i, "key": key, "v": repr(value), "where": where,
                         "known": ", ".join(sorted(known)) or "none configured"},
                    )
        return self

    def locate(self, name: str, lines: dict[YamlPath, int]) -> None:
        """Remember the file and the line of each key, for problems found after loading."""
        self._source = (name, lines)

    def where(self, *path: str | int) -> str:
        """``file: paths.route_table (line 12)``: the prefix of a problem found by a check
        in a file this config names (checks read such files when they are built)."""
        name, lines = self._source
        if not path:
            return name
        line = line_of(path, lines)
        return f"{name}: {format_path(path)}" + (f" (line {line})" if line else "")


