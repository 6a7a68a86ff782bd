"""Path checks and /metrics at scale, on loopback inside network namespaces of their own.

Every 127.0.0.0/8 address is local, so each is a distinct ICMP target the kernel answers:
the truth is 0 loss. Three parts, each with a named reference run in the same script:

* ``icmp``: ``llm-latency-exporter run`` with N ICMP targets (bursts of 20 echoes 200 ms
  apart every 30 s, timeout 2 s, the defaults: N x 2/3 echoes/s), through raw sockets, then
  through ping (datagram) sockets. Measured over ``--duration`` s after a 10 s warm-up:
  loss from the counters, (sent - received) / sent, and process CPU (utime + stime, every
  thread) per 1000 echoes. Reference: 1 target.
* ``metrics``: the same exporter with N ICMP targets, their route checks, an engine check
  and a streaming probe against the simulator, scraped every 0.5 s as Prometheus scrapes
  (its Accept header, gzip): /metrics latency p50 / p99 / max, bytes per target and the
  loss meanwhile. Reference: the exporter of ``--reference`` (a git revision, by default the
  last one before the checks published batches: its "prepared pieces" renderer), run from
  ``git archive`` of that revision with the same config and N. The two alternate, A B B A,
  ``--duration`` / 2 each, latencies pooled per side (load that drifts weighs on both).
* ``render``: the exposition alone, in this process: N path checks run once each (real
  bursts; their route checks are not run), their batches and the route checks' published
  to the runtime's store, then a scrape's text (``Store.text``) and its gzip timed, against
  prometheus_client's ``generate_latest`` over the same batches
  (``tests/support/reference.py``). Reference: ``generate_latest``.
* ``routes``: rounds of 300 traceroutes through the exporter's Tracer, time scaled by 1/20
  (wave timeout 100 ms, gap 100 ms, route_interval 30 s stand for 2 s, 2 s and 10 m):
  targets that answer (port unreachable at once), and silent ones (UDP dropped: every
  wave waits its whole timeout, the worst case), at 1, 4 and 8 parallel traces. A late
  round must be counted and logged with its reason. Reference: 1 parallel trace.

Run from the repository root (root; apt-get install nftables iproute2; metrics needs git):
    .venv/bin/python -m benchmarks.path_scale                 # all parts, 1000 targets
    .venv/bin/python -m benchmarks.path_scale --part icmp --targets 300 --duration 20
    .venv/bin/python -m benchmarks.path_scale --part metrics --reference e062a46
Exit status 1 unless at N targets: loss < 0.1 % and CPU < 0.4 s per 1000 echoes on both
socket kinds, /metrics p99 < 100 ms, and every traceroute round either finished within its
route_interval or was counted late with a warning.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import http.client
import io
import logging
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from exporter.checks import build_checks
from exporter.checks.path.route import RouteCheck, Tracer
from exporter.checks.path.routes import load_table
from exporter.config.load import parse_config
from exporter.runtime.scheduler import Scheduler
from tests.support.netlab import Lab, in_netns, lab_unavailable
from tests.support.reference import reference_text
from tests.support.samples import Exposed, parse
from tests.support.simulator import simulate_args

ROOT = Path(__file__).resolve().parent.parent
PORT, SIM_PORT = 9400, 8000
CLK_TCK = os.sysconf("SC_CLK_TCK")
WARMUP = 10.0
#: The last revision whose /metrics came from prepared pieces and live prometheus_client
#: collectors (exporter/runtime/exposition.py's ``Prepared``), before checks published batches.
REFERENCE = "e062a46"
#: Prometheus 2.x/3.x's default scrape Accept header (OpenMetrics first).
ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


def address(i: int) -> str:
    return f"127.{1 + i // 62500}.{i // 250 % 250}.{1 + i % 250}"


def exporter_config(n: int, mode: str, extra: bool) -> str:
    rows = "\n".join(
        f"      - {{name: t{i}, host: {address(i)}, region: lo}}" for i in range(n)
    )
    engines = (
        f"engines:\n  - {{name: sim, url: 'http://127.0.0.1:{SIM_PORT}/metrics', interval: 5s}}\n"
        f"probes:\n  - {{name: chat, url: 'http://127.0.0.1:{SIM_PORT}/v1/chat/completions',"
        " model: sim-model, interval: 5s, max_tokens: 16}\n"
        if extra
        else ""
    )
    return (
        f"server: {{listen_address: '127.0.0.1:{PORT}', log_level: warning}}\n{engines}"
        "paths:\n  interval: 30s\n  burst: 20\n  spacing: 200ms\n  timeout: 2s\n"
        f"  route_interval: {'10m' if extra else '24h'}\n  icmp_socket: {mode}\n"
        f"  carriers:\n    lo:\n{rows}\n"
    )


def checkout(rev: str, into: Path) -> Path:
    """The tree of ``rev`` (git archive), to run the exporter of that revision from."""
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True,
                         check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(into, filter="data")
    return into


class Exporter:
    def __init__(
        self, lab: Lab, workdir: Path, n: int, mode: str, extra: bool, root: Path = ROOT,
        tag: str = "",
    ) -> None:
        self.ns = lab.netns(f"{mode}{n}{'x' if extra else ''}{tag}")
        self.sim: subprocess.Popen[bytes] | None = None
        # Ping sockets only where ping_group_range admits the group; root opens raw ones.
        groups = "0 2147483647" if mode == "dgram" else "1 0"
        lab.sysctl(self.ns, "net.ipv4.ping_group_range", groups)
        if extra:
            sim = [sys.executable, "-m", "exporter", *simulate_args(SIM_PORT, fast=True)]
            sim += ["--model", "sim-model"]
            self.sim = lab.spawn(
                self.ns, sim, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        config = workdir / f"{self.ns}.yaml"
        config.write_text(exporter_config(n, mode, extra))
        self.log = workdir / f"{self.ns}.log"
        with self.log.open("wb") as out:
            self.proc = lab.spawn(
                self.ns, [sys.executable, "-m", "exporter", "run", "--config", str(config)],
                cwd=root, stdout=out, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.scrape()
                return
            except OSError:
                time.sleep(0.3)
        raise SystemExit(f"the exporter in {self.ns} did not serve: {self.log.read_text()[-2000:]}")

    def scrape(self, timeout: float = 10) -> tuple[float, int, str]:
        """(seconds, body bytes, text) of one scrape as Prometheus makes it."""
        def get() -> tuple[float, int, str]:
            req = urllib.request.Request(
                f"http://127.0.0.1:{PORT}/metrics",
                headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"},
            )
            start = time.perf_counter()
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                took = time.perf_counter() - start
                gz = r.headers.get("Content-Encoding") == "gzip"
            return took, len(raw), (gzip.decompress(raw) if gz else raw).decode()

        return in_netns(self.ns, get)

    def scrape_for(self, duration: float, every: float) -> tuple[list[float], int, str]:
        """Scrape every ``every`` s for ``duration`` s on one kept-alive connection, as
        Prometheus does: (latencies, last gzipped size, last text)."""
        def run() -> tuple[list[float], int, str]:
            conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
            headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip"}
            took, raw = [], b""
            end = time.monotonic() + duration
            while time.monotonic() < end:
                start = time.perf_counter()
                conn.request("GET", "/metrics", headers=headers)
                raw = conn.getresponse().read()
                took.append(time.perf_counter() - start)
                time.sleep(every)
            conn.close()
            return took, len(raw), gzip.decompress(raw).decode()

        return in_netns(self.ns, run)

    def cpu_seconds(self) -> float:
        # `ip netns exec` execs the exporter, so the PID is the exporter's.
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK


def totals(text: str) -> tuple[float, float]:
    sent = received = 0.0
    for (name, _), value in parse(text).items():
        if name == "llm_path_packets_sent_total":
            sent += value
        elif name == "llm_path_packets_received_total":
            received += value
    return sent, received


def icmp_run(lab: Lab, workdir: Path, n: int, mode: str, duration: float) -> dict[str, float]:
    ex = Exporter(lab, workdir, n, mode, extra=False)
    time.sleep(WARMUP)
    sent0, recv0 = totals(ex.scrape()[2])
    cpu0 = ex.cpu_seconds()
    time.sleep(duration)
    cpu1 = ex.cpu_seconds()
    sent1, recv1 = totals(ex.scrape()[2])
    lab.stop(ex.proc)
    echoes = sent1 - sent0
    return {
        "echoes": echoes,
        "loss": (echoes - (recv1 - recv0)) / echoes if echoes else float("nan"),
        "cpu_per_1000": (cpu1 - cpu0) / echoes * 1000 if echoes else float("nan"),
    }


def metrics_run(
    lab: Lab, workdir: Path, n: int, duration: float, root: Path = ROOT, tag: str = ""
) -> tuple[list[float], dict[str, float]]:
    """(scrape latencies, what the last scrape said) of one exporter run."""
    ex = Exporter(lab, workdir, n, "raw", extra=True, root=root, tag=tag)
    time.sleep(WARMUP)
    sent0, recv0 = totals(ex.scrape(timeout=60)[2])  # a loaded machine may take a while
    latencies, size, text = ex.scrape_for(duration, 0.5)
    sent1, recv1 = totals(text)
    runs = parse(text)
    ok_runs = {
        kind: sum(v for (name, labels), v in runs.items()
                  if name == "llm_exporter_check_runs_total"
                  and ("outcome", "success") in labels
                  and dict(labels)["check"].startswith(kind + "/"))
        for kind in ("engine", "probe", "route")
    }
    lab.stop(ex.proc)
    if ex.sim is not None:
        lab.stop(ex.sim)
    return latencies, {
        "lines": text.count("\n"),
        "bytes": len(text.encode()),
        "gzip_bytes": size,
        "loss": 1 - (recv1 - recv0) / (sent1 - sent0) if sent1 > sent0 else float("nan"),
        **{f"{k}_ok": v for k, v in ok_runs.items()},
    }


def latency(took: list[float]) -> dict[str, float]:
    took = sorted(took)
    return {
        "scrapes": len(took),
        "p50_ms": 1000 * statistics.median(took),
        "p99_ms": 1000 * took[min(len(took) - 1, int(0.99 * len(took)))],
        "max_ms": 1000 * took[-1],
    }


def metrics_ab(
    lab: Lab, workdir: Path, n: int, duration: float, old: Path
) -> tuple[dict[str, float], dict[str, float]]:
    """The reference and this tree, each run twice in the order A B B A (half ``duration``
    each), so load that drifts over the whole run weighs on both alike; latencies pooled."""
    took: dict[Path, list[float]] = {old: [], ROOT: []}
    last: dict[Path, dict[str, float]] = {}
    for i, root in enumerate((old, ROOT, ROOT, old)):
        lat, last[root] = metrics_run(lab, workdir, n, duration / 2, root, tag=f"r{i}")
        took[root] += lat
    return ({**latency(took[old]), **last[old]}, {**latency(took[ROOT]), **last[ROOT]})


def render_run(lab: Lab, n: int, repeat: int = 10) -> dict[str, float]:
    ns = lab.netns("render")
    rows = "\n".join(f"      - {{name: t{i}, host: {address(i)}, region: lo}}" for i in range(n))
    cfg = parse_config(f"paths:\n  burst: 20\n  spacing: 10ms\n  carriers:\n    lo:\n{rows}\n")

    async def run_all() -> Scheduler:
        scheduler = Scheduler(build_checks(cfg))
        # The path checks only: a round of 1000 traceroutes takes minutes (its two series
        # per target, route info and hop count, are left out here).
        paths = [c for c in scheduler.checks if c.kind == "path"]
        await asyncio.gather(*(scheduler.run_once(c) for c in paths))
        await scheduler.stop()
        return scheduler

    store = in_netns(ns, lambda: asyncio.run(run_all())).store
    batches = store.batches()

    def median_ms(fn: Callable[[], object], times: int) -> float:
        took = []
        for _ in range(times):
            start = time.perf_counter()
            fn()
            took.append(time.perf_counter() - start)
        return 1000 * statistics.median(took)

    body = store.text(True)
    return {
        "bytes": len(body),
        "lines": body.count(b"\n"),
        "ours_ms": median_ms(lambda: store.text(True), repeat),
        "gzip_ms": median_ms(lambda: gzip.compress(body, compresslevel=1), repeat),
        "reference_ms": median_ms(lambda: reference_text(batches, True), 3),
    }


def routes_run(lab: Lab, silent: bool, parallelism: int, n: int = 300) -> dict[str, float]:
    ns = lab.netns(f"tr{'s' if silent else 'a'}{parallelism}")
    if silent:
        lab.nft(ns, "table inet quiet {\n chain input {\n type filter hook input priority 0;\n"
                    " udp dport 33434-33600 drop\n }\n}\n")
    rows = "\n".join(f"      - {{name: t{i}, host: {address(i)}, region: lo}}" for i in range(n))
    cfg = parse_config(f"paths:\n  timeout: 100ms\n  carriers:\n    lo:\n{rows}\n")
    assert cfg.paths is not None
    targets, interval = cfg.paths.carriers["lo"], 30.0
    warnings: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(f"{record.getMessage()}: {getattr(record, 'hint', '')}")

    handler = Catch()
    logging.getLogger("exporter.route").addHandler(handler)
    reg = Exposed()

    async def one_round() -> float:
        tracer = Tracer(parallelism, interval, gap=0.1)
        checks = [RouteCheck("lo", t, interval, 0.1, load_table(), tracer) for t in targets]
        reg.add(*checks)
        start = time.monotonic()
        # As the scheduler does: every check asks at once; each waits its turn.
        await asyncio.gather(*(c.run() for c in checks), return_exceptions=True)
        took = time.monotonic() - start
        await asyncio.sleep(0.05)
        tracer.close()
        return took

    try:
        took = in_netns(ns, lambda: asyncio.run(one_round()))
    finally:
        logging.getLogger("exporter.route").removeHandler(handler)
    late = reg.get_sample_value("llm_path_route_rounds_late_total") or 0.0
    return {"round_s": took, "interval_s": interval, "late": late, "warned": len(warnings),
            "hint": warnings[0] if warnings else ""}  # type: ignore[dict-item]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("icmp", "metrics", "render", "routes", "all"), default="all")
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--reference", default=REFERENCE,
                    help="git revision whose /metrics is the reference (default %(default)s)")
    args = ap.parse_args()
    if (why := lab_unavailable()) is not None:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    ok = True
    print(f"load average at start: {load()} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory() as tmp:
        lab = Lab(Path(tmp))
        try:
            if args.part in ("icmp", "all"):
                print("\nICMP: targets  socket  echoes  loss      CPU s / 1000 echoes")
                for mode in ("raw", "dgram"):
                    ref = icmp_run(lab, Path(tmp), 1, mode, args.duration)
                    big = icmp_run(lab, Path(tmp), args.targets, mode, args.duration)
                    for n, r in ((1, ref), (args.targets, big)):
                        print(f"      {n:7d}  {mode:6s}  {r['echoes']:6.0f}  {r['loss']:.4%}"
                              f"  {r['cpu_per_1000']:.3f}")
                    print(f"      CPU per echo, {args.targets} targets / 1 target:"
                          f" {big['cpu_per_1000'] / ref['cpu_per_1000']:.2f}")
                    ok &= big["loss"] < 0.001 and big["cpu_per_1000"] < 0.4
            if args.part in ("metrics", "all"):
                print(f"\n/metrics while every check runs (Prometheus's Accept, gzip),"
                      f" {args.targets} targets; reference: the exporter of {args.reference}")
                old = checkout(args.reference, Path(tmp) / "reference")
                ref, big = metrics_ab(lab, Path(tmp), args.targets, args.duration, old)
                for name, r in ((args.reference, ref), ("this tree", big)):
                    print(f"      {name:>9}: {r['scrapes']:.0f} scrapes, p50"
                          f" {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, max"
                          f" {r['max_ms']:.1f} ms; {r['lines']:.0f} lines,"
                          f" {r['bytes'] / args.targets:.0f} bytes per target,"
                          f" {r['gzip_bytes'] / 1e6:.2f} MB gzipped; loss {r['loss']:.4%};"
                          f" successful runs: engine {r['engine_ok']:.0f}, probe"
                          f" {r['probe_ok']:.0f}, route {r['route_ok']:.0f}")
                print(f"      p99 ratio this tree / {args.reference}:"
                      f" {big['p99_ms'] / ref['p99_ms']:.2f}")
                ok &= big["p99_ms"] < 100 and big["loss"] < 0.001
            if args.part in ("render", "all"):
                r = render_run(lab, args.targets)
                print(f"\nRendering {args.targets} targets' batches ({r['lines']:.0f} lines,"
                      f" {r['bytes'] / args.targets:.0f} bytes per target), OpenMetrics:"
                      f" store {r['ours_ms']:.1f} ms + gzip {r['gzip_ms']:.1f} ms;"
                      f" prometheus_client generate_latest {r['reference_ms']:.0f} ms"
                      f" ({r['reference_ms'] / (r['ours_ms'] + r['gzip_ms']):.0f}x ours with gzip)")
            if args.part in ("routes", "all"):
                print("\nTraceroute rounds, 300 targets, time x 1/20 (route_interval 30 s):")
                for silent in (False, True):
                    for p in (1, 4, 8):
                        if silent and p == 1:
                            continue  # 300 x 0.5 s: late by design, shown by p=4 already
                        r = routes_run(lab, silent, p)
                        kind = "silent " if silent else "answer "
                        print(f"      {kind} parallel {p}: round {r['round_s']:.1f} s;"
                              f" late {r['late']:.0f}, warned {r['warned']:.0f} {r['hint']}")
                        said = r["late"] >= 1 and r["warned"] >= 1
                        ok &= r["round_s"] <= r["interval_s"] or said
        finally:
            lab.close()
    print(f"\nload average at end: {load()}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
