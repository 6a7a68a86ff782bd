"""The diagnosis over generated scenarios: a confusion matrix of expected x given verdicts.

    sudo .venv/bin/python -m benchmarks.diagnosis_matrix --seed 1 --n 12 --parallel 2 \\
        --out docs/dev/diagnosis.md --json docs/diagnosis-matrix.json

Scenarios come from ``tests/support/lab/generate.py`` (seeded: single and double faults and
healthy runs, each with the verdicts its knobs and the run's thresholds imply). Each one runs
through the lab as ``tests/test_scenarios.py`` runs a file: one lab run, read by the embedded
source and by Prometheus. Runs go ``--parallel`` at a time, each in its own worker process,
so each lab's namespaces carry that process's id. The reference is the expectation itself:
the figures are the share of scenarios whose primary verdict (layer, cause and scope) the
chain gives, the share of injected secondary causes it reports, and the verdicts it gives on
healthy runs; it exits 1 below the target (95 % right primaries, every secondary reported,
no verdict on a healthy run). ``--out`` rewrites the marked section of that Markdown file.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import multiprocessing
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from tests.support.lab.generate import KINDS, generate, write
from tests.support.lab.runner import LabError, match, run_scenario
from tests.support.lab.scenario import SOURCES, Scenario, load_scenario
from tests.support.netlab import lab_unavailable

START, END = "<!-- diagnosis-matrix:start -->", "<!-- diagnosis-matrix:end -->"
HEALTHY = "healthy"
TARGET = 0.95


def _key(v: dict[str, Any] | None) -> str:
    return HEALTHY if v is None else f"{v['layer']}/{v['cause']}"


def run_one(path: str, sources: tuple[str, ...]) -> dict[str, Any]:
    """One scenario file through the lab (in a worker process); per source, the verdicts
    given and why they miss the expectation."""
    scenario = load_scenario(path)
    workdir = Path(tempfile.mkdtemp(prefix="lle-matrix-"))
    started = time.monotonic()
    try:
        results = run_scenario(scenario, workdir, tuple(s for s in sources
                                                        if s in scenario.sources))
        out = {src: {"status": d.get("status"), "why": why,
                     "verdicts": [{k: v[k] for k in ("layer", "cause", "scope")}
                                  for v in d.get("verdicts", [])]}
               for src, (d, why) in results.items()}
        return {"file": path, "results": out, "seconds": round(time.monotonic() - started)}
    except (LabError, OSError, ValueError, subprocess.SubprocessError) as exc:
        # The lab could not finish this run (a part that did not start, a diagnose that
        # timed out on a loaded machine): a lab error, counted apart from the verdicts.
        return {"file": path, "error": f"{type(exc).__name__}: {exc}",
                "seconds": round(time.monotonic() - started)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def score(scenario: Scenario, given: dict[str, Any]) -> dict[str, Any]:
    """The primary's fit (layer, cause and scope), secondaries reported, healthy verdicts."""
    expect = [e.model_dump() for e in scenario.expect]
    verdicts = given["verdicts"]
    diagnosis = {"verdicts": verdicts, "status": given["status"]}
    primary_ok = not match(expect[:1], diagnosis)
    # A secondary is reported when any verdict fits it (match() on that one verdict); it is
    # of another layer than the primary, so no verdict fits both.
    secondaries = [any(not match([want], {"verdicts": [v]}) for v in verdicts)
                   for want in expect[1:]]
    return {
        "expected": _key(expect[0] if expect else None),
        "given": _key(verdicts[0] if verdicts else None),
        "primary_ok": primary_ok,
        "scope_miss": bool(expect and verdicts and _key(expect[0]) == _key(verdicts[0])
                           and not primary_ok),
        "secondaries": secondaries,
        "healthy_verdicts": len(verdicts) if not expect else 0,
        "all_ok": not given["why"],
    }


def tally(scenarios: list[Scenario], runs: list[dict[str, Any]], source: str
          ) -> dict[str, Any]:
    scores = []
    errors = []
    for s, run in zip(scenarios, runs, strict=True):
        if "error" in run:
            errors.append({"file": run["file"], "error": run["error"]})
            continue
        if source in run["results"]:
            sc = score(s, run["results"][source])
            scores.append({**sc, "description": s.description, "file": run["file"],
                           "given_all": [_key(v) for v in run["results"][source]["verdicts"]]})
    matrix: dict[str, Counter[str]] = defaultdict(Counter)
    for sc in scores:
        matrix[sc["expected"]][sc["given"]] += 1
    secondaries = [ok for sc in scores for ok in sc["secondaries"]]
    healthy = [sc for sc in scores if sc["expected"] == HEALTHY]
    return {
        "scenarios": len(scores),
        "primary_right": sum(sc["primary_ok"] for sc in scores),
        "scope_misses": sum(sc["scope_miss"] for sc in scores),
        "secondaries_injected": len(secondaries),
        "secondaries_reported": sum(secondaries),
        "healthy": len(healthy),
        "healthy_with_verdicts": sum(1 for sc in healthy if sc["healthy_verdicts"]),
        "matrix": {k: dict(v) for k, v in sorted(matrix.items())},
        "misses": [sc for sc in scores if not sc["all_ok"]],
        "lab_errors": errors,
    }


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "0/0"


