"""Background load on the engine: other users' requests, bounded in count and time.

    python -m tests.support.lab.load URL [--model NAME] --phase SECONDS:RATE:PROMPT_TOKENS:MAX_TOKENS:CONCURRENCY[:SYSTEM_TOKENS:shared|unique[:TEMPERATURE]] ...

Phases run one after the other; in each, requests start at a fixed spacing of 1/RATE
(open loop, so an engine past its capacity builds a queue, as real traffic does) while
fewer than CONCURRENCY are in flight, and wait otherwise. It sends at most RATE x SECONDS
requests per phase and exits when the last phase ends, cancelling what is still in flight.
Each user prompt starts with its own number, so no two share a cached prefix; a system
prompt of SYSTEM_TOKENS goes ahead of it, the same for every request (``shared``, a prefix
the engine caches) or with the request's number at its head (``unique``: nothing is shared,
as with a timestamp at the top of a system prompt).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True)
class Phase:
    seconds: float
    rate: float
    prompt_tokens: int
    max_tokens: int
    concurrency: int
    system_tokens: int = 0
    unique: bool = False
    temperature: float | None = None


def phase(text: str) -> Phase:
    s, r, p, m, c, *rest = text.split(":")
    tokens, mode = (int(rest[0]), rest[1]) if rest else (0, "shared")
    temperature = float(rest[2]) if len(rest) > 2 and rest[2] else None
    return Phase(float(s), float(r), int(p), int(m), int(c), tokens, mode == "unique",
                 temperature)


#: One token per word for both engines: the simulator counts a token per four characters
#: of a word, and the tiny model's tokenizer (tests/support/tiny_model.py) has " that".
FILLER = "that"


def body(n: int, p: Phase, model: str) -> bytes:
    words = " ".join([FILLER] * max(0, p.prompt_tokens - 8))
    messages = [{"role": "user", "content": f"r{n} {words}"}]
    if p.system_tokens:
        head = f"t{n} " if p.unique else ""
        system = " ".join([FILLER] * max(1, p.system_tokens - 1))
        messages.insert(0, {"role": "system", "content": head + system})
    sampling = {} if p.temperature is None else {"temperature": p.temperature}
    return json.dumps({
        "model": model, "stream": True, "max_tokens": p.max_tokens,
        "ignore_eos": True, "messages": messages, **sampling,
    }).encode()


async def one(session: aiohttp.ClientSession, url: str, data: bytes) -> None:
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
        async with session.post(url, data=data,
                                headers={"Content-Type": "application/json"}) as resp:
            async for _ in resp.content.iter_any():
                pass


async def run(url: str, phases: list[Phase], model: str) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    sent = 0
    tasks: set[asyncio.Task[None]] = set()
    timeout = aiohttp.ClientTimeout(total=120)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        print("ready", flush=True)
        for p in phases:
            end = loop.time() + p.seconds
            next_at = loop.time()
            budget = int(p.rate * p.seconds)
            slots = asyncio.Semaphore(p.concurrency)
            for _ in range(budget):
                if stop.is_set():
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, next_at - loop.time()))
                if stop.is_set() or loop.time() >= end:
                    break
                next_at += 1 / p.rate
                await slots.acquire()
                sent += 1

                async def request(n: int = sent, slot: asyncio.Semaphore = slots,
                                  ph: Phase = p) -> None:
                    try:
                        await one(session, url, body(n, ph, model))
                    finally:
                        slot.release()

                task = asyncio.create_task(request())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, end - loop.time()))
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return sent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("--model", default="simulated-model", help="the model the engine serves")
    ap.add_argument("--phase", type=phase, action="append", required=True,
                    help="SECONDS:RATE:PROMPT_TOKENS:MAX_TOKENS:CONCURRENCY"
                         "[:SYSTEM_TOKENS:shared|unique[:TEMPERATURE]]")
    args = ap.parse_args(argv)
    phases = [p for p in args.phase if p.seconds > 0]
    sent = asyncio.run(run(args.url, phases, args.model))
    print(f"sent {sent}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
