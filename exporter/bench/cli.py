"""``llm-latency-exporter bench``: a bounded load run against one endpoint, as before and after
a change. Same request path and stream reader as the probes (exporter/probing/client.py), so a
bench number and a probe number mean the same thing.

Output: a summary table on stdout, a live progress bar on stderr when it is a terminal,
``--json FILE`` with the summary and one record per request, and ``--compare BASELINE.json``
with each metric's change and a non-zero exit past ``--max-regression``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import math
import os
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from exporter import __version__
from exporter.config.models import SloConfig
from exporter.config.values import parse_duration
from exporter.probing.client import (
    Api,
    Client,
    RequestResult,
    RequestSpec,
    Timeouts,
    endpoint_url,
    target_of,
)
from exporter.probing.prompts import sized_prompt
from exporter.probing.stream import Outcome

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_NOTHING_OK = 3

FORMAT = "llm-latency-exporter-bench/1"
DEFAULT_REQUESTS = 50
#: A safety cap only: ~250 bytes per streamed token leaves room for 200k-token answers.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
LATENCIES = ("ttft_s", "ttfc_s", "tpot_s", "itl_s", "e2e_s")
PERCENTILES = (50, 90, 95, 99)
#: Percentiles --compare gates on: the median and the tail. p90/p99 of a short run move
#: too much between identical runs to fail a build on.
GATED_PERCENTILES = ("p50", "p95")

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

  # after the change: fail (exit 1) if a p50/p95 latency or a throughput got 20% worse
  llm-latency-exporter bench --url http://127.0.0.1:8000 --model m --requests 200 \\
      --concurrency 8 --prompt-tokens 512 --max-tokens 128 --json after.json \\
      --compare before.json --max-regression 0.2

exit status: 0 done; 1 --compare found a regression past --max-regression;
             2 bad flags or inputs; 3 no request succeeded
"""


class BenchError(Exception):
    """A bad flag or input: one line for the user, exit 2."""


# --- inputs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Lengths:
    """A token count: fixed ``N`` or uniform over ``LO-HI`` (inclusive)."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, flag: str, text: str, limit: int) -> Lengths:
        parts = text.strip().split("-")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            nums = []
        if len(nums) not in (1, 2) or any(not 1 <= n <= limit for n in nums) or nums[0] > nums[-1]:
            raise BenchError(
                f"{flag}: expected N or LO-HI with 1 <= LO <= HI <= {limit}, got {text!r}"
            )
        return cls(nums[0], nums[-1])

    def sample(self, rng: random.Random) -> int:
        return self.lo if self.lo == self.hi else rng.randint(self.lo, self.hi)

    def __str__(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


@dataclass(frozen=True)
class FilePrompt:
    prompt: str
    max_tokens: int | None


def load_prompts(path: str) -> list[FilePrompt]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BenchError(f"--prompts {path}: cannot read: {why}") from None
    prompts: list[FilePrompt] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise BenchError(f"--prompts {path} line {n}: not a JSON object") from None
        prompt = obj.get("prompt") if isinstance(obj, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise BenchError(f'--prompts {path} line {n}: expected {{"prompt": "..."}}')
        max_tokens = obj.get("max_tokens")
        if max_tokens is not None and (
            not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
        ):
            raise BenchError(f"--prompts {path} line {n}: max_tokens must be a positive integer")
        prompts.append(FilePrompt(prompt, max_tokens))
    if not prompts:
        raise BenchError(f"--prompts {path}: no prompts in the file")
    return prompts


@dataclass
class BenchConfig:
    url: str
    model: str
    api: Api
    requests: int | None
    duration: float | None
    concurrency: int | None
    rate: float | None
    max_tokens: Lengths
    prompt_tokens: Lengths
    prompts: list[FilePrompt] | None
    prompts_path: str | None
    timeouts: Timeouts
    slo_ttft: float
    slo_tpot: float
    seed: int
    ignore_eos: bool
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    ca_file: str | None = None
    json_path: str | None = None
    compare_path: str | None = None
    max_regression: float = 0.2
    regression_floor: float = 0.001

    def describe(self) -> dict[str, Any]:
        """The run's settings for the JSON file (no key, no credentials in the URL)."""
        parts = urlsplit(self.url)
        return {
            "url": parts._replace(netloc=target_of(self.url)).geturl(),
            "model": self.model,
            "api": self.api,
            "requests": self.requests,
            "duration_s": self.duration,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "max_tokens": str(self.max_tokens),
            "prompt_tokens": None if self.prompts else str(self.prompt_tokens),
            "prompts": self.prompts_path,
            "timeouts_s": {
                "connect": self.timeouts.connect,
                "first_token": self.timeouts.first_token,
                "total": self.timeouts.total,
            },
            "slo_s": {"ttft": self.slo_ttft, "tpot": self.slo_tpot},
            "seed": self.seed,
            "ignore_eos": self.ignore_eos,
        }


