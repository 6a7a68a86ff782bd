"""``python -m tests.support.lab run SCENARIO.yaml [--source exporter|prometheus] [--json]
[--keep] [--screenshot PNG]``

Exit 0 when the diagnosis meets the scenario's ``expect``, 1 when it does not, 2 when the
scenario file is bad or the lab cannot run (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

from tests.support.lab.runner import LabError, run_scenario
from tests.support.lab.scenario import ScenarioError, load_scenario
from tests.support.netlab import lab_unavailable
from tests.support.vllm_server import missing as vllm_missing


def _terminate(signum: int, frame: FrameType | None) -> None:
    # SIGTERM unwinds like Ctrl-C, so the runner's cleanup stops every process and
    # deletes every namespace.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.lab",
                                 description="Run one scenario of the diagnosis lab.")
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one scenario file and compare with its expect")
    run.add_argument("scenario", type=Path)
    run.add_argument("--source", choices=("exporter", "prometheus"), default="exporter")
    run.add_argument("--json", action="store_true", help="print the diagnosis JSON at the end")
    run.add_argument("--keep", action="store_true", help="keep the work folder (logs, config)")
    run.add_argument("--screenshot", type=Path, metavar="PNG",
                     help="save the exporter's live page (headless Chromium) once read")
    args = ap.parse_args(argv)

    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        for line in exc.messages:
            print(f"error: {line}", file=sys.stderr)
        return 2
    if (why := lab_unavailable()) is not None:
        print(f"error: the lab cannot run here: {why}", file=sys.stderr)
        return 2
    if scenario.engine.kind == "vllm" and (why := vllm_missing()) is not None:
        print(f"error: the scenario's engine is the real vLLM: {why}", file=sys.stderr)
        return 2
    if args.source == "prometheus" and shutil.which("prometheus") is None:
        print("error: `prometheus` is not installed (Debian: prometheus)", file=sys.stderr)
        return 2
    # Installed explicitly: a shell starts background jobs with SIGINT ignored.
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    workdir = Path(tempfile.mkdtemp(prefix="lle-lab-"))
    name = args.scenario.stem
    try:
        results = run_scenario(scenario, workdir, (args.source,),
                               progress=lambda m: print(f"{name}: {m}", file=sys.stderr),
                               screenshot=args.screenshot and args.screenshot.resolve())
    except LabError as exc:
        print(f"error: {name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted; lab cleaned up", file=sys.stderr)
        return 130
    finally:
        if args.keep:
            print(f"{name}: work folder kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    diagnosis, problems = results[args.source]
    for problem in problems:
        print(f"{name} ({args.source}): MISMATCH: {problem}", file=sys.stderr)
    if not problems:
        print(f"{name} ({args.source}): as expected", file=sys.stderr)
    if args.json:
        print(json.dumps(diagnosis, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
