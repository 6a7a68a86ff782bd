"""Value types of the config: durations, names, URLs, times of day, secret references.

Each refuses a bad value with a message that says what was expected and what it got; the
YAML loader adds the path and line.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from exporter import redact
from exporter.config.files import MAX_SECRET_BYTES, FileProblem, read_text

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
            redact.remember_url(value)
            return value
    raise PydanticCustomError(
        "url", "expected an http:// or https:// URL with a host, got {v}",
        {"v": repr(redact.url(value)) if isinstance(value, str) else repr(value)},
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


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


#: Validation context key: False leaves {env}/{file} references unread (SecretRef.value()
#: is then empty), for commands such as generate that never use the secrets.
RESOLVE_SECRETS = "resolve_secrets"
#: Validation context key: the config file's folder, where a relative file path starts (so a
#: config installed in /etc with its files beside it reads the same from any directory).
CONFIG_DIR = "config_dir"


def beside_config(path: str, info: ValidationInfo) -> str:
    """``path``, relative ones taken from the config file's folder."""
    base = info.context.get(CONFIG_DIR) if isinstance(info.context, dict) else None
    if base in (None, "", "."):
        return path
    return os.path.join(base, os.path.expanduser(path))


class SecretRef(StrictModel):
    """A secret given by reference: ``{env: NAME}`` or ``{file: PATH}``, never inline."""

    env: str | None = None
    file: str | None = None
    _value: SecretStr = PrivateAttr(default=SecretStr(""))

    @model_validator(mode="before")
    @classmethod
    def _no_inline(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, Mapping):
            raise PydanticCustomError(
                "inline_secret",
                "secrets must be a reference, {env: NAME} or {file: PATH}, never inline",
            )
        if isinstance(data.get("file"), str):
            return {**data, "file": beside_config(data["file"], info)}
        return data

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise PydanticCustomError("secret_ref", "give exactly one of env: NAME or file: PATH")
        if isinstance(info.context, dict) and not info.context.get(RESOLVE_SECRETS, True):
            # generate and check-config need no secret to exist here; but a reference to a
            # device or a FIFO is wrong wherever it is read, so it stays an error.
            if self.file is not None and os.path.exists(self.file) and not os.path.isfile(
                self.file
            ):
                raise PydanticCustomError(
                    "secret_file", "cannot read secret file {path}: not a regular file",
                    {"path": self.file},
                )
            return self
        self._value = SecretStr(self._read())
        redact.remember([self._value.get_secret_value()])
        return self

    def _read(self) -> str:
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise PydanticCustomError(
                    "secret_env", "environment variable {name} is not set", {"name": self.env}
                )
        else:
            assert self.file is not None
            try:
                value = read_text(self.file, MAX_SECRET_BYTES).strip()
            except FileProblem as exc:
                raise PydanticCustomError(
                    "secret_file",
                    "cannot read secret file {path}: {err}",
                    {"path": self.file, "err": str(exc)},
                ) from None
        if not value:
            raise PydanticCustomError("secret_empty", "the referenced secret is empty")
        return value

    def problem(self) -> str | None:
        """Why ``run`` could not read this secret here and now, or None; reads nothing into
        the model (check-config reports it as a warning)."""
        try:
            self._read()
        except PydanticCustomError as exc:
            return exc.message()
        return None

    def value(self) -> str:
        return self._value.get_secret_value()

    def describe(self) -> str:
        return f"env:{self.env}" if self.env else f"file:{self.file}"



def split_host_port(value: str) -> tuple[str | None, int]:
    m = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:(\d{1,5})|([^:\[\]]*):(\d{1,5})", value.strip())
    if not m:
        return None, 0
    host = m.group(1) if m.group(1) is not None else m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 0 < port < 65536:
        return None, 0
    return host, port


Ratio = Annotated[float, Field(ge=0, le=1)]
Seconds = Annotated[float, Field(gt=0)]

def require_unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise PydanticCustomError(
                "duplicate", "{what} name {name} is used twice", {"what": what, "name": repr(name)}
            )
        seen.add(name)


class PeakWindow(StrictModel):
    start: TimeOfDay
    end: TimeOfDay

    @model_validator(mode="after")
    def _not_empty(self) -> PeakWindow:
        if self.start == self.end:
            raise PydanticCustomError("window", "start and end are equal: the window is empty")
        return self


def secret_refs(model: BaseModel, path: tuple[str | int, ...] = ()) -> Iterator[
    tuple[tuple[str | int, ...], SecretRef]
]:
    """Every secret reference in a config tree, with its YAML path."""
    for name in type(model).model_fields:
        yield from _refs_in(getattr(model, name), (*path, name))


def _refs_in(value: Any, path: tuple[str | int, ...]) -> Iterator[
    tuple[tuple[str | int, ...], SecretRef]
]:
    if isinstance(value, SecretRef):
        yield path, value
    elif isinstance(value, BaseModel):
        yield from secret_refs(value, path)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _refs_in(item, (*path, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _refs_in(item, (*path, key))

