"""What the command reads besides Prometheus: the period's times, the config, a bench run
and a baseline. Each problem is a :class:`UsageError` with one line naming the flag."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from exporter.bench.compare import check_bench
from exporter.bench.errors import BenchError
from exporter.config.values import parse_duration
from exporter.diagnosis import cli as diagnose_cli
from exporter.report.model import FORMAT, Bench, Report
from exporter.report.period import MAX_PERIOD

#: The biggest --bench or --baseline file read (a bench JSON holds every request).
MAX_FILE = 256 * 1024 * 1024


class UsageError(Exception):
    """Bad input: one line, exit 2."""


def period(start: str, end: str | None, now: dt.datetime | None = None) -> tuple[float, float]:
    """``--from`` as a time or a duration before ``--to`` (24h), ``--to`` as a time or now."""
    try:
        until = diagnose_cli.parse_at(end, now, flag="--to").timestamp()
    except diagnose_cli.UsageError as exc:
        raise UsageError(str(exc)) from None
    try:
        since = until - parse_duration(start)
    except ValueError:
        try:
            since = diagnose_cli.parse_at(start, flag="--from").timestamp()
        except diagnose_cli.UsageError as exc:
            if "offset" in str(exc):
                raise UsageError(str(exc)) from None
            raise UsageError(f"--from {start!r}: expected a duration before --to (24h), "
                             "RFC 3339 (2026-11-30T08:00:00+08:00) or unix seconds") from None
    if since >= until:
        raise UsageError(f"--from {start!r}: must be before --to")
    if until - since > MAX_PERIOD:
        raise UsageError(f"--from {start!r}: the period is longer than "
                         f"{MAX_PERIOD / 86400:g} days")
    return since, until


def _json(flag: str, path: str) -> Any:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_FILE:
            raise UsageError(f"{flag} {path}: larger than {MAX_FILE // 2**20} MiB")
        return json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{flag} {path}: not JSON: {exc}") from None


def _bench_of(data: Any, flag: str, path: str) -> Bench:
    try:
        doc = check_bench(data, path, flag)
    except BenchError as exc:
        raise UsageError(str(exc)) from None
    return Bench(source=Path(path).name, config=dict(doc.get("config") or {}),
                 summary=doc["summary"])


def bench(path: str | None) -> Bench | None:
    return None if path is None else _bench_of(_json("--bench", path), "--bench", path)


def baseline(path: str | None) -> Report | Bench | None:
    """An earlier report's JSON, or a bench JSON."""
    if path is None:
        return None
    data = _json("--baseline", path)
    if isinstance(data, dict) and data.get("format") == FORMAT:
        try:
            return Report.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise UsageError(f"--baseline {path}: {where}: {err['msg']}") from None
    if isinstance(data, dict) and str(data.get("format", "")).startswith(FORMAT.split("/")[0]):
        raise UsageError(f"--baseline {path}: format {data['format']}, expected {FORMAT}")
    try:
        return _bench_of(data, "--baseline", path)
    except UsageError:
        raise UsageError(f"--baseline {path}: neither a report JSON ({FORMAT}) nor a bench "
                         "--json file") from None


def ratio(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 100:
        raise UsageError(f"{flag} {text!r}: expected a positive ratio like 0.2")
    return value
