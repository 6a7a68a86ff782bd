"""The clients check at 10,000 real connections: cost per run and /metrics, against an empty run.

Opens ``--connections`` real loopback TCP connections to one port (half over IPv4 from
addresses spread over 127.0.0.0/8, half over IPv6 ``::1``), so the kernel holds that many
established server-side sockets with their tcp_info, and three carrier CIDR lists of
``--prefixes`` prefixes each (synthetic, of every length from /8 to /24 and IPv6, plus the
loopback ranges the clients come from) as a national carrier's list would be. Then, in
this process, medians over ``--runs``:

* ``empty`` (the reference): a run of the same check config on a port nobody uses;
* ``stock``: the first run at N (every connection new: classified by its address);
* ``idle``: a run where no connection sent anything since the last;
* ``dump only``: the kernel's dump received and walked by message headers, not decoded;
* ``active``: a run after every server socket wrote 1 KiB (so each gives an RTT and a
  delivery-rate observation and a segment delta);
* ``ss``: ``ss -tin state established sport = :PORT`` reading the same sockets, for scale;

each run timed as the scheduler runs it (``await check.run()``, the dump on a worker
thread); and /metrics: the batch published to the runtime's store (rendered there, once
per run), a scrape's text of it (``Store.text``), and a whole /metrics body as the server
renders it (``App.metrics_body``, the runtime's own families included), against the empty
run's. The series count
must be the same at N connections as at none; the state's memory per tracked connection
is from tracemalloc.

    .venv/bin/python -m benchmarks.clients_scale                        # 10,000 connections
    .venv/bin/python -m benchmarks.clients_scale --connections 2000 --runs 5

The client and server ends live in two child processes, so each process needs an
open-file limit of N plus a little (the script raises the soft limit up to the hard one),
and the benchmark's own process, the exporter's stand-in, holds none of them. Exit status 1 unless
the series counts agree and an active run at N costs under ``--budget`` ms (default 500).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import random
import resource
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path

from exporter.checks.clients import check as clients
from exporter.checks.clients import diag
from exporter.checks.clients.check import ClientsCheck
from exporter.config.load import load_config
from exporter.runtime.app import App
from exporter.runtime.exposition import Store
from tests.support.procs import free_port

CARRIERS = ("telecom", "unicom", "mobile")


def carrier_lists(workdir: Path, prefixes: int, seed: int = 1) -> dict[str, Path]:
    """Three lists of ``prefixes`` distinct prefixes each; the clients' 127.0.0.0/8 split
    among them by /10, ::1 in the first."""
    rnd = random.Random(seed)
    seen: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
    files = {}
    for i, name in enumerate(CARRIERS):
        nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = [
            ipaddress.ip_network(f"127.{64 * i}.0.0/10")]
        if i == 0:
            nets.append(ipaddress.ip_network("::1/128"))
        while len(nets) < prefixes:
            net: ipaddress.IPv4Network | ipaddress.IPv6Network
            if rnd.random() < 0.8:
                length = rnd.randint(8, 24)
                net = ipaddress.ip_network((rnd.randrange(1, 126) << 24 | rnd.getrandbits(24),
                                            length), strict=False)
            else:
                length = rnd.randint(20, 48)
                net = ipaddress.ip_network((0x2400 << 112 | rnd.getrandbits(112), length),
                                           strict=False)
            if net not in seen:
                seen.add(net)
                nets.append(net)
        path = workdir / f"{name}.txt"
        path.write_text("".join(f"{n}\n" for n in nets))
        files[name] = path
    return files


def config_file(workdir: Path, port: int, files: dict[str, Path]) -> Path:
    cfg = workdir / f"clients-{port}.yaml"
    rows = "".join(f"    {name}: {path}\n" for name, path in files.items())
    cfg.write_text(f"server: {{log_level: warning}}\nclients:\n  ports: [{port}]\n"
                   f"  carriers:\n{rows}")
    return cfg


def the_check(workdir: Path, port: int, files: dict[str, Path]) -> ClientsCheck:
    (check,) = clients.build(load_config(config_file(workdir, port, files)))
    assert isinstance(check, ClientsCheck)
    return check


def client_addresses(n: int) -> list[tuple[socket.AddressFamily, str, str]]:
    """(family, source, destination) of each client: half IPv4 from sources spread over
    127.0.0.0/8 (so the carriers' /10s split them), half IPv6 from ::1."""
    v4 = [(socket.AF_INET, f"127.{i % 192}.{i // 192 % 250}.{1 + i % 250}", "127.0.0.1")
          for i in range(n // 2)]
    return v4 + [(socket.AF_INET6, "::1", "::1")] * (n - n // 2)


def clients_process(n: int, port: int) -> None:
    """The client ends: connect, say ready, hold them until stdin closes."""
    held = []
    for family, source, dest in client_addresses(n):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.bind((source, 0))
        s.connect((dest, port))
        held.append(s)
    print("ready", flush=True)
    sys.stdin.read()


def server_process(n: int, port: int) -> None:
    """The server ends: listen, accept ``n``, say ready; at each line on stdin write 1 KiB
    on every connection and say sent; stop when stdin closes."""
    listeners = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.bind((host, port))
        listener.listen(4096)
        listeners.append(listener)
    print("listening", flush=True)
    accepted = []
    for listener, count in zip(listeners, (n // 2, n - n // 2), strict=True):
        accepted += [listener.accept()[0] for _ in range(count)]
    print("ready", flush=True)
    for _ in sys.stdin:
        for conn in accepted:
            conn.send(b"x" * 1024)
        print("sent", flush=True)


class Connections:
    """``n`` loopback connections to ``port``, both ends in processes of their own: the
    open-file limit is per process, and /metrics reports the exporter's own open files
    (process_open_fds), which the server's sockets are not."""

    def __init__(self, stack: ExitStack, n: int, port: int) -> None:
        def child(mode: str) -> subprocess.Popen[str]:
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.clients_scale", mode, str(port),
                 "--connections", str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True)
            stack.callback(proc.wait, 30)
            assert proc.stdin is not None
            stack.callback(proc.stdin.close)
            return proc

        self.server = child("--serve")
        self.expect(self.server, "listening")
        self.expect(child("--clients-for"), "ready")
        self.expect(self.server, "ready")

    @staticmethod
    def expect(proc: subprocess.Popen[str], line: str) -> None:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != line:
            raise SystemExit(f"a connection process failed (exit {proc.poll()})")

    def send(self) -> None:
        """1 KiB on every connection, written by the server's end."""
        assert self.server.stdin is not None
        self.server.stdin.write("send\n")
        self.server.stdin.flush()
        self.expect(self.server, "sent")


def dump_only(port: int) -> int:
    """The kernel's dump and its reading, without decoding: messages received and walked by
    their headers only (what the check's run costs before any tcp_info is unpacked)."""
    header = struct.Struct("=IHHII")
    count = 0
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, diag.NETLINK_SOCK_DIAG) as sock:
        sock.bind((0, 0))
        buf = bytearray(1 << 16)
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), 1):
            sock.send(diag.request(family, [port], seq))
            done = False
            while not done:
                n, at = sock.recv_into(buf), 0
                while at < n and not done:
                    length, kind = header.unpack_from(buf, at)[:2]
                    done = kind == diag.NLMSG_DONE
                    count += not done
                    at += (length + 3) & ~3
    return count


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def timed(step: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await step()
    return time.perf_counter() - start


def metrics_times(check: ClientsCheck, runs: int) -> tuple[float, float, int]:
    """(publish ms, scrape text ms, series lines) of the check's batch in a store."""
    store = Store()
    publish, scrape = [], []
    for _ in range(runs):
        batch = check.batch()
        start = time.perf_counter()
        store.publish(check.name, batch)
        publish.append(time.perf_counter() - start)
        start = time.perf_counter()
        text = store.text(False)
        scrape.append(time.perf_counter() - start)
    lines = sum(1 for line in text.decode().splitlines() if not line.startswith("#"))
    return median_ms(publish), median_ms(scrape), lines


async def scrape_ms(cfg: Path, runs: int) -> float:
    """A whole /metrics body as the server renders it (``App.metrics_body``: the runtime's
    own families and the store, on the render thread) after two runs of the check."""
    app = App(load_config(cfg), str(cfg))
    try:
        (check,) = app.gen.scheduler.checks
        for _ in range(2):
            await app.gen.scheduler.run_once(check)
        took = []
        for _ in range(runs):
            start = time.perf_counter()
            await app.metrics_body(False)
            took.append(time.perf_counter() - start)
        return median_ms(took)
    finally:
        await app.shutdown()


async def measure(args: argparse.Namespace, workdir: Path) -> int:
    files = carrier_lists(workdir, args.prefixes)
    port, unused = free_port(), free_port()
    empty = the_check(workdir, unused, files)
    check = the_check(workdir, port, files)
    rows: list[tuple[str, float, str]] = []
    await empty.run()
    ref = median_ms([await timed(empty.run) for _ in range(args.runs)])
    ref_publish, ref_scrape, ref_lines = metrics_times(empty, args.runs)
    ref_body = await scrape_ms(config_file(workdir, unused, files), args.runs)
    rows.append(("empty (reference)", ref, "0 connections"))

    with ExitStack() as stack:
        start = time.perf_counter()
        conns = Connections(stack, args.connections, port)
        print(f"opened {args.connections} connections in {time.perf_counter() - start:.1f} s")
        stock = await timed(check.run) * 1000
        rows.append(("stock (first run, all new)", stock, f"{check.tracked} tracked"))
        idle = median_ms([await timed(check.run) for _ in range(args.runs)])
        rows.append(("idle", idle, "no segments since the last run"))
        dumps = []
        for _ in range(args.runs):
            start = time.perf_counter()
            dumped = dump_only(port)
            dumps.append(time.perf_counter() - start)
        rows.append(("dump only (not decoded)", median_ms(dumps), f"{dumped} messages"))
        active = []
        for _ in range(args.runs):
            conns.send()
            time.sleep(0.2)  # the data is acknowledged, so each RTT sample is fresh
            active.append(await timed(check.run))
        rows.append(("active", median_ms(active), "1 KiB sent on every connection"))
        ss = []
        for _ in range(args.runs):
            start = time.perf_counter()
            out = subprocess.run(["ss", "-tinH", "state", "established", f"sport = :{port}"],
                                 capture_output=True, text=True, check=True).stdout
            ss.append(time.perf_counter() - start)
        listed = sum(1 for line in out.splitlines() if line and not line[0].isspace())
        rows.append(("ss -tin (for scale)", median_ms(ss), f"{listed} sockets"))
        publish, scrape, lines = metrics_times(check, args.runs)
        body = await scrape_ms(config_file(workdir, port, files), args.runs)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        state, _ = check._read(None)
        per_conn = (tracemalloc.get_traced_memory()[0] - before) / max(1, len(state))
        tracemalloc.stop()
        counts = len(state)

    print(f"\nclients check, {args.connections} connections, {args.prefixes} prefixes per carrier,"
          f" medians of {args.runs} runs\n")
    print("| run | ms | x empty | |\n|---|---|---|---|")
    for name, ms, note in rows:
        print(f"| {name} | {ms:.1f} | {ms / ref:.1f} | {note} |")
    print("\n| /metrics | empty | at N | x empty |\n|---|---|---|---|")
    print(f"| publish (render, once per run) | {ref_publish:.3f} ms | {publish:.3f} ms |"
          f" {publish / ref_publish:.2f} |")
    print(f"| scrape text | {ref_scrape:.3f} ms | {scrape:.3f} ms | {scrape / ref_scrape:.2f} |")
    print(f"| whole /metrics body (App.metrics_body) | {ref_body:.2f} ms | {body:.2f} ms |"
          f" {body / ref_body:.2f} |")
    print(f"| series lines | {ref_lines} | {lines} | {lines / ref_lines:.2f} |")
    print(f"\nstate: {per_conn:.0f} bytes per tracked connection ({counts} tracked)")
    ok = lines == ref_lines and median_ms(active) < args.budget
    print("OK" if ok else f"FAIL: series {lines} vs {ref_lines}, active {median_ms(active):.1f} ms"
          f" (budget {args.budget} ms)")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--prefixes", type=int, default=3000, help="per carrier")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--budget", type=float, default=500.0, help="ms per active run")
    parser.add_argument("--clients-for", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    need = args.connections + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, max(hard, need)))
        except (ValueError, OSError) as exc:
            raise SystemExit(f"cannot raise the open-file limit to {need}: {exc}") from None
    if args.clients_for:
        clients_process(args.connections, args.clients_for)
        return 0
    if args.serve:
        server_process(args.connections, args.serve)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(measure(args, Path(tmp)))


if __name__ == "__main__":
    raise SystemExit(main())
