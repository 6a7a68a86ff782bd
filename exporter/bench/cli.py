"""``llm-latency-exporter bench``: a bounded load run against one endpoint, as before and after
a change. Same request path and stream reader as the probes (exporter/probing/), so a
bench number and a probe number mean the same thing.

Output: a summary table on stdout, a live progress bar on stderr when it is a terminal,
``--json FILE`` with the summary and one record per request, and ``--compare BASELINE.json``
with each metric's change and a non-zero exit past ``--max-regression``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import sys
from pathlib import Path

from exporter.bench.compare import (
    check_same_load,
    compare,
    differences,
    load_baseline,
    render_compare,
)
from exporter.bench.config import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_REQUESTS,
    BenchError,
    config_from_args,
)
from exporter.bench.datasets import DATASETS
from exporter.bench.models import discover_model
from exporter.bench.runner import Progress, run_bench
from exporter.bench.summary import render_summary, report, summarize
from exporter.commands import AddParser
from exporter.config.models import SloConfig

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_NOTHING_OK = 3

EXAMPLES = """examples:
  # 200 requests, 8 at a time, 512-token prompts, 128-token answers
  llm-latency-exporter bench --url http://127.0.0.1:8000 --model m \\
      --requests 200 --concurrency 8 --prompt-tokens 512 --max-tokens 128 --json before.json

  # one minute of Poisson arrivals at 4 req/s, prompt and answer lengths uniform in a range
  llm-latency-exporter bench --url http://127.0.0.1:8000/v1/chat/completions --model m \\
      --duration 60s --rate 4 --prompt-tokens 256-2048 --max-tokens 64-256

  # your own prompts (JSONL, one {"prompt": "...", "max_tokens": 128} per line)
  llm-latency-exporter bench --url https://llm.example.com --model m --api-key-env API_KEY \\
      --prompts prompts.jsonl --requests 100 --concurrency 4

  # no --model: the one model GET /v1/models lists; ShareGPT prompts and reply lengths
  llm-latency-exporter bench --url http://127.0.0.1:8000 --requests 200 --concurrency 8 \\
      --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json

  # synthetic prompts by name, and the percentiles to report
  llm-latency-exporter bench --url http://127.0.0.1:8000 --model m --dataset-name random \\
      --prompt-tokens 1024 --percentiles 50,90,99,99.9

  # after the change: fail (exit 1) if a p50/p95 latency or a throughput got 20% worse
  llm-latency-exporter bench --url http://127.0.0.1:8000 --model m --requests 200 \\
      --concurrency 8 --prompt-tokens 512 --max-tokens 128 --json after.json \\
      --compare before.json --max-regression 0.2

  (--compare refuses a baseline run at another --concurrency or --rate unless
  --allow-different-load)

exit status: 0 done; 1 --compare found a regression past --max-regression;
             2 bad flags or inputs; 3 no request succeeded
