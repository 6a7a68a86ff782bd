"""How exactly does the client stamp tokens? Measured against a server that knows the truth.

A ground-truth streaming server (its own process) answers each chat request on a schedule
drawn from the request's number: a first token after 10-30 ms, then 11 more, 1-5 ms apart
at concurrency 1, 2-10 ms at 8 and 10-40 ms at 32 (about one token per millisecond in all
at 8 and 32), each SSE event written as its own HTTP chunk. It stamps
``time.monotonic()`` right before each write, so its stamps are the true send times on
CLOCK_MONOTONIC, which is system-wide on Linux: a client process reading the same clock can
be compared with them directly.

Two clients, each in its own process, run at the same time at concurrency 1, 8 and 32 (200,
640 and 768 requests), so that whatever else the machine does delays both alike; the
server and both clients run at nice -10 where allowed:

* ours: ``llm-latency-exporter bench ... --json`` (the probe's request path and stream
  reader); absolute token times are ``origin_monotonic_s + start_s + ttft_s`` plus the ITLs;
* reference: written the way vLLM's ``vllm bench serve`` client works
  (vllm/benchmarks/lib/endpoint_request_func.py): one aiohttp session, ``iter_any()``,
  split on blank lines, and a ``perf_counter()`` stamp per chunk after its JSON is decoded.

Reported per client: measured-minus-true TTFT (p50, p99) and absolute ITL error
|measured gap - true gap| (p50, p99), each the median over ``--runs`` runs. The server sends
no role-only chunk here, so both clients' TTFT definitions pick the same event and only
timing fidelity is compared (with one, the reference would stop TTFT on the role chunk).

Run from the repository root (about 1 minute on 2 cores):
    .venv/bin/python -m benchmarks.probe_fidelity
Exit status 1 unless: ours' TTFT error p99 <= 1 ms at concurrency 1 and <= the reference's
at 8 and 32, and ours' ITL absolute error p99 <= the reference's at every concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parent.parent

TOKENS = 12
CONCURRENCY = (1, 8, 32)
# Enough requests that a p99 is not decided by the two or three worst gaps of the run.
REQUESTS = {1: 200, 8: 640, 32: 768}
# Token gaps (seconds) per concurrency. At 32 streams they are those of a loaded GPU's decode
# step, which keeps the tokens per millisecond the client handles near those at 8 streams:
# then one multi-millisecond pause of the machine touches a few gaps, not one percent.
GAPS = {1: (0.001, 0.005), 8: (0.002, 0.01), 32: (0.01, 0.04)}
MODEL = "ground-truth"
TTFT_P99_LIMIT_C1 = 0.001

# --- ground-truth server ----------------------------------------------------------------


def schedule(n: int, gap: tuple[float, float]) -> tuple[float, list[float]]:
    """(delay to the first token, gaps between later tokens) for request number ``n``."""
    rng = random.Random(n)
    return rng.uniform(0.01, 0.03), [rng.uniform(*gap) for _ in range(TOKENS - 1)]


def _event(obj: dict[str, Any] | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj)
    payload = f"data: {data}\n\n".encode()
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


class TruthConnection(asyncio.Protocol):
    #: Request id -> write times of its token events, for every completed stream.
    truth: ClassVar[dict[str, list[float]]] = {}
    gap: ClassVar[tuple[float, float]] = (0.002, 0.01)

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False
        self.handles: list[asyncio.TimerHandle] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        for h in self.handles:
            h.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._next_request()

    def _next_request(self) -> None:
        if self.busy or self.transport is None:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = self.buf[:end].decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        fields = (line.partition(":") for line in lines[1:])
        headers = {k.strip().lower(): v.strip() for k, _, v in fields}
        length = int(headers.get("content-length", "0"))
        if len(self.buf) < end + 4 + length:
            return
        self.buf = self.buf[end + 4 + length :]
        if method == "GET" and path.startswith("/pace/"):
            # /pace/LO/HI: token gaps in milliseconds for the requests that follow.
            lo, hi = path.split("/")[2:4]
            TruthConnection.gap = (float(lo) / 1000, float(hi) / 1000)
            self.transport.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
            self._next_request()
            return
        if method == "GET" and path.startswith("/truth"):
            body = json.dumps(TruthConnection.truth).encode()
            TruthConnection.truth = {}
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            self._next_request()
            return
        self.busy = True
        req_id = headers.get("x-request-id", "")
        self._stream(req_id)

    def _stream(self, req_id: str) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        number = int(req_id.rsplit("-", 1)[-1]) if req_id else 0
        first, gaps = schedule(number, TruthConnection.gap)
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
        )
        stamps: list[float] = []
        at = loop.time() + first
        for k in range(TOKENS):
            if k:
                at += gaps[k - 1]
            self.handles.append(loop.call_at(at, self._token, k, stamps, req_id))

    def _token(self, k: int, stamps: list[float], req_id: str) -> None:
        if self.transport is None:
            return
        chunk = {"id": "x", "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"content": f" w{k}"}}]}
        # Stamped just before the write: on loopback the write syscall itself delivers the
        # bytes to the client's socket, so a stamp after it could follow their arrival.
        stamps.append(time.monotonic())
        self.transport.write(_event(chunk))
        if k == TOKENS - 1:
            usage = {"id": "x", "object": "chat.completion.chunk", "choices": [],
                     "usage": {"prompt_tokens": 8, "completion_tokens": TOKENS}}
            self.transport.write(_event(usage) + _event("[DONE]") + b"0\r\n\r\n")
            TruthConnection.truth[req_id] = stamps
            self.handles.clear()
            self.busy = False
            self._next_request()


async def serve(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(TruthConnection, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


# --- reference client (vLLM bench serve style) ------------------------------------------


class StreamedResponseHandler:
    """vLLM's handler: split on blank lines; emit a trailing buffer once it is whole JSON."""

    def __init__(self) -> None:
        self.buffer = ""

    def add_chunk(self, chunk_bytes: bytes) -> list[str]:
        self.buffer += chunk_bytes.decode("utf-8")
        messages = []
        while "\n\n" in self.buffer:
            message, self.buffer = self.buffer.split("\n\n", 1)
            message = message.strip()
            if message:
                messages.append(message)
        if self.buffer.startswith("data: "):
            content = self.buffer.removeprefix("data: ").strip()
            if content == "[DONE]":
                messages.append(self.buffer.strip())
                self.buffer = ""
            elif content:
                try:
                    json.loads(content)
                except ValueError:
                    pass
                else:
                    messages.append(self.buffer.strip())
                    self.buffer = ""
        return messages


