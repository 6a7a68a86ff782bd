"""YAML config -> typed, validated objects.

Every error names the YAML path and line (``probes[1].interval (line 23): ...``) so a user
can fix the file without reading a traceback. Secrets are only references ({env: NAME} or
{file: PATH}), resolved at load so a missing one fails before anything starts.
"""

from __future__ import annotations

import datetime as dt
import difflib
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

YamlPath = tuple[str | int, ...]


class ConfigError(Exception):
    """A config problem, already formatted for the user (one line per problem)."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = messages


# --- value types ------------------------------------------------------------------------

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: Any) -> float:
    """'15s', '200ms', '1m30s' -> seconds. Bare numbers are refused: 200 of what?"""
    if isinstance(value, str):
        text = value.strip()
        pos, total = 0, 0.0
        for m in _DURATION_RE.finditer(text):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
            pos = m.end()
        if text and pos == len(text):
            if total <= 0:
                raise PydanticCustomError(
                    "duration", "duration must be positive, got {v}", {"v": repr(value)}
                )
            return total
    raise PydanticCustomError(
        "duration", "expected a duration like 15s, got {v}", {"v": repr(value)}
    )


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


Duration = Annotated[float, BeforeValidator(parse_duration)]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def _check_name(value: Any) -> str:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise PydanticCustomError(
            "name",
            "expected a name of letters, digits, '_', '.', '-' (it becomes a label value), got {v}",
            {"v": repr(value)},
        )
    return value


Name = Annotated[str, BeforeValidator(_check_name)]


def _check_url(value: Any) -> str:
    if isinstance(value, str):
        parts = urlsplit(value)
        if parts.scheme in ("http", "https") and parts.hostname:
            return value
    raise PydanticCustomError(
        "url", "expected an http:// or https:// URL with a host, got {v}", {"v": repr(value)}
    )


HttpUrl = Annotated[str, BeforeValidator(_check_url)]


def _check_time_of_day(value: Any) -> dt.time:
    if isinstance(value, dt.time):
        return value
    if isinstance(value, str) and re.fullmatch(r"\d{1,2}:\d{2}", value.strip()):
        hour, minute = (int(x) for x in value.strip().split(":"))
        if hour <= 23 and minute <= 59:
            return dt.time(hour, minute)
        if hour == 24 and minute == 0:
            # 24:00 reads naturally as "until midnight"; it is the same instant as 00:00.
            return dt.time(0, 0)
    if isinstance(value, int) and not isinstance(value, bool):
        # YAML 1.1 reads an unquoted 20:00 as the sexagesimal integer 1200.
        raise PydanticCustomError(
            "time", 'expected a quoted time of day like "20:00", got {v}', {"v": repr(value)}
        )
    raise PydanticCustomError(
        "time", 'expected a time of day like "20:00", got {v}', {"v": repr(value)}
    )


TimeOfDay = Annotated[dt.time, BeforeValidator(_check_time_of_day)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


#: Validation context key: False leaves {env}/{file} references unread (SecretRef.value()
#: is then empty), for commands such as generate that never use the secrets.
RESOLVE_SECRETS = "resolve_secrets"


class SecretRef(_Model):
    """A secret given by reference: ``{env: NAME}`` or ``{file: PATH}``, never inline."""

    env: str | None = None
    file: str | None = None
    _value: SecretStr = PrivateAttr(default=SecretStr(""))

    @model_validator(mode="before")
    @classmethod
    def _no_inline(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise PydanticCustomError(
                "inline_secret",
                "secrets must be a reference, {env: NAME} or {file: PATH}, never inline",
            )
        return data

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise PydanticCustomError("secret_ref", "give exactly one of env: NAME or file: PATH")
        if isinstance(info.context, dict) and not info.context.get(RESOLVE_SECRETS, True):
            return self  # generate reads thresholds only; it needs no secret to exist here
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise PydanticCustomError(
                    "secret_env", "environment variable {name} is not set", {"name": self.env}
                )
        else:
            assert self.file is not None
            try:
                value = Path(self.file).read_text().strip()
            except OSError as exc:
                raise PydanticCustomError(
                    "secret_file",
                    "cannot read secret file {path}: {err}",
                    {"path": self.file, "err": exc.strerror or str(exc)},
                ) from None
        if not value:
            raise PydanticCustomError("secret_empty", "the referenced secret is empty")
        self._value = SecretStr(value)
        return self

    def value(self) -> str:
        return self._value.get_secret_value()

    def describe(self) -> str:
        return f"env:{self.env}" if self.env else f"file:{self.file}"


# --- sections ---------------------------------------------------------------------------


class ServerConfig(_Model):
    listen_address: str = "0.0.0.0:9400"
    log_format: Literal["logfmt", "json"] = "logfmt"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

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


def split_host_port(value: str) -> tuple[str | None, int]:
    m = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:(\d{1,5})|([^:\[\]]*):(\d{1,5})", value.strip())
    if not m:
        return None, 0
    host = m.group(1) if m.group(1) is not None else m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 0 < port < 65536:
        return None, 0
    return host, port


class PeakWindow(_Model):
    start: TimeOfDay
    end: TimeOfDay

    @model_validator(mode="after")
    def _not_empty(self) -> PeakWindow:
        if self.start == self.end:
            raise PydanticCustomError("window", "start and end are equal: the window is empty")
        return self


class PeakWindowsConfig(_Model):
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

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


Ratio = Annotated[float, Field(ge=0, le=1)]
Seconds = Annotated[float, Field(gt=0)]


class SloConfig(_Model):
    ttft_p95_seconds: Seconds = 1.0
    tpot_p95_seconds: Seconds = 0.1
    e2e_p95_seconds: Seconds = 30.0
    probe_failure_ratio: Ratio = 0.05
    loss_ratio: Ratio = 0.02
    jitter_seconds: Seconds = 0.03
    # Goodput objective for burn-rate alerts: the share of requests meeting the TTFT SLO.
    objective: Annotated[float, Field(gt=0, lt=1)] = 0.99


class SloOverride(_Model):
    ttft_p95_seconds: Seconds | None = None
    tpot_p95_seconds: Seconds | None = None
    e2e_p95_seconds: Seconds | None = None


EngineType = Literal["vllm", "trtllm", "triton", "sglang"]


class EngineConfig(_Model):
    name: Name
    url: HttpUrl
    type: EngineType | None = None
    bearer_token: SecretRef | None = None
    interval: Duration = 5.0
    timeout: Duration = 4.0
    max_models: Annotated[int, Field(ge=1, le=1000)] = 20


class ProbeTimeouts(_Model):
    connect: Duration = 5.0
    first_token: Duration = 30.0
    total: Duration = 120.0


class ProbeConfig(_Model):
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
    max_response_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    # PEM bundle of the CAs to trust for an https endpoint behind a private CA.
    ca_file: str | None = None
    # What the probe's requests cross, as labels on its series: the paths.carriers key its
    # traffic rides and the engines[].name that serves it. Alertmanager needs them to let a
    # carrier's loss mute this probe's latency alerts and an engine-down mute its failures.
    carrier: Name | None = None
    engine: Name | None = None

    @field_validator("ca_file")
    @classmethod
    def _ca_file(cls, value: str | None) -> str | None:
        if value is not None and not Path(value).is_file():
            raise PydanticCustomError(
                "ca_file", "expected an existing PEM file, got {v}", {"v": repr(value)}
            )
        return value


class PathTarget(_Model):
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


class PathsConfig(_Model):
    interval: Duration = 30.0
    burst: Annotated[int, Field(ge=1, le=1000)] = 20
    spacing: Duration = 0.2
    timeout: Duration = 2.0
    route_interval: Duration = 600.0
    # Files, relative to the config file: carriers merged in (deploy/carriers-cn.yaml), and a
    # route table extending or replacing exporter/checks/path/data/routes-cn.yaml.
    include: str | None = None
    route_table: str | None = None
    carriers: dict[Name, list[PathTarget]] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> PathsConfig:
        for carrier, targets in self.carriers.items():
            _require_unique([t.name for t in targets], f"carrier {carrier} target")
        return self

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

    @field_validator("route_table")
    @classmethod
    def _route_table(cls, value: str | None) -> str | None:
        from exporter.checks.path.routes import RouteTableError, load_table

        if value is not None:
            try:
                load_table(value)
            except RouteTableError as exc:
                raise PydanticCustomError("route_table", "{err}", {"err": str(exc)}) from None
        return value


class PathsInclude(_Model):
    """A ``paths.include`` file: carriers only, in the shape of ``paths.carriers``."""

    carriers: dict[Name, list[PathTarget]] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> PathsInclude:
        for carrier, targets in self.carriers.items():
            _require_unique([t.name for t in targets], f"carrier {carrier} target")
        return self


class GpuConfig(_Model):
    enabled: bool = True
    interval: Duration = 1.0
    devices: list[Annotated[int, Field(ge=0)]] | None = None


class AlertingConfig(_Model):
    runbook_base_url: HttpUrl = (
        "https://github.com/llm-latency-exporter/llm-latency-exporter/blob/main/docs/runbooks.md"
    )
    # Evening P95 over the same day's off-peak baseline above this ratio pages as drift.
    peak_drift_ratio: Annotated[float, Field(gt=1)] = 1.5
    # The off-peak baseline is the true P95 (or loss) of the off-peak time inside this
    # window before now: 12h seen from the evening reaches back over the same day.
    baseline_window: Duration = 12 * 3600.0
    # A loss ratio of tiny numbers is noise: loss drift needs at least this much peak loss.
    peak_drift_min_loss_ratio: Ratio = 0.01
    # Engine time spent queued above this share is capacity-bound; prefill + decode above
    # 1 - this while engine latency is over the SLO is compute-bound.
    queue_share_ratio: Annotated[float, Field(gt=0, lt=1)] = 0.25
    kv_cache_usage_ratio: Ratio = 0.95
    gpu_memory_ratio: Ratio = 0.97
    # A gap between tokens this long is a stall a user notices.
    stall_seconds: Duration = 2.0
    # Route classes best first; a target whose class moves down this list alerts.
    route_class_order: list[Name] = Field(
        default_factory=lambda: [
            "cn2_gia", "ctgnet", "cu_9929", "cmin2", "cn2_gt", "cmi", "cu_4837",
            "chinanet_163", "cmnet", "other",
        ]
    )
    # Warnings are held back in these local hours (peak_windows.timezone); pages are not.
    quiet_hours: PeakWindow | None = PeakWindow(start=dt.time(0), end=dt.time(8))

    @field_validator("baseline_window")
    @classmethod
    def _whole_minutes(cls, value: float) -> float:
        # Prometheus range selectors take whole units; a baseline under an hour is no baseline.
        if value % 60 or not 3600 <= value <= 7 * 86400:
            raise PydanticCustomError(
                "duration", "expected whole minutes from 1h to 7d, got {v}",
                {"v": format_duration(value)},
            )
        return value

    @field_validator("route_class_order")
    @classmethod
    def _unique_classes(cls, value: list[str]) -> list[str]:
        _require_unique(value, "route class")
        return value


class Config(_Model):
    server: ServerConfig = ServerConfig()
    peak_windows: PeakWindowsConfig = PeakWindowsConfig()
    slo: SloConfig = SloConfig()
    engines: list[EngineConfig] = []
    probes: list[ProbeConfig] = []
    paths: PathsConfig | None = None
    gpu: GpuConfig | None = None
    alerting: AlertingConfig = AlertingConfig()

    @field_validator("engines", "probes")
    @classmethod
    def _unique_names(
        cls, value: list[EngineConfig] | list[ProbeConfig], info: ValidationInfo
    ) -> Any:
        _require_unique([item.name for item in value], str(info.field_name).rstrip("s"))
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


def _require_unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise PydanticCustomError(
                "duplicate", "{what} name {name} is used twice", {"what": what, "name": repr(name)}
            )
        seen.add(name)


# --- YAML with line numbers -------------------------------------------------------------


def _compose(text: str) -> tuple[Any, dict[YamlPath, int]]:
    """Parse YAML into plain data plus a map from each path to its 1-based line."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        lines: dict[YamlPath, int] = {}

        def walk(n: yaml.Node, path: YamlPath) -> Any:
            lines.setdefault(path, n.start_mark.line + 1)
            if isinstance(n, yaml.MappingNode):
                loader.flatten_mapping(n)  # resolves '<<' merge keys
                out: dict[Any, Any] = {}
                for key_node, value_node in n.value:
                    key = loader.construct_object(key_node, deep=True)
                    if not isinstance(key, str | int) or isinstance(key, bool):
                        key = str(key)
                    child = (*path, key)
                    lines[child] = key_node.start_mark.line + 1
                    if key in out:
                        raise ConfigError(
                            [f"{format_path(child)} (line {lines[child]}): duplicate key"]
                        )
                    out[key] = walk(value_node, child)
                return out
            if isinstance(n, yaml.SequenceNode):
                return [walk(item, (*path, i)) for i, item in enumerate(n.value)]
            return loader.construct_object(n, deep=True)

        data = walk(node, ()) if node is not None else {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError([f"({where}): invalid YAML: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"invalid YAML: {exc}"]) from None
    finally:
        loader.dispose()
    return data, lines


def format_path(path: YamlPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _line_of(path: YamlPath, lines: dict[YamlPath, int]) -> int | None:
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return None


def _unwrap(annotation: Any) -> Iterator[Any]:
    """The concrete types behind Optional/Annotated/Union annotations."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        yield from _unwrap(typing.get_args(annotation)[0])
    elif origin in (Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _unwrap(arg)
    else:
        yield annotation


def _model_at(path: YamlPath) -> type[BaseModel] | None:
    """The model class that owns the mapping at ``path`` (for did-you-mean hints)."""
    candidates: list[Any] = [Config]
    for part in path:
        nxt: list[Any] = []
        for cand in candidates:
            for t in _unwrap(cand):
                if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str):
                    if part in t.model_fields:
                        nxt.append(t.model_fields[part].annotation)
                elif typing.get_origin(t) is list and isinstance(part, int):
                    nxt.append(typing.get_args(t)[0])
                elif typing.get_origin(t) is dict:
                    nxt.append(typing.get_args(t)[1])
        candidates = nxt
    for cand in candidates:
        for t in _unwrap(cand):
            if isinstance(t, type) and issubclass(t, BaseModel):
                return t
    return None


def _describe(err: Mapping[str, Any], path: YamlPath) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(path[-1])
        model = _model_at(path[:-1])
        hint = ""
        if model is not None:
            close = difflib.get_close_matches(key, list(model.model_fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(model.model_fields)
            return f"unknown key {key!r}{hint}; known keys: {known}"
        return f"unknown key {key!r}"
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    builtin = not kind.startswith(
        (
            "duration",
            "name",
            "url",
            "time",
            "timezone",
            "inline_secret",
            "secret",
            "listen",
            "window",
            "port",
            "duplicate",
            "burst",
            "route_table",
        )
    )
    value = err.get("input")
    if builtin and isinstance(value, str | int | float | bool) and "got" not in msg:
        msg = f"{msg}, got {value!r}"
    return msg[0].lower() + msg[1:] if msg else msg


def load_config(path: str | os.PathLike[str], resolve_secrets: bool = True) -> Config:
    """Read and validate ``path``; raise ConfigError with one line per problem."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{name}: cannot read config: {exc.strerror or exc}"]) from None
    return parse_config(text, name, resolve_secrets)


def _compose_named(text: str, name: str) -> tuple[Any, dict[YamlPath, int]]:
    try:
        return _compose(text)
    except ConfigError as exc:
        sep = {True: " ", False: ": "}
        raise ConfigError([f"{name}{sep[m.startswith('(')]}{m}" for m in exc.messages]) from None


def parse_config(text: str, name: str = "config", resolve_secrets: bool = True) -> Config:
    data, lines = _compose_named(text, name)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{name} (line 1): expected a mapping of sections at the top level"])
    _paths_files(data, lines, name)
    return _validate(Config, data, lines, name, {RESOLVE_SECRETS: resolve_secrets})


def _paths_files(data: dict[str, Any], lines: dict[YamlPath, int], name: str) -> None:
    """Resolve the file keys of ``paths`` against the config's folder; merge ``include``.

    Problems inside the included file name that file and its line, then where it was
    included; a target name it shares with the config's own carrier is refused.
    """
    paths = data.get("paths")
    if not isinstance(paths, dict):
        return
    for key in ("include", "route_table"):
        if isinstance(paths.get(key), str):
            paths[key] = str(Path(name).parent / paths[key])
    include = paths.get("include")
    if not isinstance(include, str):
        return  # absent, or a wrong type the model reports
    origin = f"included by {name} line {lines.get(('paths', 'include'))}"
    try:
        text = Path(include).read_text(encoding="utf-8")
    except OSError as exc:
        line = lines.get(("paths", "include"))
        raise ConfigError(
            [f"{name}: paths.include (line {line}): cannot read {include}: {exc.strerror or exc}"]
        ) from None
    try:
        inc_data, inc_lines = _compose_named(text, include)
        extra = _validate(PathsInclude, inc_data or {}, inc_lines, include)
    except ConfigError as exc:
        raise ConfigError([f"{m} ({origin})" for m in exc.messages]) from None
    carriers = paths.setdefault("carriers", {})
    if not isinstance(carriers, dict):
        return
    for carrier, targets in extra.carriers.items():
        own = carriers.setdefault(carrier, [])
        if not isinstance(own, list):
            return
        names = {t.get("name") for t in own if isinstance(t, dict)}
        for i, target in enumerate(targets):
            if target.name in names:
                raise ConfigError(
                    [
                        f"{include}: carriers.{carrier}[{i}] (line"
                        f" {inc_lines.get(('carriers', carrier, i))}): target name"
                        f" {target.name!r} is also in paths.carriers.{carrier} ({origin})"
                    ]
                )
            own.append(target.model_dump(exclude_none=True))


_M = typing.TypeVar("_M", bound=BaseModel)


def _validate(
    model: type[_M], data: Any, lines: dict[YamlPath, int], name: str,
    context: dict[str, Any] | None = None,
) -> _M:
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        messages = []
        for err in exc.errors():
            loc: YamlPath = tuple(p for p in err["loc"] if isinstance(p, str | int))
            # pydantic adds "function-after[...]"-style wrapper names to some locations.
            loc = tuple(p for p in loc if not (isinstance(p, str) and "[" in p))
            line = _line_of(loc, lines)
            where = f" (line {line})" if line else ""
            messages.append(f"{name}: {format_path(loc)}{where}: {_describe(err, loc)}")
        raise ConfigError(messages) from None
