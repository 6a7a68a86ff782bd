"""``python -m exporter.stack``: start, stop, or run the webhook sink alone.

    python -m exporter.stack up        # start, print the URLs, return
    python -m exporter.stack down      # stop what `up` started, remove its directory
    python -m exporter.stack sink --listen 127.0.0.1:9095   # the webhook sink alone
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from exporter.stack.sink import serve_sink
from exporter.stack.state import STATE_FILE, Ports, Stack
from exporter.stack.supervisor import StackError, down, up

EXIT_USAGE = 2


def _print_urls(stack: Stack) -> None:
    print("llm-latency native stack (all on 127.0.0.1):")
    labels = {
        "sink": "alert sink (notifications)",
        "simulator": "engine simulator faults",
        "exporter": "exporter",
        "alertmanager": "alertmanager",
        "prometheus": "prometheus",
    }
    for service in stack.services:
        print(f"  {labels[service.name]:<28} {service.url}")
    print(f"  {'data, configs and logs':<28} {stack.directory}")
    print(
        "inject a fault:  curl -s "
        f"http://127.0.0.1:{stack.ports.simulator}/admin/faults -d '{{\"metrics_error_rate\": 1}}'"
    )
    print("stop:            make stack-down")


def _parse_ports(args: argparse.Namespace) -> Ports:
    defaults = asdict(Ports())
    return Ports(**{name: getattr(args, f"{name}_port") or port for name, port in
                    defaults.items()})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exporter.stack",
        description="Prometheus, Alertmanager, the exporter and the engine simulator on "
        "loopback, without Docker.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the stack and print its URLs")
    for name, port in asdict(Ports()).items():
        p_up.add_argument(f"--{name}-port", type=int, default=None,
                          help=f"(default {port})")
    p_down = sub.add_parser("down", help="stop what `up` started and remove its directory")
    p_down.add_argument("--keep", action="store_true", help="keep the data and logs")
    p_sink = sub.add_parser("sink", help="run only the webhook sink")
    p_sink.add_argument("--listen", default="127.0.0.1:9095")
    p_sink.add_argument("--log", type=Path, default=None, help="append JSON lines here")
    for p in (p_up, p_down):
        p.add_argument("--root", type=Path, default=Path.cwd(),
                       help="repository root (default: the current directory)")
        p.add_argument("--state", type=Path, default=None,
                       help=f"state file (default: ROOT/{STATE_FILE})")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            _print_urls(up(args.root, _parse_ports(args), args.state))
        elif args.command == "down":
            stopped = down(args.root, args.state, keep=args.keep)
            for service in stopped:
                print(f"stopped {service.name} (pid {service.pid})")
            if not stopped:
                print("no stack running")
        else:
            serve_sink(args.listen, args.log)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0