def markdown(report: dict[str, Any]) -> str:
    lines = [START, "", f"Measured {report['date']} with `{report['command']}`: "
             f"{report['n']} generated scenarios (seed {report['seed']}), "
             f"{report['wall_minutes']} min on this machine.", ""]
    for source, t in report["sources"].items():
        scope = (f", {t['scope_misses']} more with the right cause in another scope"
                 if t["scope_misses"] else "")
        errors = (f"; {len(t['lab_errors'])} run(s) the lab could not complete"
                  if t["lab_errors"] else "")
        lines += [f"**{source} source**: primary verdict right (layer, cause and scope) "
                  f"{_pct(t['primary_right'], t['scenarios'])}{scope}; injected secondary "
                  f"causes reported {_pct(t['secondaries_reported'], t['secondaries_injected'])}"
                  f"; healthy runs with a verdict "
                  f"{_pct(t['healthy_with_verdicts'], t['healthy'])}{errors}.", ""]
        given = sorted({g for row in t["matrix"].values() for g in row})
        lines += ["| expected \\ given | " + " | ".join(f"`{g}`" for g in given) + " |",
                  "|---|" + "---|" * len(given)]
        for exp, row in t["matrix"].items():
            lines.append(f"| `{exp}` | " + " | ".join(str(row.get(g, "")) for g in given) + " |")
        lines.append("")
        if t["misses"]:
            lines += [f"Misses ({source}):", ""]
            lines += [f"- `{Path(m['file']).name}` {m['description']}; given "
                      f"{', '.join(m['given_all']) or 'no verdict'}" for m in t["misses"]]
            lines.append("")
    lines.append(END)
    return "\n".join(lines)


def rewrite(doc: Path, section: str) -> None:
    text = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + section + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    doc.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--sources", default=",".join(SOURCES))
    ap.add_argument("--out", type=Path, help="Markdown file whose marked section is rewritten")
    ap.add_argument("--json", type=Path, help="write the whole report as JSON here")
    ap.add_argument("--keep", type=Path, help="write the scenario files here (else a temp dir)")
    ap.add_argument("--only", help="run only these indices of the generated list (1,5,9)")
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="the knobs the singles and doubles turn (host,link); all by default")
    ap.add_argument("--rescore", type=Path,
                    help="score the runs of an earlier --json again (same --seed and --n)")
    args = ap.parse_args(argv)
    if args.rescore:
        earlier = json.loads(args.rescore.read_text(encoding="utf-8"))
        scenarios = generate(earlier["seed"], earlier["generated"],
                             tuple(earlier.get("kinds", KINDS)))
        if earlier["only"]:
            scenarios = [scenarios[int(i)] for i in earlier["only"].split(",")]
        earlier["sources"] = {s: tally(scenarios, earlier["runs"], s) for s in earlier["sources"]}
        return report_out(earlier, args)
    if (why := lab_unavailable()) is not None:
        print(f"error: the lab cannot run here: {why}", file=sys.stderr)
        return 2
    sources = tuple(s for s in args.sources.split(",") if s)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    try:
        scenarios = generate(args.seed, args.n, kinds)
    except ValueError as exc:
        print(f"error: --kinds: {exc}", file=sys.stderr)
        return 2
    if args.only:
        scenarios = [scenarios[int(i)] for i in args.only.split(",")]
    folder = args.keep or Path(tempfile.mkdtemp(prefix="lle-matrix-files-"))
    files = [str(p) for p in write(scenarios, folder)]
    started = time.monotonic()
    runs: list[dict[str, Any]] = [{} for _ in files]
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=args.parallel, mp_context=ctx) as pool:
        futures = {pool.submit(run_one, f, sources): i for i, f in enumerate(files)}
        for fut in cf.as_completed(futures):
            i = futures[fut]
            try:
                runs[i] = fut.result()
            except Exception as exc:  # one run's bug must not lose the others
                runs[i] = {"file": files[i], "error": f"{type(exc).__name__}: {exc}",
                           "seconds": 0}
            r = runs[i]
            got = r.get("error") or {s: [_key(v) for v in x["verdicts"]] or HEALTHY
                                     for s, x in r["results"].items()}
            print(f"[{sum(1 for x in runs if x)}/{len(files)}] {Path(files[i]).name} "
                  f"{scenarios[i].description}: {got} ({r['seconds']} s)", file=sys.stderr)
    command = "python -m benchmarks.diagnosis_matrix " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    report = {
        "date": dt.date.today().isoformat(), "command": command, "seed": args.seed,
        "n": len(scenarios), "generated": args.n, "only": args.only, "kinds": list(kinds),
        "wall_minutes": round((time.monotonic() - started) / 60, 1),
        "sources": {s: tally(scenarios, runs, s) for s in sources},
        "runs": runs,
    }
    return report_out(report, args)


def report_out(report: dict[str, Any], args: argparse.Namespace) -> int:
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    section = markdown(report)
    print(section)
    if args.out:
        rewrite(args.out, section)
    return 0 if all(meets_target(t) for t in report["sources"].values()) else 1


def meets_target(t: dict[str, Any]) -> bool:
    """Issue 21's target: 95 % right primaries, every injected secondary reported, no
    verdict on a healthy run, and every run completed."""
    return (t["primary_right"] >= TARGET * t["scenarios"] and not t["lab_errors"]
            and t["secondaries_reported"] == t["secondaries_injected"]
            and not t["healthy_with_verdicts"])


if __name__ == "__main__":
    sys.exit(main())
