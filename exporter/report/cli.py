"""``llm-latency-exporter report``: the acceptance report of a period, from Prometheus, as
a self-contained HTML file (plots inlined, opens offline), Markdown and JSON.

Exit status: 0 written, 1 written and a regression against ``--baseline``, 2 bad input, 3
Prometheus could not be reached or has no ``llm_`` series in the period. Every error is one
line on stderr, never a traceback, and then no file is written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
from pathlib import Path

from exporter.commands import AddParser, add_config_flag
from exporter.diagnosis import cli as diagnose_cli
from exporter.diagnosis.promapi import PromClient, SourceError
from exporter.report import inputs
from exporter.report.build import build, is_empty
from exporter.report.compare import against
from exporter.report.inputs import UsageError
from exporter.report.model import Bench

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_NO_DATA = 0, 1, 2, 3
FILES = ("report.html", "report.md", "report.json")
INSTALL = ("pip install 'llm-latency-exporter[report]' (in a clone: "
           ".venv/bin/pip install -e '.[report]')")

EXAMPLES = """examples:
  llm-latency-exporter report --prometheus http://127.0.0.1:9090 --from 24h --out report/
  llm-latency-exporter report --prometheus http://prometheus:9090 --config.file config.yaml \\
      --from 2026-11-30T08:00:00+08:00 --to 2026-12-01T08:00:00+08:00 \\
      --bench after.json --baseline before/report.json --out after/
exit status: 0 written, 1 written with a regression against --baseline, 2 bad input,
3 Prometheus unreachable or without llm_ series in the period
"""


def _out_dir(path: str) -> Path:
    """``--out``, checked now and made only when there is something to write in it."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {path}: exists and is not a directory")
    made = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not made.is_dir() or not os.access(made, os.W_OK | os.X_OK):
        raise UsageError(f"--out {path}: {made} is not a writable directory")
    return out


def _write(out: Path, texts: dict[str, str]) -> None:
    """Every file or none: each goes to a temporary name first, then all are renamed."""
    out.mkdir(parents=True, exist_ok=True)
    # mkstemp makes files only their owner can read; a report is for sharing, so its files
    # get what the umask leaves, as any other file this user writes.
    umask = os.umask(0)
    os.umask(umask)
    staged: list[tuple[Path, Path]] = []
    try:
        for name, text in texts.items():
            fd, staging = tempfile.mkstemp(prefix=f".{name}.", dir=out)
            os.fchmod(fd, 0o666 & ~umask)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            staged.append((Path(staging), out / name))
        for tmp, final in staged:
            tmp.replace(final)
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def report(args: argparse.Namespace, now: dt.datetime | None = None) -> int:
    try:
        if not args.prometheus.startswith(("http://", "https://")):
            raise UsageError(f"--prometheus {args.prometheus!r}: expected an http:// or "
                             "https:// URL")
        start, end = inputs.period(args.start, args.end, now)
        try:
            config = diagnose_cli.read_config(args.config)
        except diagnose_cli.UsageError as exc:
            raise UsageError(f"--config: {exc}") from None
        max_regression = inputs.ratio("--max-regression", args.max_regression)
        bench = inputs.bench(args.bench)
        baseline = inputs.baseline(args.baseline)
        if isinstance(baseline, Bench) and bench is None:
            raise UsageError(f"--baseline {args.baseline}: a bench JSON baseline needs "
                             "--bench, the run to compare with it")
        try:
            from exporter.report import render
        except ImportError as exc:
            raise UsageError(f"plots need {exc.name}: {INSTALL}") from None
        out = _out_dir(args.out)
    except UsageError as exc:
        print(f"error: report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    client = PromClient(args.prometheus, diagnose_cli.TIMEOUT)
    try:
        doc = build(client, config, start, end, bench, now)
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NO_DATA
    if is_empty(doc):
        print(f"error: {doc.prometheus} has no llm_ series between {doc.start.isoformat()} "
              f"and {doc.end.isoformat()}", file=sys.stderr)
        return EXIT_NO_DATA
    if baseline is not None:
        doc = doc.model_copy(update={"baseline": against(
            baseline, Path(args.baseline).name, doc, max_regression)})
    _write(out, render.all_formats(doc))
    print(f"wrote {', '.join(str(out / name) for name in FILES)}")
    if doc.baseline is not None and doc.baseline.regressions:
        names = ", ".join(c.metric for c in doc.baseline.regressions[:5])
        more = len(doc.baseline.regressions) - 5
        print(f"regressions against {args.baseline}: {names}"
              + (f" and {more} more" if more > 0 else ""), file=sys.stderr)
        return EXIT_REGRESSION
    return EXIT_OK


def _cmd(args: argparse.Namespace) -> int:
    return report(args)


def register(add: AddParser) -> None:
    p = add("report", _cmd,
            "write the acceptance report of a period from Prometheus: per carrier daytime "
            "and peak TTFT/TPOT/jitter/loss, routes, failures, queue time, goodput, "
            "verdicts, bench and baseline (HTML, Markdown, JSON)", EXAMPLES)
    p.__class__ = diagnose_cli.OneLineParser
    p.add_argument("--prometheus", metavar="URL", required=True,
                   help="a Prometheus, Thanos, Mimir or VictoriaMetrics query API")
    p.add_argument("--from", dest="start", metavar="TIME", required=True,
                   help="start: RFC 3339, unix seconds, or a duration before --to (24h)")
    p.add_argument("--to", dest="end", metavar="TIME",
                   help="end: RFC 3339 or unix seconds (default: now)")
    add_config_flag(p, f"peak windows and SLOs (default: ./{diagnose_cli.DEFAULT_CONFIG} if "
                    "present, else the defaults)")
    p.add_argument("--bench", metavar="FILE.json", help="a bench --json run to include")
    p.add_argument("--baseline", metavar="FILE.json",
                   help="an earlier report's report.json, or a bench --json run")
    p.add_argument("--max-regression", default="0.2", metavar="RATIO",
                   help="worse than the baseline by more than this is a regression "
                   "(default: %(default)s)")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="directory for report.html, report.md and report.json")