"""


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
        baseline = load_baseline(cfg.compare_path) if cfg.compare_path else None
        if baseline is not None and not cfg.allow_different_load:
            assert cfg.compare_path is not None
            check_same_load(cfg.compare_path, baseline.get("config", {}), cfg.describe())
        if cfg.json_path is not None:
            _check_writable(cfg.json_path)
        if cfg.model is None:
            # Last, so a bad flag is reported without a network round trip.
            model = discover_model(cfg.url, cfg.api_key, cfg.ca_file, cfg.timeouts.connect)
            cfg = dataclasses.replace(cfg, model=model)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    progress = Progress(cfg, sys.stderr)
    # Everything imported so far (pydantic, aiohttp) is long-lived: freezing it keeps a full
    # collection during the run from scanning it, a pause of ~15 ms that would otherwise
    # land in some request's inter-token gaps.
    gc.collect()
    gc.freeze()
    try:
        run = asyncio.run(run_bench(cfg, progress))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    summary = summarize(run.records, run.duration, cfg.slo_ttft, cfg.slo_tpot, cfg.percentiles)
    print(render_summary(cfg, summary))
    if cfg.json_path is not None:
        doc = report(cfg, run, summary)
        Path(cfg.json_path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {cfg.json_path}")
    if baseline is not None:
        assert cfg.compare_path is not None
        changes = compare(
            baseline["summary"], summary, cfg.max_regression, cfg.regression_floor,
            cfg.percentiles,
        )
        print()
        print(differences(baseline.get("config", {}), cfg.describe()), end="")
        print(render_compare(changes, cfg.compare_path, cfg.max_regression))
        return EXIT_REGRESSION if any(c.regression for c in changes) else EXIT_OK
    return EXIT_OK if summary["ok"] else EXIT_NOTHING_OK


def _check_writable(path: str) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise BenchError(f"--json {path}: directory {parent} is not writable")




def register(add: AddParser) -> None:
    p = add(
        "bench",
        cmd_bench,
        "bounded load run against one endpoint: TTFT/TPOT/ITL/E2E percentiles, throughput, "
        "goodput; --compare against a saved run",
        EXAMPLES,
    )
    # Values are parsed here, not by argparse types, so every bad value is one line, exit 2.
    p.add_argument("--url", help="endpoint URL, or a base URL to which the API path is added")
    p.add_argument("--model", help="served model name (default: the one model GET /v1/models "
                   "lists; an error if it lists none or several)")
    p.add_argument("--api", choices=("chat", "completions"), default="chat",
                   help="API (default: %(default)s)")
    p.add_argument("--api-key-env", metavar="NAME",
                   help="environment variable holding the API key (never a flag: ps shows flags)")
    p.add_argument("--ca-file", metavar="PEM", help="CA bundle for an https endpoint")
    size = p.add_argument_group("how much (one of)")
    size.add_argument("--requests", metavar="N", help=f"request count (default {DEFAULT_REQUESTS})")
    size.add_argument("--duration", metavar="DURATION",
                      help="issue requests for this long, e.g. 60s (in-flight ones finish)")
    load = p.add_argument_group("load (one of)")
    load.add_argument("--concurrency", metavar="C", help="requests in flight (default 1)")
    load.add_argument("--rate", metavar="R", help="Poisson arrivals, requests per second")
    shape = p.add_argument_group("request shape (N, or LO-HI for uniform)")
    shape.add_argument("--max-tokens", metavar="T",
                       help=f"output length limit (default {DEFAULT_MAX_TOKENS}; with "
                       "--dataset-name sharegpt, each reply's estimated length)")
    shape.add_argument("--prompt-tokens", default="256", metavar="N",
                       help="synthetic prompt length in tokens, approximate (default %(default)s)")
    shape.add_argument("--prompts", metavar="FILE.jsonl",
                       help='prompts, one {"prompt": "...", "max_tokens": N} per line, '
                       "used in order and sent as they are")
    shape.add_argument("--dataset-name", metavar="NAME",
                       help=f"where prompts come from, as vllm bench serve: {', '.join(DATASETS)}"
                       " (default random: synthetic prompts of --prompt-tokens)")
    shape.add_argument("--dataset-path", metavar="FILE",
                       help="the dataset file: ShareGPT JSON for sharegpt, JSONL for jsonl")
    shape.add_argument("--ignore-eos", action="store_true",
                       help="ask the server to generate max_tokens (vLLM/SGLang ignore_eos)")
    shape.add_argument("--seed", default="0", help="seed for lengths and filler words")
    lim = p.add_argument_group("timeouts and SLO")
    lim.add_argument("--timeout-connect", default="10s", metavar="D",
                     help="to get a connection (default %(default)s)")
    lim.add_argument("--timeout-first-token", default="60s", metavar="D",
                     help="to the first token, from the request's start (default %(default)s)")
    lim.add_argument("--timeout-total", default="300s", metavar="D",
                     help="to the end of the stream (default %(default)s)")
    defaults = SloConfig()
    lim.add_argument("--slo-ttft", default=f"{defaults.ttft_p95_seconds:g}s", metavar="D",
                     help="goodput: TTFT at most this (default %(default)s)")
    lim.add_argument("--slo-tpot", default=f"{defaults.tpot_p95_seconds * 1000:g}ms",
                     metavar="D", help="goodput: TPOT at most this (default %(default)s)")
    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write the summary and every request")
    out.add_argument("--compare", metavar="BASELINE.json", help="compare with a saved --json run")
    out.add_argument("--allow-different-load", action="store_true",
                     help="--compare even when the baseline ran at another concurrency or rate")
    out.add_argument("--percentiles", metavar="LIST",
                     help="reported percentiles, e.g. 50,90,99,99.9 (default 50,90,95,99)")
    out.add_argument("--max-regression", default="0.2", metavar="RATIO",
                     help="--compare exits 1 past this relative change (default %(default)s)")
    out.add_argument("--regression-floor", default="1ms", metavar="D",
                     help="latency changes smaller than this never count (default %(default)s)")
