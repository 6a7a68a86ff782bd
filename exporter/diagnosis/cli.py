"""``llm-latency-exporter diagnose``: where the latency comes from, as an incident note or
as the v1 JSON.

Two sources, one chain: ``--exporter URL`` (the default, http://127.0.0.1:9400) reads a
running exporter's ``/api/v1/diagnosis``; ``--prometheus URL`` reads any Prometheus-
compatible API and runs the chain here, with thresholds from ``--config``.

Exit status: 0 healthy, 1 degraded or failing, 2 bad input, 3 no data or the source could
not be reached. Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from exporter.commands import AddParser, add_config_flag
from exporter.config.load import load_config
from exporter.config.models import Config
from exporter.config.values import parse_duration
from exporter.config.yamlfile import ConfigError
from exporter.diagnosis import chain, remote
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.promapi import SourceError
from exporter.diagnosis.result import Diagnosis
from exporter.diagnosis.text import render
from exporter.diagnosis.thresholds import resolve
from exporter.metrics.names import prom_duration

EXIT_HEALTHY, EXIT_FOUND, EXIT_USAGE, EXIT_NO_DATA = 0, 1, 2, 3
DEFAULT_EXPORTER = "http://127.0.0.1:9400"
DEFAULT_CONFIG = "config.yaml"
#: Seconds one HTTP request to the source may take.
TIMEOUT = 30.0
#: The longest window: Prometheus keeps 15 days by default, baselines need some of it.
MAX_WINDOW = 7 * 86400.0

EXAMPLES = """examples:
  llm-latency-exporter diagnose                      # the local exporter, as a note
  llm-latency-exporter diagnose --exporter http://gpu-1:9400 --json
  llm-latency-exporter diagnose --prometheus http://prometheus:9090 --window 1m
  llm-latency-exporter diagnose --prometheus http://mimir/prometheus \\
      --at 2026-11-30T21:40:00+08:00 --config.file /etc/llm-latency-exporter/config.yaml
exit status: 0 healthy, 1 degraded or failing, 2 bad input, 3 no data or source unreachable
"""

Evaluate = Callable[[Observations], Diagnosis]
RenderText = Callable[[Diagnosis], str]


@dataclass(frozen=True)
class Wiring:
    """What the command needs from the chain's package: the chain bound to a config's
    thresholds, and the incident-note renderer. Tests pass stand-ins."""

    chain: Callable[[Config], Evaluate]
    render_text: RenderText


def wiring() -> Wiring:
    """The chain and its text renderer, with thresholds from the config."""
    return Wiring(lambda config: partial(chain.diagnose, thresholds=resolve(config)), render)


class UsageError(Exception):
    """Bad input: one line, exit 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints the usage block before its error and leaves unknown flags to the
    top-level parser; here both are one ``error:`` line and exit 2."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split()[-1]
        print(f"error: {command}: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def parse_at(text: str | None, now: dt.datetime | None = None,
             flag: str = "--at") -> dt.datetime:
    """RFC 3339 (with its offset) or unix seconds; now when absent."""
    if text is None:
        return now or dt.datetime.now(dt.UTC)
    try:
        return dt.datetime.fromtimestamp(float(text), dt.UTC)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        at = dt.datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected RFC 3339 (2026-11-30T21:40:00+08:00) "
                         "or unix seconds") from None
    if at.tzinfo is None:
        raise UsageError(f"{flag} {text!r}: needs a UTC offset (Z or +08:00): whose 21:40?")
    return at


def parse_window(text: str | None, config: Config) -> float:
    if text is None:
        return config.diagnosis.window
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise UsageError(f"--window {text!r}: expected a duration like 10m") from None
    # PromQL range selectors take whole units; a window under two scrapes has no rate.
    if seconds % 1 or not 1 <= seconds <= MAX_WINDOW:
        raise UsageError(f"--window {text!r}: expected whole seconds from 1s to 7d")
    return seconds


def read_config(path: str | None) -> Config:
    """``--config``, else ./config.yaml when present, else the defaults (thresholds derived
    from the default SLO). Secrets are not resolved: diagnosing sends no probe."""
    if path is None:
        if not Path(DEFAULT_CONFIG).is_file():
            return Config()
        path = DEFAULT_CONFIG
    try:
        return load_config(path, resolve_secrets=False)
    except ConfigError as exc:
        raise UsageError("; ".join(exc.messages)) from None