async def reference_run(url: str, requests: int, concurrency: int) -> list[dict[str, Any]]:
    import aiohttp

    run_id = uuid.uuid4().hex[:8]
    records: list[dict[str, Any]] = []
    connector = aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=60)
    next_i = 0

    async def one(session: aiohttp.ClientSession, i: int) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"{run_id} {i}"}],
                "max_completion_tokens": TOKENS, "stream": True,
                "stream_options": {"include_usage": True}}
        req_id = f"ref-{run_id}-{i}"
        stamps: list[float] = []
        handler = StreamedResponseHandler()
        async with session.post(url, json=body, headers={"X-Request-Id": req_id}) as response:
            async for chunk_bytes in response.content.iter_any():
                chunk_bytes = chunk_bytes.strip()
                if not chunk_bytes:
                    continue
                for message in handler.add_chunk(chunk_bytes):
                    if message.startswith(":"):
                        continue
                    chunk = message.removeprefix("data: ")
                    if chunk != "[DONE]":
                        data = json.loads(chunk)
                        if data.get("choices"):
                            stamps.append(time.perf_counter())
        records.append({"id": req_id, "stamps": stamps})

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal next_i
        while next_i < requests:
            i, next_i = next_i, next_i + 1
            await one(session, i)

    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=6 * 60 * 60)
    ) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return records


# --- driver -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def set_pace(port: int, gap: tuple[float, float]) -> None:
    url = f"http://127.0.0.1:{port}/pace/{gap[0] * 1000:g}/{gap[1] * 1000:g}"
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 204


def fetch_truth(port: int) -> dict[str, list[float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/truth", timeout=10) as resp:
        data: dict[str, list[float]] = json.loads(resp.read())
        return data


def _priority() -> None:
    """Run above the machine's other work, where allowed (root): their CPU bursts would
    otherwise delay whichever client is measuring at that moment. The server and both
    clients get the same priority."""
    with contextlib.suppress(OSError):
        os.nice(-10)


def run_ours(port: int, n: int, c: int, tmp: Path) -> dict[str, list[float]]:
    out = tmp / f"ours-{c}.json"
    subprocess.run(
        [sys.executable, "-m", "exporter", "bench", "--url", f"http://127.0.0.1:{port}",
         "--model", MODEL, "--requests", str(n), "--concurrency", str(c),
         "--max-tokens", str(TOKENS), "--prompt-tokens", "8", "--json", str(out)],
        cwd=ROOT, check=True, stdout=subprocess.DEVNULL, timeout=120, preexec_fn=_priority,
    )
    doc = json.loads(out.read_text())
    origin = doc["origin_monotonic_s"]
    stamps: dict[str, list[float]] = {}
    for r in doc["requests"]:
        if r["outcome"] != "ok":
            continue
        t = origin + r["start_s"] + r["ttft_s"]
        times = [t]
        for gap in r["itl_s"]:
            t += gap
            times.append(t)
        stamps[f"bench-{doc['run_id']}-{r['id']}"] = times
    return stamps


def run_reference(port: int, n: int, c: int, tmp: Path) -> dict[str, list[float]]:
    out = tmp / f"ref-{c}.json"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.probe_fidelity", "--reference", "--port", str(port),
         "--requests", str(n), "--concurrency", str(c), "--out", str(out)],
        cwd=ROOT, check=True, timeout=120, preexec_fn=_priority,
    )
    return {r["id"]: r["stamps"] for r in json.loads(out.read_text())}


