"""Command line: ``llm-latency-exporter [run|check-config|...]``.

Bad input exits 2 with one line per problem and no traceback, before anything starts.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from pydantic import ValidationError

from exporter import __version__
from exporter.checks import build_checks
from exporter.checks.host.check import HostCheck
from exporter.commands import AddParser, Command, add_config_flag
from exporter.config.load import load_config
from exporter.config.models import Config, ServerConfig
from exporter.config.values import format_duration, secret_refs
from exporter.config.web import Web, load_web_config
from exporter.config.yamlfile import ConfigError

EXIT_USAGE = 2
EXIT_SIGPIPE = 128 + signal.SIGPIPE
_T = TypeVar("_T")

RUN_EXAMPLES = """examples:
  llm-latency-exporter run --config.file /etc/llm-latency-exporter/config.yaml
  llm-latency-exporter run --config.file config.yaml --web.listen-address 127.0.0.1:9400 \\
      --log.level debug                      # flags override the server section
  llm-latency-exporter run --config.file config.yaml --web.config.file web.yml
                                             # TLS and basic auth (docs/security.md)
  llm-latency-exporter                       # same as: run --config.file ./config.yaml
  kill -HUP $(pidof llm-latency-exporter)    # re-read the config; a bad one is logged and ignored
"""

CHECK_EXAMPLES = """examples:
  llm-latency-exporter check-config config.yaml
  llm-latency-exporter check-config --config.file /etc/llm-latency-exporter/config.yaml
  llm-latency-exporter check-config deploy/demo.yaml && systemctl reload llm-latency-exporter
  llm-latency-exporter check-config config.yaml --web.config.file web.yml
