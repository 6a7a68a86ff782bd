"""The probe, path and listener rows of the fault matrix, against one running exporter over
real HTTP on loopback: one probe per hostile endpoint (tests/support/hostile_probe.py serves
each fault on a port of its own, every reply echoing the credentials it was sent) beside a
healthy probe and an engine check against the simulator, TCP path checks to an open and a
closed port, and, while they all run, more idle connections than the listener's cap and a
stream of malformed requests carrying the secrets.

Every row: the outcome label of every request, the one clear log line, and the hostile
server's own count of what it was sent. For the run as a whole: the exporter stays up, the
other checks stay on schedule, /metrics stays fast, and no canary (an API key from the
environment, a bearer token from a file, a URL password and its Basic-auth form, a
query-string token) appears in the logs at debug, on any page, in /metrics or in
check-config. ``bench`` against each hostile endpoint: the same outcome, and no canary in
its output or its --json.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.bench.cli import EXIT_NOTHING_OK
from exporter.simulator.state import DEFAULT_MODEL
from tests.support import ROOT
from tests.support.hostile_probe import ALL_FAULTS, REFUSED
from tests.support.matrix import basic_auth, exposition, first_run, leaks, pages, runs, watch
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.samples import Samples, find, total, value
from tests.support.simulator import Simulator, running_simulator

KEY = "sk-canary-probe-40c1"  # API keys, from the environment
TOKEN = "tok-canary-probe-7be2"  # the engine's bearer token, from a file
USER, PASSWORD = "matrix", "pw-canary-probe-19fa"  # URL user-info
QUERY = "q-canary-probe-c3d8"  # a query-string token on every hostile URL
CANARIES = (KEY, TOKEN, PASSWORD, basic_auth(USER, PASSWORD), QUERY)
ENV = {"CANARY_KEY": KEY}
TIMEOUTS = "{connect: 1s, first_token: 1s, total: 1500ms}"
FAST_INTERVAL, SLOW_INTERVAL, CONTROL_INTERVAL = 1.0, 2.0, 0.5
#: Requests of every row before the rows are read (more than one: the first failure must
#: not have wedged the probe); rows held off by Retry-After need two requests and two holds.
MIN_RUNS, MIN_HELD = 3, 2
#: The exporter runs under this open-file limit, so the idle connections go past its cap.
NOFILE, IDLE = 512, 300
MALFORMED = 40


@dataclass(frozen=True)
class Row:
    fault: str
    #: The outcome of every request, and a phrase of the check's error.
    outcome: str
    detail: str
    #: The probe's name where two rows share a fault.
    name: str = ""
    #: Credentials in the URL (the client sends them as Basic auth) instead of an API key.
    userinfo: bool = False
    #: Retry-After: runs held off between requests (skipped runs, not failures).
    held: bool = False
    #: A deadline row: the longer interval.
    slow: bool = False
    #: bench's outcome where it differs from the probe's.
    bench: str = ""

    @property
    def probe(self) -> str:
        return self.name or self.fault


ROWS = (
    Row("error-event", "stream_error", "error event in stream (type=<redacted>"),
    Row("error-event", "stream_error", "error event in stream (type=", name="error-event-basic",
        userinfo=True),
    Row("http-401", "http_4xx", "HTTP 401", userinfo=True),
    Row("http-500", "http_5xx", "HTTP 500"),
    Row("rate-limited", "rate_limited", "HTTP 429", held=True),
    Row("unavailable", "http_5xx", "HTTP 503", held=True),
    Row("redirect-loop", "redirect", "HTTP 302 redirect (not followed)"),
    Row("reset", "stream_reset", "ClientPayloadError"),
    Row(REFUSED, "connect_error", "ClientConnectorError"),
    Row("hang", "timeout_first_token", "no first token within 1s", slow=True),
    Row("stall", "timeout_total", "no end of stream within 1.5s", slow=True),
    Row("drip", "timeout_first_token", "no first token within 1s", slow=True),
    Row("malformed", "protocol_error", "data is not JSON"),
    # bench's response cap is 64 MiB: the 8 MiB stream ends first, unfinished.
    Row("oversize", "protocol_error", "response over 65536 bytes", bench="stream_reset"),
    Row("empty", "empty", "stream ended without a token"),
    Row("not-sse", "protocol_error", "unexpected SSE line (field '<redacted>')"),
    Row("garbage-http", "protocol_error", "malformed HTTP response (400)"),
)
assert {r.fault for r in ROWS} == set(ALL_FAULTS)


def row_url(row: Row, port: int) -> str:
    host = f"{USER}:{PASSWORD}@127.0.0.1" if row.userinfo else "127.0.0.1"
    return f"http://{host}:{port}/v1/chat/completions?key={QUERY}"


@dataclass
class Hostile:
    ports: dict[str, int]

    def seen(self) -> dict[str, int]:
        """fault -> requests the hostile server was sent."""
        status, body = http_get(f"http://127.0.0.1:{self.ports['http-500']}/stats")
        assert status == 200, status
        return {k: int(v) for k, v in json.loads(body).items()}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    ports_file = tmp_path_factory.mktemp("hostile") / "ports.json"
    proc = Proc([sys.executable, "-m", "tests.support.hostile_probe", str(ports_file)])
    try:
        wait_until(lambda: ports_file.exists() or proc.popen.poll() is not None, 30,
                   "the hostile endpoints")
        assert proc.popen.poll() is None, proc.output()
        yield Hostile(json.loads(ports_file.read_text()))
    finally:
        proc.stop()
        proc.stderr_path.unlink(missing_ok=True)


def write_config(path: Path, port: int, hostile: Hostile, sim: Simulator, token: Path) -> None:
    probes = [
        f"  - {{name: {r.probe}, url: '{row_url(r, hostile.ports[r.fault])}', model: m,"
        f" interval: {SLOW_INTERVAL if r.slow else FAST_INTERVAL:g}s, timeouts: {TIMEOUTS},"
        " min_spacing: 10ms, max_tokens: 4, max_response_bytes: 65536"
        + ("}\n" if r.userinfo else ", api_key: {env: CANARY_KEY}}\n")
        for r in ROWS
    ]
    path.write_text(
        f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
        "probes:\n" + "".join(probes)
        + f"  - {{name: chat, url: '{sim.url}', model: {DEFAULT_MODEL},"
        f" interval: {CONTROL_INTERVAL:g}s, min_spacing: 10ms, max_tokens: 4}}\n"
        f"engines: [{{name: sim, url: '{sim.base}/metrics', interval: 1s,"
        f" bearer_token: {{file: {token}}}}}]\n"
        "paths:\n  interval: 2s\n  burst: 5\n  spacing: 50ms\n  timeout: 500ms\n"
        "  carriers:\n    lo:\n"
        f"      - {{name: open, host: 127.0.0.1, region: local, protocol: tcp, port: {sim.port}}}\n"
        f"      - {{name: closed, host: 127.0.0.1, region: local, protocol: tcp,"
        f" port: {hostile.ports[REFUSED]}}}\n"
    )


def abuse_the_listener(port: int) -> list[socket.socket]:
    """Idle connections past the cap (held open, returned) and malformed requests that carry
    the secrets (each answered 400 and closed)."""
    held = []
    for _ in range(IDLE):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        held.append(sock)
    bad = (
        f"GET /metrics?key={QUERY} HTTP/1.1\r\nHost: x\r\nAuthorization Bearer {KEY}\r\n\r\n",
        f"\x16\x03\x01{KEY}{QUERY}\r\n\r\n",
    )
    for i in range(MALFORMED):
        # Answered 400, or cut at the cap: either is fine.
        with contextlib.suppress(OSError), socket.create_connection(
            ("127.0.0.1", port), timeout=10
        ) as sock:
            sock.sendall(bad[i % 2].encode("latin-1"))
            sock.recv(4096)
    return held


@dataclass
class Run:
    """What the module's one exporter run left to assert on."""

    metrics: Samples
    pages: dict[str, str]
    logs: str
    check_config: str
    alive: bool
    seen: dict[str, int]
    control_runs: float
    control_expected: float
    engine_runs: float
    engine_expected: float
    slowest_scrape: float


