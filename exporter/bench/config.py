"""bench's settings: the flags and the ``--prompts`` file, validated into one BenchConfig.
Every bad value is a BenchError with one line for the user (exit 2), raised before any
request is sent.
"""

from __future__ import annotations

import argparse
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from exporter import redact
from exporter.bench.datasets import FilePrompt, load_dataset
from exporter.bench.errors import BenchError as BenchError
from exporter.config.values import parse_duration
from exporter.probing.request import Api, Timeouts, endpoint_url, target_of

DEFAULT_REQUESTS = 50
DEFAULT_MAX_TOKENS = "128"
#: The percentiles reported without --percentiles (their JSON keys p50..p99 are stable).
DEFAULT_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)


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


@dataclass
class BenchConfig:
    url: str
    #: None until cli.py asks the server (--model omitted).
    model: str | None
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
    dataset: str = "random"
    dataset_skipped: int = 0
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    allow_different_load: bool = False

    def describe(self) -> dict[str, Any]:
        """The run's settings for the JSON file (no key, no credentials or query values in the
        URL)."""
        parts = urlsplit(self.url)
        return {
            "url": redact.url(parts._replace(netloc=target_of(self.url)).geturl()),
            "model": self.model,
            "api": self.api,
            "requests": self.requests,
            "duration_s": self.duration,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "max_tokens": str(self.max_tokens),
            "prompt_tokens": None if self.prompts else str(self.prompt_tokens),
            "prompts": self.prompts_path,
            "dataset": self.dataset,
            "percentiles": list(self.percentiles),
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
    try:
        parts = urlsplit(args.url)
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError(f"--url: expected an http:// or https:// URL, got "
                         f"{redact.url(args.url)!r}")
    redact.remember_url(args.url)
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
        redact.remember([api_key])  # a server may echo it back into an error
    if args.ca_file is not None and not Path(args.ca_file).is_file():
        raise BenchError(f"--ca-file: {args.ca_file} does not exist")
    if args.compare is not None and not Path(args.compare).is_file():
        raise BenchError(f"--compare: {args.compare} does not exist")
    fixed_max_tokens = args.max_tokens is not None
    dataset, dataset_path, data = load_dataset(
        args.dataset_name, args.dataset_path, args.prompts, fixed_max_tokens
    )
    return BenchConfig(
        url=endpoint_url(args.url, args.api),
        model=args.model or None,
        api=args.api,
        requests=requests,
        duration=duration,
        concurrency=concurrency,
        rate=rate,
        max_tokens=Lengths.parse(
            "--max-tokens", args.max_tokens or DEFAULT_MAX_TOKENS, 1_000_000
        ),
        prompt_tokens=Lengths.parse("--prompt-tokens", args.prompt_tokens, 10_000_000),
        prompts=data.prompts if data is not None else None,
        prompts_path=dataset_path,
        dataset=dataset,
        dataset_skipped=data.skipped if data is not None else 0,
        percentiles=parse_percentiles(args.percentiles),
        allow_different_load=args.allow_different_load,
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


def parse_percentiles(text: str | None) -> tuple[float, ...]:
    """``50,90,99,99.9`` -> sorted, distinct percentiles, each strictly between 0 and 100
    (p0 and p100 are min and max, which the table shows anyway)."""
    if text is None:
        return DEFAULT_PERCENTILES
    values: set[float] = set()
    for part in text.split(","):
        try:
            q = float(part)
        except ValueError:
            q = math.nan
        if not 0 < q < 100:
            raise BenchError(
                f"--percentiles: expected numbers between 0 and 100 (exclusive) separated by "
                f"commas, like 50,90,99,99.9; got {text!r}"
            )
        values.add(q)
    return tuple(sorted(values))


def percentile_key(q: float) -> str:
    """The JSON key of a percentile: p50, p99, p99.9 (``:g`` keeps the defaults' keys)."""
    return f"p{q:g}"