def _positive_int(flag: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise BenchError(f"{flag}: expected a positive integer, got {text!r}")
    return value


def _positive_float(flag: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise BenchError(f"{flag}: expected a positive number, got {text!r}")
    return value


def _duration(flag: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError:
        raise BenchError(f"{flag}: expected a duration like 60s or 500ms, got {text!r}") from None


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """Validate the flags into a BenchConfig, or raise BenchError naming the first bad one."""
    if not args.url:
        raise BenchError("--url is required (the endpoint, e.g. http://127.0.0.1:8000)")
    parts = urlsplit(args.url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError(f"--url: expected an http:// or https:// URL, got {args.url!r}")
    if not args.model:
        raise BenchError("--model is required (the served model name)")
    if args.requests is not None and args.duration is not None:
        raise BenchError("give --requests or --duration, not both")
    if args.concurrency is not None and args.rate is not None:
        raise BenchError("give --concurrency or --rate, not both")
    requests = _positive_int("--requests", args.requests)
    duration = _duration("--duration", args.duration) if args.duration is not None else None
    if requests is None and duration is None:
        requests = DEFAULT_REQUESTS
    rate = _positive_float("--rate", args.rate)
    concurrency = _positive_int("--concurrency", args.concurrency)
    if rate is None and concurrency is None:
        concurrency = 1
    if concurrency is not None and concurrency > 4096:
        raise BenchError(f"--concurrency: at most 4096, got {concurrency}")
    max_regression = _positive_float("--max-regression", args.max_regression)
    assert max_regression is not None
    api_key = None
    if args.api_key_env is not None:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise BenchError(f"--api-key-env: environment variable {args.api_key_env} is not set")
    if args.ca_file is not None and not Path(args.ca_file).is_file():
        raise BenchError(f"--ca-file: {args.ca_file} does not exist")
    if args.compare is not None and not Path(args.compare).is_file():
        raise BenchError(f"--compare: {args.compare} does not exist")
    prompts = load_prompts(args.prompts) if args.prompts is not None else None
    return BenchConfig(
        url=endpoint_url(args.url, args.api),
        model=args.model,
        api=args.api,
        requests=requests,
        duration=duration,
        concurrency=concurrency,
        rate=rate,
        max_tokens=Lengths.parse("--max-tokens", args.max_tokens, 1_000_000),
        prompt_tokens=Lengths.parse("--prompt-tokens", args.prompt_tokens, 10_000_000),
        prompts=prompts,
        prompts_path=args.prompts,
        timeouts=Timeouts(
            connect=_duration("--timeout-connect", args.timeout_connect),
            first_token=_duration("--timeout-first-token", args.timeout_first_token),
            total=_duration("--timeout-total", args.timeout_total),
        ),
        slo_ttft=_duration("--slo-ttft", args.slo_ttft),
        slo_tpot=_duration("--slo-tpot", args.slo_tpot),
        seed=_seed(args.seed),
        ignore_eos=args.ignore_eos,
        api_key=api_key,
        api_key_env=args.api_key_env,
        ca_file=args.ca_file,
        json_path=args.json,
        compare_path=args.compare,
        max_regression=max_regression,
        regression_floor=_duration("--regression-floor", args.regression_floor),
    )


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BenchError(f"--seed: expected an integer, got {text!r}") from None


# --- the run ----------------------------------------------------------------------------


class Progress:
    """One redrawn status line on a terminal; silent otherwise (logs and pipes stay clean)."""

    def __init__(self, cfg: BenchConfig, out: TextIO) -> None:
        self._cfg = cfg
        self._out = out
        self._enabled = out.isatty()
        self._drawn = 0.0
        self.done = 0
        self.failed = 0

    def update(self, ok: bool, origin: float) -> None:
        self.done += 1
        self.failed += 0 if ok else 1
        now = time.monotonic()
        if self._enabled and now - self._drawn >= 0.1:
            self._drawn = now
            self._draw(now - origin)

    def _draw(self, elapsed: float) -> None:
        cfg, width = self._cfg, 30
        if cfg.requests is not None:
            frac, count = self.done / cfg.requests, f"{self.done}/{cfg.requests}"
        else:
            assert cfg.duration is not None
            frac, count = min(elapsed / cfg.duration, 1.0), f"{self.done}"
        bar = "#" * int(frac * width)
        rate = self.done / elapsed if elapsed > 0 else 0.0
        self._out.write(
            f"\r[{bar:<{width}}] {count} requests  {self.failed} failed  "
            f"{rate:.1f} req/s  {elapsed:.1f}s "
        )
        self._out.flush()

    def finish(self) -> None:
        if self._enabled:
            self._out.write("\n")
            self._out.flush()


class RequestSource:
    """The i-th request of the run: prompts from the file in order, or synthetic ones."""

    def __init__(self, cfg: BenchConfig, run_id: str) -> None:
        self._cfg = cfg
        self._run_id = run_id
        self._rng = random.Random(cfg.seed)

    def spec(self, i: int) -> RequestSpec:
        cfg = self._cfg
        if cfg.prompts:
            item = cfg.prompts[i % len(cfg.prompts)]
            prompt = item.prompt
            max_tokens = item.max_tokens or cfg.max_tokens.sample(self._rng)
        else:
            # The run id in front keeps this run's prompts out of an earlier run's cache.
            unique = f"{self._run_id}-{i}"
            prompt = sized_prompt(cfg.prompt_tokens.sample(self._rng), unique, self._rng)
            max_tokens = cfg.max_tokens.sample(self._rng)
        extra: tuple[tuple[str, Any], ...] = (("ignore_eos", True),) if cfg.ignore_eos else ()
        return RequestSpec(
            url=cfg.url,
            api=cfg.api,
            model=cfg.model,
            prompt=prompt,
            max_tokens=max_tokens,
            api_key=cfg.api_key,
            # Lets engine logs be matched with records (vLLM honours X-Request-Id).
            headers=(("X-Request-Id", f"bench-{self._run_id}-{i}"),),
            extra_body=extra,
        )


def to_record(i: int, max_tokens: int, res: RequestResult, origin: float) -> dict[str, Any]:
    """One request as stored in --json: times in seconds; start_s is when the request was
    written on its connection (relative to the run's start); TTFT/E2E count from there."""
    s = res.stream
    start = res.started_at if res.started_at is not None else res.issued_at
    return {
        "id": i,
        "start_s": start - origin,
        "setup_s": start - res.issued_at,
        "connection": res.connection,
        "outcome": res.outcome.value,
        "status": res.status,
        "detail": res.detail,
        "ttft_s": s.ttft if s else None,
        "ttfc_s": s.ttfc if s else None,
        "tpot_s": s.tpot if s else None,
        "itl_s": s.itl if s else [],
        "e2e_s": s.e2e if s else None,
        "output_tokens": s.output_tokens if s else None,
        "output_tokens_estimated": s.tokens_estimated if s else None,
        "prompt_tokens": s.prompt_tokens if s else None,
        "cached_tokens": s.cached_tokens if s else None,
        "max_tokens": max_tokens,
    }


@dataclass
class RunResult:
    records: list[dict[str, Any]]
    duration: float
    origin: float
    run_id: str
    started_at: str


async def run_bench(cfg: BenchConfig, progress: Progress) -> RunResult:
    run_id = uuid.uuid4().hex[:12]
    source = RequestSource(cfg, run_id)
    arrivals = random.Random(cfg.seed + 1)
    client = Client(
        limit=cfg.concurrency or 0,  # rate mode: no client-side queue hiding server latency
        max_response_bytes=MAX_RESPONSE_BYTES,
        ca_file=cfg.ca_file,
    )
    records: list[dict[str, Any]] = []
    issued = 0
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    origin = time.monotonic()

    def take() -> int | None:
        nonlocal issued
        if cfg.requests is not None and issued >= cfg.requests:
            return None
        if cfg.duration is not None and time.monotonic() - origin >= cfg.duration:
            return None
        issued += 1
        return issued - 1

    async def one(i: int) -> None:
        spec = source.spec(i)
        res = await client.send(spec, cfg.timeouts)
        records.append(to_record(i, spec.max_tokens, res, origin))
        progress.update(res.ok, origin)

    try:
        if cfg.concurrency is not None:

            async def worker() -> None:
                while (i := take()) is not None:
                    await one(i)

            await asyncio.gather(*(worker() for _ in range(cfg.concurrency)))
        else:
            assert cfg.rate is not None
            tasks: list[asyncio.Task[None]] = []
            next_at = origin
            while True:
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                i = take()
                if i is None:
                    break
                tasks.append(asyncio.create_task(one(i)))
                next_at += arrivals.expovariate(cfg.rate)
            await asyncio.gather(*tasks)
    finally:
        await client.close()
        progress.finish()
    records.sort(key=lambda r: r["id"])
    return RunResult(records, time.monotonic() - origin, origin, run_id, started_at)


# --- summary ----------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def distribution(values: list[float]) -> dict[str, float | int] | None:
    if not values:
        return None
    ordered = sorted(values)
    out: dict[str, float | int] = {"count": len(ordered), "mean": sum(ordered) / len(ordered)}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(ordered, q)
    out["max"] = ordered[-1]
    return out


def summarize(
    records: list[dict[str, Any]], duration: float, slo_ttft: float, slo_tpot: float
) -> dict[str, Any]:
    """Percentiles over ok requests (ITL pooled over all their gaps); goodput over all."""
    ok = [r for r in records if r["outcome"] == Outcome.OK.value]
    outcomes = Counter(r["outcome"] for r in records)
    latency: dict[str, Any] = {}
    for key in LATENCIES:
        if key == "itl_s":
            values = [g for r in ok for g in r["itl_s"]]
        else:
            values = [r[key] for r in ok if r[key] is not None]
        latency[key] = distribution(values)
    good = sum(
        1
        for r in ok
        if r["ttft_s"] <= slo_ttft and (r["tpot_s"] is None or r["tpot_s"] <= slo_tpot)
    )
    out_tokens = sum(r["output_tokens"] or 0 for r in ok)
    prompt_counts = [r["prompt_tokens"] for r in ok if r["prompt_tokens"] is not None]
    per_s = (lambda n: n / duration) if duration > 0 else (lambda n: 0.0)
    return {
        "duration_s": duration,
        "requests": len(records),
        "ok": len(ok),
        "success_ratio": len(ok) / len(records) if records else 0.0,
        "outcomes": {o.value: outcomes[o.value] for o in Outcome if outcomes[o.value]},
        "request_throughput": per_s(len(ok)),
        "output_token_throughput": per_s(out_tokens),
        "input_token_throughput": per_s(sum(prompt_counts)) if prompt_counts else None,
        "output_tokens": out_tokens,
        "output_tokens_estimated": any(r["output_tokens_estimated"] for r in ok),
        "goodput": {
            "good": good,
            "ratio": good / len(records) if records else 0.0,
            "per_s": per_s(good),
            "slo_s": {"ttft": slo_ttft, "tpot": slo_tpot},
        },
        "latency": latency,
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def render_summary(cfg: BenchConfig, summary: dict[str, Any]) -> str:
    mode = (
        f"concurrency {cfg.concurrency}" if cfg.concurrency is not None else f"rate {cfg.rate:g}/s"
    )
    lines = [
        f"bench: {summary['requests']} requests to {target_of(cfg.url)} ({cfg.api}, model "
        f"{cfg.model}), {mode}, {summary['duration_s']:.2f}s",
        "",
        f"{'latency (ms)':<14}{'mean':>10}{'p50':>10}{'p90':>10}{'p95':>10}{'p99':>10}"
        f"{'max':>10}{'n':>8}",
    ]
    names = {"ttft_s": "ttft", "ttfc_s": "ttfc", "tpot_s": "tpot", "itl_s": "itl",
             "e2e_s": "e2e"}
    for key, name in names.items():
        d = summary["latency"][key]
        if d is None:
            lines.append(f"{name:<14}{'-':>10}")
            continue
        cells = "".join(f"{_ms(d[k]):>10}" for k in ("mean", "p50", "p90", "p95", "p99", "max"))
        lines.append(f"{name:<14}{cells}{d['count']:>8}")
    tput = (
        f"{summary['request_throughput']:.2f} req/s  "
        f"{summary['output_token_throughput']:.1f} output tok/s"
    )
    if summary["input_token_throughput"] is not None:
        tput += f"  {summary['input_token_throughput']:.1f} input tok/s"
    g = summary["goodput"]
    outcomes = ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items()) or "none"
    lines += [
        "",
        f"{'throughput':<14}{tput}",
        f"{'goodput':<14}{g['per_s']:.2f} req/s, {g['ratio']:.1%} of requests within SLO "
        f"(ttft <= {g['slo_s']['ttft'] * 1000:g} ms, tpot <= {g['slo_s']['tpot'] * 1000:g} ms)",
        f"{'outcomes':<14}{outcomes}",
    ]
    if summary["output_tokens_estimated"]:
        lines.append(
            "note: the server sent no usage, so output tokens (and TPOT) count chunks, not tokens"
        )
    return "\n".join(lines)


# --- compare ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    metric: str
    baseline: float | None
    current: float | None
    higher_is_worse: bool
    gated: bool
    regression: bool

    @property
    def change(self) -> float | None:
        if self.baseline is None or self.current is None or self.baseline == 0:
            return None
        return (self.current - self.baseline) / self.baseline


def _metric_rows(summary: dict[str, Any]) -> list[tuple[str, float | None, bool, bool]]:
    """(name, value, higher_is_worse, gated) for every compared metric."""
    rows: list[tuple[str, float | None, bool, bool]] = []
    for key in LATENCIES:
        d = summary.get("latency", {}).get(key)
        for p in ("p50", "p90", "p95", "p99"):
            rows.append((f"{key[:-2]} {p}", d.get(p) if d else None, True,
                         p in GATED_PERCENTILES))
    goodput = summary.get("goodput") or {}
    rows += [
        ("request throughput", summary.get("request_throughput"), False, True),
        ("output token throughput", summary.get("output_token_throughput"), False, True),
        ("goodput ratio", goodput.get("ratio"), False, True),
        ("success ratio", summary.get("success_ratio"), False, True),
    ]
    return rows


def compare(
    baseline: dict[str, Any], current: dict[str, Any], max_regression: float, floor: float
) -> list[Change]:
    """Each metric's change; a gated one regresses past ``max_regression`` (relative), and a
    latency must also have moved by more than ``floor`` seconds (sub-millisecond jitter on a
    fast metric is not a regression)."""
    base = {name: value for name, value, _, _ in _metric_rows(baseline)}
    out: list[Change] = []
    for name, value, worse_up, gated in _metric_rows(current):
        b = base.get(name)
        regression = False
        if gated and b is not None and value is not None and b > 0:
            rel = (value - b) / b
            if worse_up:
                regression = rel > max_regression and value - b > floor
            else:
                regression = -rel > max_regression
        out.append(Change(name, b, value, worse_up, gated, regression))
    return out


def render_compare(changes: list[Change], path: str, max_regression: float) -> str:
    lines = [
        f"compared with {path} (gated: p50/p95 latencies, throughput, goodput, success; "
        f"max regression {max_regression:.0%})",
        f"{'metric':<26}{'baseline':>12}{'current':>12}{'change':>10}",
    ]
    for c in changes:
        latency = c.higher_is_worse
        fmt: Callable[[float | None], str] = (
            (lambda v: _ms(v) + " ms") if latency else (lambda v: "-" if v is None else f"{v:.3f}")
        )
        change = "-" if c.change is None else f"{c.change:+.1%}"
        flag = "  REGRESSION" if c.regression else ("" if c.gated else "  (not gated)")
        lines.append(f"{c.metric:<26}{fmt(c.baseline):>12}{fmt(c.current):>12}{change:>10}{flag}")
    bad = [c.metric for c in changes if c.regression]
    lines.append(
        f"regressions past {max_regression:.0%}: {', '.join(bad)}" if bad else "no regression"
    )
    return "\n".join(lines)


def load_baseline(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchError(f"--compare {path}: cannot read a bench JSON file: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BenchError(f"--compare {path}: not a bench --json file (format {FORMAT})")
    summary = data.get("summary")
    if not isinstance(summary, dict):
        raise BenchError(f"--compare {path}: no summary in the file")
    return data


# --- command ----------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
        baseline = load_baseline(cfg.compare_path) if cfg.compare_path else None
        if cfg.json_path is not None:
            _check_writable(cfg.json_path)
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
    summary = summarize(run.records, run.duration, cfg.slo_ttft, cfg.slo_tpot)
    print(render_summary(cfg, summary))
    if cfg.json_path is not None:
        doc = {
            "format": FORMAT,
            "version": __version__,
            "run_id": run.run_id,
            "started_at": run.started_at,
            # start_s values are relative to this CLOCK_MONOTONIC reading, so records can be
            # lined up with anything else on the host that stamps the same clock.
            "origin_monotonic_s": run.origin,
            "config": cfg.describe(),
            "summary": summary,
            "requests": run.records,
        }
        Path(cfg.json_path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {cfg.json_path}")
    if baseline is not None:
        assert cfg.compare_path is not None
        changes = compare(
            baseline["summary"], summary, cfg.max_regression, cfg.regression_floor
        )
        print()
        print(_differences(baseline.get("config", {}), cfg.describe()), end="")
        print(render_compare(changes, cfg.compare_path, cfg.max_regression))
        return EXIT_REGRESSION if any(c.regression for c in changes) else EXIT_OK
    return EXIT_OK if summary["ok"] else EXIT_NOTHING_OK


def _differences(base: dict[str, Any], cur: dict[str, Any]) -> str:
    keys = ("url", "model", "api", "concurrency", "rate", "max_tokens", "prompt_tokens",
            "prompts")
    diffs = [f"{k} {base.get(k)!r} -> {cur.get(k)!r}" for k in keys if base.get(k) != cur.get(k)]
    return f"note: the runs differ in {'; '.join(diffs)}\n" if diffs else ""


def _check_writable(path: str) -> None:
    parent = Path(path).resolve().parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise BenchError(f"--json {path}: directory {parent} is not writable")


Command = Callable[[argparse.Namespace], int]
AddParser = Callable[[str, Command, str, str], argparse.ArgumentParser]


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
    p.add_argument("--model", help="served model name")
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
    shape.add_argument("--max-tokens", default="128", metavar="T",
                       help="output length limit (default %(default)s)")
    shape.add_argument("--prompt-tokens", default="256", metavar="N",
                       help="synthetic prompt length in tokens, approximate (default %(default)s)")
    shape.add_argument("--prompts", metavar="FILE.jsonl",
                       help='prompts, one {"prompt": "...", "max_tokens": N} per line, '
                       "used in order and sent as they are")
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
    out.add_argument("--max-regression", default="0.2", metavar="RATIO",
                     help="--compare exits 1 past this relative change (default %(default)s)")
    out.add_argument("--regression-floor", default="1ms", metavar="D",
                     help="latency changes smaller than this never count (default %(default)s)")
