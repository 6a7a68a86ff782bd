"""``llm-latency-exporter simulate``: start the engine simulator."""

from __future__ import annotations

import argparse
import asyncio
import errno
import signal
import sys
import textwrap

from exporter.checks.engine.table import FORMATS
from exporter.commands import AddParser
from exporter.simulator.engine_config import EngineConfig
from exporter.simulator.faults import DESCRIPTIONS, FaultError, Faults, parse_assignments
from exporter.simulator.server import serve
from exporter.simulator.state import DEFAULT_MODEL, Settings

EXIT_USAGE = 2

_defaults = EngineConfig()
_fault_defaults = Faults().as_dict()

EPILOG = (
    """examples:
  llm-latency-exporter simulate --port 8000 --format vllm
  llm-latency-exporter simulate --format sglang --model qwen3-8b --dp-ranks 2
  llm-latency-exporter simulate --format triton --port 8000          # metrics on :8002
  llm-latency-exporter simulate --max-num-seqs 4 --fault slow_first_token=1.5 \\
      --fault error_rate=0.05 --fault keep_alive=0.5

  curl -s localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"model": "MODEL", "stream": true, "max_tokens": 16,
           "stream_options": {"include_usage": true},
           "messages": [{"role": "user", "content": "hello"}]}'
  curl -s localhost:8000/admin/faults -d '{"stall": 2.0, "mid_stream_after": 8}'
  curl -s localhost:8000/admin/config -d '{"max_num_seqs": 2}'

faults (--fault KEY=VALUE, or POST /admin/faults at run time):
""".replace("MODEL", DEFAULT_MODEL)
    + "\n".join(
        textwrap.fill(
            f"{desc} (default {_fault_defaults[name]})",
            width=79,
            initial_indent=f"  {name:<18} ",
            subsequent_indent=" " * 21,
        )
        for name, desc in DESCRIPTIONS.items()
    )
    + """

This is a simulator for trying the stack, not an inference engine: it writes plain words and
its latencies come from a queueing and batching model (docs/simulator.md).
"""
)



def register(add: AddParser) -> None:
    p = add(
        "simulate",
        cmd_simulate,
        "run the engine simulator (OpenAI API + engine metrics) for trying the stack",
        EPILOG,
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="API port (default: %(default)s)")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="triton format: metrics port (default: --port + 2, like Triton's 8002)")
    p.add_argument("--format", choices=FORMATS, default="vllm",
                   help="engine whose metrics to imitate (default: %(default)s)")
    p.add_argument("--model", action="append", default=None, metavar="NAME",
                   help=f"served model name; repeat for several (default: {DEFAULT_MODEL})")
    p.add_argument("--dp-ranks", type=int, default=1,
                   help="data-parallel engines per model (vllm, sglang formats)")
    p.add_argument("--seed", type=int, default=0, help="seed for faults and generated text")
    g = p.add_argument_group("engine model")
    g.add_argument("--max-num-seqs", type=int, default=_defaults.max_num_seqs,
                   help="most sequences in the running batch (default: %(default)s)")
    g.add_argument("--kv-tokens", type=int, default=_defaults.kv_tokens,
                   help="KV-cache capacity in tokens; also the max model length "
                   "(default: %(default)s)")
    g.add_argument("--block-size", type=int, default=_defaults.block_size,
                   help="KV block size in tokens (default: %(default)s)")
    g.add_argument("--max-num-batched-tokens", type=int,
                   default=_defaults.max_num_batched_tokens,
                   help="tokens per step, prefill chunks included (default: %(default)s)")
    g.add_argument("--prefill-tps", type=float, default=_defaults.prefill_tps,
                   help="prefill throughput, tokens/s (default: %(default)s)")
    g.add_argument("--decode-step-ms", type=float, default=_defaults.decode_step * 1000,
                   help="fixed time of one engine step (default: %(default)s)")
    g.add_argument("--decode-step-per-seq-ms", type=float,
                   default=_defaults.decode_step_per_seq * 1000,
                   help="added step time per decoding sequence (default: %(default)s)")
    g.add_argument("--output-len", type=int, default=_defaults.output_len,
                   help="mean natural answer length in tokens (default: %(default)s)")
    g.add_argument("--no-prefix-caching", action="store_true",
                   help="recompute every prompt in full")
    g.add_argument("--speculative-tokens", type=int, default=_defaults.speculative_tokens,
                   help="speculative decoding: draft tokens per sequence and step; 0: off "
                   "(default: %(default)s)")
    g.add_argument("--spec-acceptance", type=float, default=_defaults.spec_acceptance,
                   help="probability each draft token is accepted; changes at run time "
                   "through /admin/config (default: %(default)s)")
    g.add_argument("--pd", action="store_true",
                   help="a decode instance of a prefill/decode pair: each prompt's KV "
                   "arrives from a prefill instance while the request waits deferred "
                   "(vLLM's P/D metrics; the kv_transfer_delay fault slows the handover)")
    g.add_argument("--kv-transfer-tps", type=float, default=_defaults.kv_transfer_tps,
                   help="with --pd: KV handed over, tokens/s (default: %(default)s)")
    p.add_argument("--enable-per-request-metrics", action="store_true",
                   help="as vLLM's flag: each response (a stream's usage chunk) carries a "
                   "metrics object with the request's queue, prefill and decode times")
    p.add_argument("--fault", action="append", default=[], metavar="KEY=VALUE",
                   help="start with this fault set (see the list below); repeatable")
    p.add_argument("--log-format", choices=("logfmt", "json"), default="logfmt")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                   default="info")


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings, or SystemExit(2) after one line per problem."""
    errors: list[str] = []
    try:
        faults = Faults().merged(parse_assignments(args.fault))
    except FaultError as exc:
        errors.extend(f"--fault {m}" for m in exc.messages)
        faults = Faults()
    engine = EngineConfig(
        max_num_seqs=args.max_num_seqs,
        kv_tokens=args.kv_tokens,
        block_size=args.block_size,
        max_num_batched_tokens=args.max_num_batched_tokens,
        prefill_tps=args.prefill_tps,
        decode_step=args.decode_step_ms / 1000,
        decode_step_per_seq=args.decode_step_per_seq_ms / 1000,
        output_len=args.output_len,
        prefix_caching=not args.no_prefix_caching,
        speculative_tokens=args.speculative_tokens,
        spec_acceptance=args.spec_acceptance,
        pd=args.pd,
        kv_transfer_tps=args.kv_transfer_tps,
    )
    settings = Settings(
        host=args.host,
        port=args.port,
        metrics_port=args.metrics_port,
        format=args.format,
        models=tuple(args.model or [DEFAULT_MODEL]),
        dp_ranks=args.dp_ranks,
        seed=args.seed,
        engine=engine,
        faults=faults,
        per_request_metrics=args.enable_per_request_metrics,
    )
    errors.extend(settings.problems())
    if errors:
        for message in errors:
            print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    return settings


async def _main(settings: Settings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await serve(settings, stop)


def cmd_simulate(args: argparse.Namespace) -> int:
    from exporter.runtime.logs import setup_logging

    settings = settings_from_args(args)
    setup_logging(args.log_format, args.log_level)
    try:
        asyncio.run(_main(settings))
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            print(f"error: cannot listen on {settings.host}: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
        raise
    return 0