def errors(measured: dict[str, list[float]], truth: dict[str, list[float]]) -> dict[str, float]:
    ttft: list[float] = []
    itl: list[float] = []
    mismatched = 0
    for req_id, got in measured.items():
        true = truth.get(req_id)
        if true is None or len(true) != len(got):
            mismatched += 1
            continue
        ttft.append(got[0] - true[0])
        for k in range(1, len(got)):
            itl.append(abs((got[k] - got[k - 1]) - (true[k] - true[k - 1])))
    if mismatched or not ttft:
        raise SystemExit(f"{mismatched} requests did not match the server's record")

    def q(xs: list[float], p: int) -> float:
        return statistics.quantiles(xs, n=100, method="inclusive")[p - 1]

    return {"ttft_p50": q(ttft, 50), "ttft_p99": q(ttft, 99), "itl_p50": q(itl, 50),
            "itl_p99": q(itl, 99), "requests": len(ttft)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        asyncio.run(serve(args.port))
        return 0
    if args.reference:
        url = f"http://127.0.0.1:{args.port}/v1/chat/completions"
        records = asyncio.run(reference_run(url, args.requests, args.concurrency))
        Path(args.out).write_text(json.dumps(records))
        return 0

    if time.get_clock_info("perf_counter").implementation != time.get_clock_info(
        "monotonic"
    ).implementation:
        print("perf_counter and monotonic are different clocks here; cannot compare")
        return 1
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.probe_fidelity", "--serve", "--port", str(port)],
        cwd=ROOT, preexec_fn=_priority,
    )
    results: dict[tuple[int, str], list[dict[str, float]]] = {}
    started = time.monotonic()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                fetch_truth(port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        with tempfile.TemporaryDirectory() as tmpdir:
            tmp = Path(tmpdir)
            for _ in range(args.runs):
                for c in CONCURRENCY:
                    set_pace(port, GAPS[c])
                    # Both clients at once, in their own processes: whatever else the machine
                    # does in the meantime delays both alike (a paired comparison). One after
                    # the other, a burst of outside work lands on one client only and decides
                    # its p99.
                    measured: dict[str, dict[str, list[float]]] = {}
                    clients = (("ours", run_ours), ("reference", run_reference))
                    with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
                        futures = {
                            name: pool.submit(fn, port, REQUESTS[c], c, tmp)
                            for name, fn in clients
                        }
                        for name, future in futures.items():
                            measured[name] = future.result()
                    truth = fetch_truth(port)
                    for name, stamps in measured.items():
                        results.setdefault((c, name), []).append(errors(stamps, truth))
    finally:
        server.terminate()
        server.wait(10)

    def med(c: int, name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[(c, name)])

    print(f"probe fidelity: {args.runs} runs, {TOKENS} tokens per request, "
          f"{os.cpu_count()} CPUs, {time.monotonic() - started:.0f}s")
    print("| concurrency | client | requests | TTFT error p50 | TTFT error p99 "
          "| ITL abs error p50 | ITL abs error p99 |")
    print("|---|---|---|---|---|---|---|")
    for c in CONCURRENCY:
        for name in ("ours", "reference"):
            cells = " | ".join(
                f"{med(c, name, k) * 1000:.3f} ms"
                for k in ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99")
            )
            print(f"| {c} | {name} | {REQUESTS[c]} | {cells} |")
    ok = True
    print()
    for c in CONCURRENCY:
        ttft = med(c, "ours", "ttft_p99") / med(c, "reference", "ttft_p99")
        itl = med(c, "ours", "itl_p99") / med(c, "reference", "itl_p99")
        print(f"concurrency {c}: ours/reference TTFT error p99 {ttft:.2f}, "
              f"ITL abs error p99 {itl:.2f}")
        ok &= itl <= 1.0 and (ttft <= 1.0 if c > 1 else True)
    c1 = med(1, "ours", "ttft_p99")
    print(f"concurrency 1: ours TTFT error p99 {c1 * 1000:.3f} ms (limit "
          f"{TTFT_P99_LIMIT_C1 * 1000:g} ms)")
    ok &= c1 <= TTFT_P99_LIMIT_C1
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