exit status: 0 valid, 2 invalid (one line per problem, naming the YAML path and line)
"""


def _or_exit(step: Callable[[], _T]) -> _T:
    """Run a step that reads the config (loading it, or building the checks, which read the
    files it names); a problem prints one line each and exits 2."""
    try:
        return step()
    except ConfigError as exc:
        for message in exc.messages:
            print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def require_checks(config: Config, allow_empty: bool) -> Config:
    """An empty or truncated file must not pass for "nothing to do": the exporter would
    serve no checks and say Ready, and a reload would silently drop every check."""
    # The host check is on by default: alone it measures nothing of the latency.
    if not allow_empty and not [c for c in build_checks(config) if c.kind != HostCheck.kind]:
        raise ConfigError([
            f"{config.where()}: configures no checks (engines, probes, paths, gpu or clients);"
            " pass --allow-empty if that is intended"
        ])
    return config


def _flag_overrides(args: argparse.Namespace) -> Callable[[Config], Config]:
    """node_exporter-style flags win over the file, on every (re)load of it."""
    server = {
        key: value
        for key, value in (
            ("listen_address", args.web_listen_address),
            ("log_level", args.log_level),
            ("log_format", args.log_format),
        )
        if value is not None
    }

    def apply(config: Config) -> Config:
        require_checks(config, args.allow_empty)
        if not server:
            return config
        try:
            # Only the flags are validated: durations in the dump are seconds already.
            checked = ServerConfig.model_validate(server)
        except ValidationError as exc:
            err = exc.errors()[0]
            flag = "--" + {"listen_address": "web.listen-address"}.get(
                str(err["loc"][0]), str(err["loc"][0]).replace("_", ".")
            )
            raise ConfigError([f"{flag}: {err['msg'].removeprefix('Value error, ')}"]) from None
        merged = config.server.model_copy(update={k: getattr(checked, k) for k in server})
        return config.model_copy(update={"server": merged})

    return apply


def cmd_run(args: argparse.Namespace) -> int:
    from exporter.runtime.app import App
    from exporter.runtime.logs import setup_logging

    overrides = _flag_overrides(args)
    config = _or_exit(lambda: overrides(load_config(args.config)))
    app = _or_exit(
        lambda: App(config, args.config, adjust=overrides, web_config=args.web_config_file))
    setup_logging(config.server.log_format, config.server.log_level)
    try:
        asyncio.run(app.serve())
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            print(
                f"error: server.listen_address {config.server.listen_address}: "
                f"{exc.strerror}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        raise
    return 0


def describe_web(web: Web | None) -> str:
    if web is None:
        return "http, no authentication (no --web.config.file)"
    tls = web.config.tls_server_config
    parts = [web.scheme]
    if web.tls is not None:
        parts.append(f"{tls.min_version}-{tls.max_version}")
        if tls.client_auth_type != "NoClientCert":
            parts.append(f"client certificates {tls.client_auth_type}")
    users = len(web.config.basic_auth_users)
    parts.append(f"{users} basic-auth users" if users else "no basic auth")
    return ", ".join(parts)


def summarize(config: Config, path: str, web: Web | None = None) -> str:
    """The one-screen summary check-config prints: what would run, and how often."""
    lines = [f"{path}: valid"]
    srv = config.server
    lines.append(f"  server        {srv.listen_address}  log={srv.log_format}/{srv.log_level}")
    lines.append(f"  web           {describe_web(web)}")
    pw = config.peak_windows
    windows = ", ".join(
        f"{n} {w.start:%H:%M}-{w.end:%H:%M}" for n, w in pw.windows.items()
    ) or "none"
    lines.append(f"  peak windows  {pw.timezone}: {windows}")
    slo = config.slo
    lines.append(
        f"  slo           ttft p95 {slo.ttft_p95_seconds:g}s, tpot p95 {slo.tpot_p95_seconds:g}s,"
        f" e2e p95 {slo.e2e_p95_seconds:g}s, probe failures {slo.probe_failure_ratio:.0%},"
        f" loss {slo.loss_ratio:.1%}, jitter {slo.jitter_seconds * 1000:g}ms"
    )
    checks = build_checks(config)
    lines.append(f"  checks        {len(checks)}")
    for check in checks:
        lines.append(
            f"    {check.name:<28} every {format_duration(check.interval):<6}"
            f" timeout {format_duration(check.timeout):<6} {check.describe()}"
        )
    return "\n".join(lines)


def cmd_check_config(args: argparse.Namespace) -> int:
    # Like promtool's: syntax and semantics. A secret this shell cannot read is a warning
    # here (the file may be checked on a build machine); run refuses to start without it.
    if (args.file is None) == (args.config is None):
        print("error: check-config: give the config file once, as FILE or --config.file FILE",
              file=sys.stderr)
        return EXIT_USAGE
    file: str = args.file or args.config
    config = _or_exit(
        lambda: require_checks(load_config(file, resolve_secrets=False), args.allow_empty)
    )
    for where, ref in secret_refs(config):
        problem = ref.problem()
        if problem:
            print(f"warning: {config.where(*where)}: {problem}; run refuses to start without it",
                  file=sys.stderr)
    web = _or_exit(
        lambda: load_web_config(args.web_config_file) if args.web_config_file else None)
    print(_or_exit(lambda: summarize(config, file, web)))
    return 0




def _extra_subcommands() -> list[Callable[[AddParser], None]]:
    """``register(add)`` functions of subcommands defined beside their code."""
    from exporter.bench import cli as bench
    from exporter.diagnosis import cli as diagnosis_cli
    from exporter.monitoring import generate
    from exporter.report import cli as report_cli
    from exporter.simulator import cli as simulator_cli

    return [simulator_cli.register, bench.register, generate.register, diagnosis_cli.register,
            report_cli.register]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-latency-exporter",
        description="Prometheus exporter for LLM inference latency: network per carrier, "
        "engine queue vs compute, GPU, and synthetic streaming probes.",
        epilog="With no subcommand, runs the exporter (run --config.file ./config.yaml).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, func: Command, help: str, epilog: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help,
            description=help,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(func=func)
        return p

    # Subcommands living in other modules register here, one line each.
    for register in _extra_subcommands():
        register(add)

    run = add("run", cmd_run, "run the exporter", RUN_EXAMPLES)
    add_config_flag(run, "config file (default: %(default)s)", "config.yaml")
    run.add_argument("--web.listen-address", dest="web_listen_address", metavar="HOST:PORT",
                     help="overrides server.listen_address")
    run.add_argument("--log.level", dest="log_level", choices=("debug", "info", "warning", "error"),
                     help="overrides server.log_level")
    run.add_argument("--log.format", dest="log_format", choices=("logfmt", "json"),
                     help="overrides server.log_format")
    check = add("check-config", cmd_check_config, "validate a config and summarize it",
                CHECK_EXAMPLES)
    check.add_argument("file", nargs="?", help="config file to validate")
    add_config_flag(check, "the same, as a flag")
    web = "TLS and basic-auth settings in Prometheus exporter-toolkit's web config format " \
        "(docs/security.md)"
    for p, web_help in ((run, f"{web}; re-read on SIGHUP"), (check, web)):
        p.add_argument("--allow-empty", action="store_true",
                       help="accept a config that configures no checks")
        p.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                       help=web_help)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not args_list or (
        args_list[0].startswith("-") and args_list[0] not in ("-h", "--help", "--version")
    ):
        args_list.insert(0, "run")
    try:
        args = parser.parse_args(args_list)  # --help writes too
        func: Command = args.func
        status = func(args)
        sys.stdout.flush()  # inside the try: a pipe closed early fails here, not at exit
    except BrokenPipeError:
        # The reader left (`| head`); nobody reads the rest. Point stdout at /dev/null so
        # the interpreter's own flush at exit cannot fail again, and exit as a process
        # killed by SIGPIPE does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_SIGPIPE
    return status