def exit_status(d: Diagnosis) -> int:
    if d.status == "healthy":
        return EXIT_HEALTHY
    if d.status in ("degraded", "failing"):
        return EXIT_FOUND
    return EXIT_NO_DATA


def is_empty(obs: Observations) -> bool:
    return not (obs.probes or obs.paths or obs.engines or obs.gpus)


def _print(d: Diagnosis, as_json: bool, render_text: RenderText) -> None:
    if as_json:
        print(json.dumps(d.to_json(), indent=1))
    else:
        print(render_text(d))


def diagnose(args: argparse.Namespace, wire: Wiring | None = None) -> int:
    """The command; ``wire`` defaults to :func:`wiring` (tests pass stand-ins)."""
    wire = wire or wiring()
    try:
        if args.exporter is not None and args.prometheus is not None:
            raise UsageError("give --exporter or --prometheus, not both")
        config = read_config(args.config)
        window = parse_window(args.window, config)
        at = parse_at(args.at)
        if args.prometheus is None:
            for flag, value in (("--window", args.window), ("--at", args.at)):
                if value is not None:
                    # The exporter keeps its last evaluation of its own window, not a history.
                    raise UsageError(f"{flag} needs --prometheus: an exporter answers with its "
                                     "latest diagnosis over its diagnosis.window")
        for flag in ("exporter", "prometheus"):
            url = getattr(args, flag)
            if url is not None and not url.startswith(("http://", "https://")):
                raise UsageError(f"--{flag} {url!r}: expected an http:// or https:// URL")
    except UsageError as exc:
        print(f"error: diagnose: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if args.prometheus is not None:
            from exporter.diagnosis.prometheus import observe

            if args.at is None and config.diagnosis.query_offset is not None:
                at -= dt.timedelta(seconds=config.diagnosis.query_offset)
            obs = observe(args.prometheus, config, at, window, TIMEOUT)
            d = wire.chain(config)(obs)
            _print(d, args.json, wire.render_text)
            if is_empty(obs):
                print(f"error: {args.prometheus} has no llm_ series in the "
                      f"{prom_duration(window)} before {d.to_json()['at']}", file=sys.stderr)
                return EXIT_NO_DATA
            return exit_status(d)
        url = args.exporter or DEFAULT_EXPORTER
        doc = remote.fetch(url, TIMEOUT)
        d = remote.from_json(doc, url)
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NO_DATA
    if args.json:
        print(json.dumps(doc, indent=1))  # as the exporter said it, field for field
    else:
        print(wire.render_text(d))
    return exit_status(d)


def _cmd(args: argparse.Namespace) -> int:
    return diagnose(args)


def register(add: AddParser) -> None:
    p = add("diagnose", _cmd,
            "say where the latency comes from: network, engine, GPU or application, with "
            "the evidence, from a running exporter or from Prometheus", EXAMPLES)
    p.__class__ = OneLineParser
    src = p.add_argument_group("source (one of)")
    src.add_argument("--exporter", metavar="URL",
                     help=f"a running exporter's /api/v1/diagnosis (default {DEFAULT_EXPORTER})")
    src.add_argument("--prometheus", metavar="URL",
                     help="a Prometheus, Thanos, Mimir or VictoriaMetrics query API; the chain "
                     "runs here")
    # Values are parsed by diagnose(), not argparse types, so each bad one is one line.
    p.add_argument("--window", metavar="DURATION",
                   help="how much to read, with --prometheus (default: diagnosis.window of "
                   "the config, 10m)")
    p.add_argument("--at", metavar="TIME",
                   help="end of the window, with --prometheus: RFC 3339 or unix seconds "
                   "(default: now, less diagnosis.query_offset)")
    p.add_argument("--json", action="store_true", help="print the v1 JSON instead of the note")
    add_config_flag(p, f"thresholds and SLOs (default: ./{DEFAULT_CONFIG} if present, else "
                    "the defaults)")


def main(argv: Sequence[str], wire: Wiring | None = None) -> int:
    """Parse ``argv`` (the flags after ``diagnose``) and run; for tests with stand-ins."""
    parser = argparse.ArgumentParser(prog="llm-latency-exporter")
    sub = parser.add_subparsers()

    def add(name: str, func: Any, help: str, epilog: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, epilog=epilog)
        p.set_defaults(func=func)
        return p

    register(add)
    return diagnose(parser.parse_args(["diagnose", *argv]), wire)