def requests(m: Samples, row: Row, outcome: str | None = None) -> float:
    labels = {"probe": row.probe} if outcome is None else {"probe": row.probe, "outcome": outcome}
    return total(m, "llm_probe_requests_total", **labels)


def rows_done(m: Samples) -> bool:
    return all(
        requests(m, r) >= (MIN_HELD if r.held else MIN_RUNS)
        and (not r.held or runs(m, f"probe/{r.probe}", "skipped") >= MIN_HELD)
        for r in ROWS
    )


@pytest.fixture(scope="module")
def run(hostile: Hostile, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("probe-faults")
    token = tmp / "engine-token"
    token.write_text(TOKEN + "\n")
    port = free_port()
    exporter: Proc | None = None
    held: list[socket.socket] = []
    try:
        with running_simulator(fast=True) as sim:
            cfg = tmp / "config.yaml"
            write_config(cfg, port, hostile, sim, token)
            checked = subprocess.run(exporter_cmd("check-config", str(cfg)), cwd=ROOT,
                                     text=True, capture_output=True, timeout=60,
                                     env={**os.environ, **ENV})
            assert checked.returncode == 0, checked.stderr
            # prlimit execs the exporter: the PID stopped is the exporter's own.
            exporter = Proc(["prlimit", f"--nofile={NOFILE}:{NOFILE}",
                             *exporter_cmd("run", "--config.file", str(cfg), "--log.level",
                                           "debug")], env=ENV)
            base = f"http://127.0.0.1:{port}"
            first = first_run(base, "probe/chat")
            held = abuse_the_listener(port)
            seen = watch(f"{base}/metrics", rows_done, 40)
            yield Run(
                metrics=seen.samples,
                pages=pages(base),
                logs=exporter.output(),
                check_config=checked.stdout + checked.stderr,
                alive=exporter.popen.poll() is None
                and http_get(f"{base}/-/healthy")[0] == 200,
                seen=hostile.seen(),
                control_runs=runs(seen.samples, "probe/chat") - runs(first, "probe/chat"),
                control_expected=seen.elapsed / CONTROL_INTERVAL,
                engine_runs=runs(seen.samples, "engine/sim") - runs(first, "engine/sim"),
                engine_expected=seen.elapsed / 1.0,
                slowest_scrape=seen.slowest,
            )
    finally:
        for sock in held:
            sock.close()
        if exporter is not None:
            exporter.stop()
            exporter.stderr_path.unlink(missing_ok=True)


@pytest.mark.parametrize("row", ROWS, ids=[r.probe for r in ROWS])
def test_fault_row(run: Run, row: Row) -> None:
    m, check = run.metrics, f"probe/{row.probe}"
    sent = requests(m, row)
    assert sent >= (MIN_HELD if row.held else MIN_RUNS), "the probe kept running"
    assert requests(m, row, row.outcome) == sent, find(m, "llm_probe_requests_total",
                                                       probe=row.probe)
    # Every request failed as the row says; no run overran the scheduler's deadline.
    assert runs(m, check, "success") == runs(m, check, "timeout") == 0
    assert runs(m, check, "error") == sent
    held_off = value(m, "llm_probe_held_off_total", probe=row.probe)
    assert runs(m, check, "skipped") == held_off
    assert (held_off or 0) >= MIN_HELD if row.held else held_off == 0
    # The hostile server saw exactly those requests (one more may be in flight), so a held
    # run really sent nothing.
    same_fault = sum(requests(m, r) for r in ROWS if r.fault == row.fault)
    if row.fault != REFUSED:
        assert same_fault <= run.seen.get(row.fault, 0) <= same_fault + 2, run.seen
    # One clear line when the check started failing; never a "recovered" between failures.
    said = [line for line in run.logs.splitlines() if f"check={check} " in line
            and "logger=exporter.runtime.scheduler" in line]
    assert len(said) == 1 and 'msg="check failing"' in said[0], said
    assert f'error="{row.outcome}: ' in said[0] and row.detail in said[0], said[0]


def test_a_tcp_reset_is_an_answer_not_loss(run: Run) -> None:
    m = run.metrics
    for target in ("open", "closed"):
        sent = value(m, "llm_path_packets_sent_total", target=target)
        assert sent and sent >= 5, (target, sent)
        assert value(m, "llm_path_packets_received_total", target=target) == sent, target
    closed = value(m, "llm_path_packets_sent_total", target="closed")
    assert value(m, "llm_path_errors_total", target="closed", reason="refused") == closed
    assert total(m, "llm_path_errors_total", target="open") == 0


def test_the_exporter_and_its_other_checks_carry_on(run: Run) -> None:
    assert run.alive, run.logs[-3000:]
    m = run.metrics
    # On schedule while 17 hostile endpoints misbehave and the listener is over its cap
    # (half the runs at least: the machine is shared).
    assert run.control_runs >= 0.5 * run.control_expected, (run.control_runs,
                                                             run.control_expected)
    assert run.engine_runs >= 0.5 * run.engine_expected, (run.engine_runs, run.engine_expected)
    assert runs(m, "probe/chat", "error") == runs(m, "engine/sim", "error") == 0
    assert value(m, "llm_engine_up", target="sim") == 1.0
    assert run.slowest_scrape < 2.0, f"/metrics took {run.slowest_scrape:.2f}s"
    assert "Traceback" not in run.logs


def test_the_listener_sheds_what_it_cannot_hold(run: Run) -> None:
    m = run.metrics
    limit = value(m, "llm_exporter_http_connections_limit")
    assert limit is not None and limit < IDLE, limit
    cut = {labels["reason"]: v for labels, v in
           find(m, "llm_exporter_http_connections_refused_total")}
    assert cut["evicted"] + cut["limit"] >= IDLE - limit, cut
    http = [line for line in run.logs.splitlines() if "logger=exporter.http" in line]
    assert http and all("level=debug" in line for line in http), http[:5]
    assert len(http) <= 10, "malformed requests are throttled"


def test_the_canaries_appear_nowhere(run: Run) -> None:
    places = {"/metrics": exposition(run.metrics), "logs": run.logs,
              "check-config": run.check_config, **run.pages}
    assert all(places.values()), [where for where, text in places.items() if not text]
    assert leaks(CANARIES, places) == {}
    # The echoes did arrive (so a leak would show): redacted, not absent.
    assert "<redacted>" in run.logs and "&lt;redacted&gt;" in run.pages["/"]


# --- bench against each hostile endpoint -------------------------------------------------


@dataclass
class Bench:
    rc: int
    output: str
    report: str


@pytest.fixture(scope="module")
def benched(hostile: Hostile, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Bench]:
    """Every row's bench at once (they are independent endpoints): two requests each."""
    tmp = tmp_path_factory.mktemp("bench-faults")
    started = {}
    for r in ROWS:
        key = () if r.userinfo else ("--api-key-env", "CANARY_KEY")
        args = exporter_cmd(
            "bench", "--url", row_url(r, hostile.ports[r.fault]), "--model", "m",
            "--requests", "2", "--max-tokens", "4", "--prompt-tokens", "16", *key,
            "--timeout-connect", "1s", "--timeout-first-token", "1s",
            "--timeout-total", "1500ms", "--json", str(tmp / f"{r.probe}.json"))
        started[r.probe] = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **ENV},
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True)
    out = {}
    try:
        for name, proc in started.items():
            output, _ = proc.communicate(timeout=120)
            report = tmp / f"{name}.json"
            out[name] = Bench(proc.returncode, output,
                              report.read_text() if report.exists() else "")
    finally:
        for proc in started.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out


@pytest.mark.parametrize("row", ROWS, ids=[r.probe for r in ROWS])
def test_bench_against_the_fault(benched: dict[str, Bench], row: Row) -> None:
    b = benched[row.probe]
    assert b.report, b.output
    assert "Traceback" not in b.output
    # The exit status of a run in which nothing succeeded (not a usage error).
    assert b.rc == EXIT_NOTHING_OK, (b.rc, b.output)
    assert json.loads(b.report)["summary"]["outcomes"] == {row.bench or row.outcome: 2}, b.output
    assert leaks(CANARIES, {"output": b.output, "--json": b.report}) == {}
