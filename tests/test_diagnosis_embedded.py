"""The embedded diagnosis source: window math against hand-computed PromQL values, bounded
memory, the app serving /api/v1/diagnosis and the verdict metrics, and one end-to-end run
of the real exporter and the simulator whose probe numbers reach Observations."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from exporter import metrics
from exporter.config.load import parse_config
from exporter.diagnosis import declare, observables, stats
from exporter.diagnosis.embedded import Evaluator, observe
from exporter.diagnosis.families import RawSample, raw_samples
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.result import Diagnosis, Evidence, Step, StepResult, Verdict
from exporter.diagnosis.windows import MIN_BASELINE_SECONDS, History
from exporter.runtime import page
from exporter.runtime.app import App
from tests.support.procs import Proc, free_port, http_get, wait_until
from tests.support.samples import find, parse
from tests.support.simulator import StartSimulator

INF = math.inf
REQ = metrics.PROBE_REQUESTS.name
TTFT_BUCKET = f"{metrics.PROBE_TTFT.name}_bucket"
PROBE = dict(zip(metrics.PROBE_LABELS, ("p", "127.0.0.1:1", "short", "mobile", "main"),
                 strict=True))


def counter(value: float, outcome: str = "ok") -> RawSample:
    return (REQ, {**PROBE, "outcome": outcome}, value)


def ttft(counts: dict[float, float]) -> list[RawSample]:
    return [(TTFT_BUCKET, {**PROBE, "le": "+Inf" if le == INF else str(le)}, c)
            for le, c in counts.items()]


# --- PromQL math ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("q", "counts", "expected"),
    [
        # rank 38 lands in (0.5, 1]: 0.5 + 0.5 * (38 - 30) / (40 - 30)
        (0.95, {0.1: 10, 0.5: 30, 1.0: 40, INF: 40}, 0.9),
        # rank 20 lands in (0.1, 0.5]: 0.1 + 0.4 * (20 - 10) / 20
        (0.5, {0.1: 10, 0.5: 30, 1.0: 40, INF: 40}, 0.3),
        # the first bucket interpolates from 0
        (0.5, {0.2: 10, INF: 10}, 0.1),
        # in the +Inf bucket: the highest finite bound
        (0.9, {1.0: 5, INF: 10}, 1.0),
        # non-monotonic counts are made monotonic first (ensureMonotonic)
        (0.5, {0.1: 12, 0.5: 10, 1.0: 20, INF: 20}, 0.1 * 10 / 12),
        (0.5, {1.0: 0, INF: 0}, None),  # no observations: NaN
        (0.5, {1.0: 3}, None),  # no +Inf bucket: NaN
    ],
)
def test_histogram_quantile_is_promqls(q: float, counts: dict[float, float],
                                       expected: float | None) -> None:
    got = stats.histogram_quantile(q, counts)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_counter_reset_is_counted_like_increase() -> None:
    h = History(window=60, interval=10, history=600)
    for t, v in ((0, 100), (10, 103), (20, 105), (30, 2), (40, 6)):  # reset after 105
        h.record([counter(v)], at=t)
    w = h.window_at(40)
    assert w is not None
    # increase(): 3 + 2 + 2 (the reset counts from 0) + 4
    assert stats.total(w.increase(REQ), {}) == 11
    # A window that starts after the first samples: from 103 on.
    h2 = History(window=30, interval=10, history=600)
    for t, v in ((0, 100), (10, 103), (20, 105), (30, 2), (40, 6)):
        h2.record([counter(v)], at=t)
    w2 = h2.window_at(40)
    assert w2 is not None and w2.first.at == 10
    assert stats.total(w2.increase(REQ), {}) == 2 + 2 + 4


def test_window_quantile_equals_promql_over_bucket_increases() -> None:
    """Observations before the window do not count; the P95 is histogram_quantile over the
    bucket increases, exactly."""
    reg = CollectorRegistry()
    hist = metrics.PROBE_TTFT.histogram(reg)
    child = hist.labels(*PROBE.values())
    h = History(window=20, interval=10, history=600)
    for v in (5.0, 5.0, 5.0):  # slow, before the window
        child.observe(v)
    h.record(raw_samples(reg.collect()), at=0)
    before = {le: c for le, c in _buckets(reg).items()}
    for v in (0.3, 0.32, 0.45, 0.5, 0.7, 0.8, 1.1, 1.2, 0.9, 0.35):
        child.observe(v)
    h.record(raw_samples(reg.collect()), at=10)
    after = _buckets(reg)
    w = h.window_at(10)
    assert w is not None
    got = stats.histogram_quantile(0.95, stats.buckets(w.increase(TTFT_BUCKET), {"probe": "p"}))
    deltas = {le: after[le] - before[le] for le in after}
    # By hand: 10 in-window observations, rank 9.5; cumulative at 1.0 is 8, at 1.25 is 10,
    # so 1.0 + 0.25 * (9.5 - 8) / 2.
    assert got == pytest.approx(1.0 + 0.25 * 1.5 / 2)
    assert got == pytest.approx(stats.histogram_quantile(0.95, deltas))


def _buckets(reg: CollectorRegistry) -> dict[float, float]:
    return {float(s.labels["le"]): s.value for f in reg.collect() for s in f.samples
            if s.name == TTFT_BUCKET}


def test_series_appearing_inside_the_window() -> None:
    """The exporter's own series (created on their first event) count from 0; an engine's
    cumulative counter passed through counts from its first sample, as PromQL does."""
    h = History(window=60, interval=10, history=600)
    engine = metrics.ENGINE_PROMPT_TOKENS.name
    elabels = {"target": "main", "engine": "vllm", "model": "m", "dp_rank": ""}
    xid = metrics.GPU_XID_ERRORS.name
    glabels = {"gpu": "0", "uuid": "u", "name": "H200", "xid": "79"}
    h.record([counter(0)], at=0)
    h.record([counter(1), (engine, elabels, 5000.0), (xid, glabels, 1.0)], at=10)
    h.record([counter(2), (engine, elabels, 5600.0), (xid, glabels, 1.0)], at=20)
    w = h.window_at(20)
    assert w is not None
    assert stats.total(w.increase(engine), {}) == 600
    assert stats.total(w.increase(xid), {}) == 1


# --- baselines and memory ------------------------------------------------------------------
def test_baseline_only_off_peak_only_before_the_window_and_after_30_minutes() -> None:
    window = 600.0
    h = History(window=window, interval=60, history=6 * 3600)
    peak = metrics.EXPORTER_PEAK_WINDOW.name
    fast = {0.25: 0.0, 0.5: 0.0, 1.0: 0.0, INF: 0.0}
    t = 0.0

    def fast_p95() -> float | None:
        return stats.histogram_quantile(0.95, stats.buckets(h.baseline.items(TTFT_BUCKET), {}))

    # The window is not part of its own baseline: 30 minutes before it, 40 in all.
    minutes = int((MIN_BASELINE_SECONDS + window) // 60)
    for i in range(minutes + 1):
        # One request a minute, all between 0.25 and 0.5 s.
        fast = {le: c + (1 if le >= 0.5 else 0) for le, c in fast.items()}
        h.record([*ttft(fast), (peak, {"window": "evening"}, 0.0)], at=t)
        if i == minutes - 1:
            assert not h.baseline.ready
        t += 60
    assert h.baseline.ready
    assert h.baseline.seconds == MIN_BASELINE_SECONDS
    slow = dict(fast)
    for in_peak in [1.0] * 20 + [0.0] * 10:
        # Peak time, then a slow window off-peak: neither moves the baseline.
        slow = {le: c + (1 if le == INF else 0) for le, c in slow.items()}
        h.record([*ttft(slow), (peak, {"window": "evening"}, in_peak)], at=t)
        t += 60
        base = fast_p95()
        assert base is not None and 0.25 < base <= 0.5
    # The fast window of the first phase has joined since: 40 minutes of fast requests.
    assert h.baseline.seconds == MIN_BASELINE_SECONDS + window


def test_a_short_min_baseline_gives_baselines_within_minutes() -> None:
    config = parse_config("diagnosis: {window: 30s, interval: 2s, history: 10m, "
                          "min_baseline: 20s}\n")
    h = History.from_config(config.diagnosis)
    assert h.coarse_step == 2 and h.baseline.min_seconds == 20
    t, n = 0.0, 0.0
    while t < 48:
        n += 1
        h.record([counter(n)], at=t)
        t += 2
    assert not h.baseline.ready  # 46 s recorded, 16 s of them before the window
    h.record([counter(n + 1)], at=t)
    h.record([counter(n + 2)], at=t + 2)
    assert h.baseline.ready and h.baseline.seconds == 20


def test_route_classes_and_batch_peaks_between_coarse_snapshots_are_kept() -> None:
    """A gauge held only between two coarse snapshots (a route class that was replaced, a
    batch briefly at its limit) still reaches the history: the best class and the batch
    limit come from it."""
    info = metrics.PATH_ROUTE_INFO.name
    running = metrics.ENGINE_REQUESTS_RUNNING.name
    route = dict(zip(metrics.ROUTE_LABELS, ("telecom", "sh"), strict=True))
    h = History(window=30, interval=2, history=600, coarse_step=60)
    for t in range(0, 200, 2):
        cls = "cn2_gia" if 10 <= t < 40 else "chinanet_163"
        busy = 16.0 if t == 20 else 4.0
        h.record([(info, {**route, "route_class": cls}, 1.0),
                  (running, {"target": "main"}, busy)], at=float(t))
    w = h.window_at(198.0)
    assert w is not None
    ctx = Evaluator(w, h.baseline, h, parse_config("{}")).context()
    (best,) = (o for o in observables.PATH_TABLE if o.field == "best_route_class")
    seen = declare.evaluate(best.expr, best.kind, ctx)
    assert {k[-1] for k, v in seen.items() if v == 1} == {"cn2_gia", "chinanet_163"}
    (batch,) = (o for o in observables.ENGINE_TABLE if o.field == "running_max")
    assert declare.evaluate(batch.expr, batch.kind, ctx) == {("main", "", ""): 16.0}


def test_deques_and_snapshots_never_exceed_their_bounds() -> None:
    h = History(window=10, interval=1, history=100, coarse_step=5, max_values=50)
    fine_max, coarse_max = h.fine.maxlen, h.coarse.maxlen
    assert fine_max == 12 and coarse_max == 21
    for t in range(2000):
        # More series every tick (a cardinality explosion) and counters that keep growing.
        samples = [(REQ, {**PROBE, "outcome": f"o{i}"}, float(t)) for i in range(t % 120)]
        h.record(samples, at=float(t))
        assert len(h.fine) <= fine_max and len(h.coarse) <= coarse_max
        assert all(len(s.values) <= 50 for s in h.fine)
    assert h.values <= 50 * (fine_max + coarse_max)
    # The reset-correction state is bounded by the series of the history, too.
    assert len(h._state) <= 120


# --- Observations from windows ------------------------------------------------------------
CONFIG = """
peak_windows: {timezone: UTC, windows: {evening: {start: '20:00', end: '23:00'}}}
engines: [{name: main, url: 'http://127.0.0.1:1/metrics'}]
paths:
  carriers:
    mobile: [{name: sh, host: 127.0.0.1, region: sh}]
probes:
  - {name: p, url: 'http://127.0.0.1:1/v1/chat/completions', model: m, carrier: mobile,
     engine: main, slo: {ttft_p95_seconds: 0.5}}
"""


def test_observe_maps_every_layer() -> None:
    config = parse_config(CONFIG)
    h = History.from_config(config.diagnosis)
    path = dict(zip(metrics.PATH_LABELS, ("mobile", "sh", "sh", "icmp"), strict=True))
    route = {"carrier": "mobile", "target": "sh"}
    eng = {"target": "main", "engine": "vllm", "model": "m", "dp_rank": ""}
    runs = metrics.EXPORTER_CHECK_RUNS.name
    itl = f"{metrics.ENGINE_ITL.name}_bucket"

    def samples(n: float, up: float, route_class: str) -> list[RawSample]:
        return [
            counter(2 * n), counter(n, "rate_limited"),
            (metrics.PROBE_PROMPT_TOKENS.name, PROBE, 100 * 2 * n),
            (metrics.PATH_PACKETS_SENT.name, path, 20 * n),
            (metrics.PATH_PACKETS_RECEIVED.name, path, 19 * n),
            (f"{metrics.PATH_RTT.name}_sum", path, 0.05 * 19 * n),
            (f"{metrics.PATH_RTT.name}_count", path, 19 * n),
            (metrics.PATH_ROUTE_INFO.name, {**route, "route_class": route_class}, 1.0),
            (metrics.ENGINE_UP.name, {"target": "main"}, up),
            (metrics.ENGINE_REQUESTS_RUNNING.name, eng, 3.0 + n % 2),
            (f"{metrics.ENGINE_QUEUE_TIME.name}_sum", eng, 0.5 * n),
            # One gap between 1 and 2.5 s a snapshot, beside ten short ones.
            (itl, {**eng, "le": "1.0"}, 10 * n), (itl, {**eng, "le": "2.5"}, 11 * n),
            (itl, {**eng, "le": "+Inf"}, 11 * n),
            (metrics.ENGINE_KV_CACHE_USAGE.name, eng, 0.97 if n == 7 else 0.5),
            (runs, {"check": "engine/main", "outcome": "success"}, 5.0),
            (runs, {"check": "engine/main", "outcome": "error"}, n),
            (runs, {"check": "probe/p", "outcome": "success"}, n),
            (metrics.EXPORTER_PEAK_WINDOW.name, {"window": "evening"}, 1.0),
        ]

    t0 = dt.datetime(2026, 12, 1, 21, tzinfo=dt.UTC).timestamp()
    for i in range(10):
        h.record(samples(i, 1.0 if i < 9 else 0.0, "cn2_gia" if i < 5 else "chinanet_163"),
                 at=t0 + 5 * i)
    obs = observe(h, config, t0 + 45)
    (p,) = obs.probes
    assert (p.probe, p.carrier, p.engine, p.slo_ttft) == ("p", "mobile", "main", 0.5)
    assert p.outcomes == {"ok": 18, "rate_limited": 9} and p.requests == 27
    assert p.prompt_tokens_mean == 100
    assert p.ttft_p95_baseline is None  # no 30 min off-peak yet
    (path_w,) = obs.paths
    assert (path_w.sent, path_w.lost) == (180, 9)
    assert path_w.rtt_mean == pytest.approx(0.05)
    assert path_w.in_peak and path_w.route_class == "chinanet_163"
    assert path_w.best_route_class == "cn2_gia"
    (e,) = obs.engines
    assert e.up is False and e.queue_seconds == pytest.approx(4.5)
    assert e.running_max == 4 and e.running == pytest.approx(3.5, abs=0.06)
    # Gaps over the 2 s stall line as far as the buckets tell (over 1 s): one a snapshot.
    assert e.stalls == 9
    assert e.kv_cache_usage == 0.97  # the fullest it got, not the mean
    # engine/main failed in the window and never succeeded in it; probe/p succeeded.
    assert obs.failing_checks == ("engine/main",)


# --- the app -----------------------------------------------------------------------------
def degraded(obs: Observations) -> Diagnosis:
    loss = Evidence("llm_path_loss_ratio", 0.06, {"carrier": "mobile"}, threshold=0.02,
                    baseline=0.001, window="2s")
    return Diagnosis(
        at=obs.at, window="2s", source=obs.source, status="degraded",
        verdicts=(
            Verdict("network", "packet_loss", {"carrier": "mobile", "probe": "p"}, ("ttft",),
                    0.9, "Mobile <loses> 6% of packets.", (loss,), ("Call the carrier",)),
            Verdict("engine", "queueing", {"engine": "main"}, ("ttft",), 0.6,
                    "Requests wait in the engine queue."),
        ),
        steps=(Step("symptom", StepResult.IMPLICATED), Step("gpu", StepResult.RULED_OUT, (loss,))),
    )


def healthy(obs: Observations) -> Diagnosis:
    return Diagnosis(at=obs.at, window="2s", source=obs.source, status="healthy",
                     verdicts=(), steps=())


FAST = "diagnosis: {interval: 100ms, window: 2s, history: 10s}\n"


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str, str]:
    async with session.get(url) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


async def wait_for(pred: Callable[[], Any], timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if await pred():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def test_app_serves_the_diagnosis_and_its_metrics() -> None:
    port = free_port()
    config = parse_config(f"server: {{listen_address: '127.0.0.1:{port}'}}\n{FAST}")
    release = threading.Event()
    current: list[Callable[[Observations], Diagnosis]] = [degraded]

    def evaluate(obs: Observations) -> Diagnosis:
        release.wait(5)  # the first evaluation waits, so the 503 before it is visible
        return current[0](obs)

    app = App(config, "test.yaml", evaluate=evaluate)
    base = f"http://127.0.0.1:{port}"
    await app.start()
    try:
        async with aiohttp.ClientSession() as s:
            status, ctype, body = await get(s, f"{base}/api/v1/diagnosis")
            assert status == 503 and ctype.startswith("application/json")
            assert json.loads(body)["status"] == "unknown"
            # The evaluation blocks a worker thread, never the loop: /metrics still answers.
            status, _, text = await get(s, f"{base}/metrics")
            assert status == 200 and 'llm_diagnosis_status{status="unknown"} 1.0' in text
            release.set()

            async def evaluated() -> bool:
                return (await get(s, f"{base}/api/v1/diagnosis"))[0] == 200

            await wait_for(evaluated)
            status, ctype, body = await get(s, f"{base}/api/v1/diagnosis")
            doc = json.loads(body)
            assert ctype.startswith("application/json")
            assert doc["schema"] == "llm-latency-diagnosis/v1" and doc["status"] == "degraded"
            assert [v["cause"] for v in doc["verdicts"]] == ["packet_loss", "queueing"]
            text = (await get(s, f"{base}/metrics"))[2]
            verdicts = find(text, metrics.DIAGNOSIS_VERDICT.name)
            assert sorted((lab["cause"], v) for lab, v in verdicts) == [
                ("packet_loss", 2.0), ("queueing", 1.0)]
            assert dict(find(text, metrics.DIAGNOSIS_VERDICT.name, cause="packet_loss")[0][0]) \
                == {"layer": "network", "cause": "packet_loss", "carrier": "mobile",
                    "probe": "p", "engine": ""}
            assert find(text, metrics.DIAGNOSIS_STATUS.name, status="degraded")[0][1] == 1
            assert parse(text)[(metrics.DIAGNOSIS_EVALUATIONS.name, ())] >= 1
            status, _, index = await get(s, f"{base}/")
            assert status == 200
            top = index.index('<section id="diagnosis"')
            assert top < index.index("<h2>Checks</h2>")
            assert "Mobile &lt;loses&gt; 6% of packets." in index
            assert "llm_path_loss_ratio" in index and "Call the carrier" in index
            assert "Requests wait in the engine queue." in index and "Ruled out" in index
            # The page refreshes its live part from /live, and loads nothing from elsewhere.
            script = index.split("<script>")[1].split("</script>")[0]
            assert f"fetch('{page.LIVE_PATH}'" in script and "http" not in script
            assert "src=" not in index and 'rel="stylesheet"' not in index
            status, ctype, live = await get(s, f"{base}/{page.LIVE_PATH}")
            assert status == 200 and ctype.startswith("text/html")
            assert live.startswith('<section id="diagnosis"') and "<html" not in live
            assert "Mobile &lt;loses&gt; 6% of packets." in live

            current[0] = healthy

            async def cleared() -> bool:
                text = (await get(s, f"{base}/metrics"))[2]
                return not find(text, metrics.DIAGNOSIS_VERDICT.name) and bool(
                    find(text, metrics.DIAGNOSIS_STATUS.name, status="healthy")[0][1])

            await wait_for(cleared)
            assert "healthy: no verdict" in (await get(s, f"{base}/"))[2]
    finally:
        release.set()
        await app.shutdown()


async def test_a_failing_evaluation_is_logged_once_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    config = parse_config(f"server: {{listen_address: '127.0.0.1:{port}'}}\n{FAST}")
    calls = [0]

    def broken(obs: Observations) -> Diagnosis:
        calls[0] += 1
        if calls[0] > 5:
            return healthy(obs)
        raise RuntimeError("chain exploded")

    app = App(config, "test.yaml", evaluate=broken)
    with caplog.at_level(logging.INFO, logger="exporter.diagnosis"):
        await app.start()
        try:
            async with aiohttp.ClientSession() as s:
                async def recovered() -> bool:
                    return (await get(s, f"http://127.0.0.1:{port}/api/v1/diagnosis"))[0] == 200

                await wait_for(recovered)
                text = (await get(s, f"http://127.0.0.1:{port}/metrics"))[2]
        finally:
            await app.shutdown()
    errors = parse(text)[(metrics.DIAGNOSIS_EVALUATION_ERRORS.name, ())]
    assert errors == 5
    failed = [r for r in caplog.records if r.getMessage() == "diagnosis evaluation failed"]
    assert len(failed) == 1
    assert any(r.getMessage() == "diagnosis evaluation recovered" for r in caplog.records)


# --- end to end ------------------------------------------------------------------------------
def test_probe_observations_reach_the_chain(
    tmp_path: Path, spawn: Callable[..., Proc], simulator: StartSimulator
) -> None:
    """The real exporter probes the simulator; the Observations its chain gets (echoed by
    tests/support/observing_exporter.py) hold the numbers /metrics shows at that moment."""
    sim = simulator(fast=True)
    port = free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
        "diagnosis: {interval: 200ms, window: 5m, history: 10m}\n"
        f"engines: [{{name: main, url: '{sim.base}/metrics', interval: 500ms}}]\n"
        "paths: {carriers: {mobile: [{name: lo, host: 127.0.0.1, region: local, "
        "protocol: tcp, port: " + str(sim.port) + "}]}, interval: 5s, burst: 2, spacing: 100ms,"
        " timeout: 1s}\n"
        f"probes:\n  - {{name: sim, url: '{sim.url}', model: simulated-model, interval: 1500ms,"
        " max_tokens: 16, prompt_tokens: 200, carrier: mobile, engine: main,"
        " slo: {ttft_p95_seconds: 0.4}}\n"
    )
    proc = spawn([sys.executable, "-m", "tests.support.observing_exporter", str(cfg)])
    url = f"http://127.0.0.1:{port}"

    def ok_count(text: str) -> float:
        return sum(v for _, v in find(text, REQ, probe="sim", outcome="ok"))

    def evidence() -> dict[str, float]:
        status, body = http_get(f"{url}/api/v1/diagnosis")
        if status != 200:
            return {}
        (step,) = json.loads(body)["steps"]
        return {e["metric"]: e["value"] for e in step["evidence"]}

    wait_until(lambda: ok_count(http_get(f"{url}/metrics")[1]) >= 4, timeout=30,
               what=f"four ok probes\n{proc.output()}")
    deadline = time.monotonic() + 30
    while True:
        before = http_get(f"{url}/metrics")[1]
        seen = evidence()
        after = http_get(f"{url}/metrics")[1]
        # A probe that finished between the two reads makes the moment ambiguous, and so does
        # one the engine has not been scraped since: the chain reads a linked probe up to
        # its engine's last scrape (alignment.py). Retry until a quiet moment.
        if seen and ok_count(before) == ok_count(after) == seen.get("probe.outcomes.ok"):
            break
        assert time.monotonic() < deadline, f"no quiet moment: {seen}"
    counts = {float(lab["le"]): v for lab, v in
              find(after, TTFT_BUCKET, probe="sim")}
    tpot = {float(lab["le"]): v for lab, v in
            find(after, f"{metrics.PROBE_TPOT.name}_bucket", probe="sim")}
    prompt = sum(v for _, v in find(after, metrics.PROBE_PROMPT_TOKENS.name, probe="sim"))
    assert seen["probe.requests"] == sum(v for _, v in find(after, REQ, probe="sim"))
    assert seen["probe.ttft_p95"] == pytest.approx(stats.histogram_quantile(0.95, counts))
    assert seen["probe.tpot_p95"] == pytest.approx(stats.histogram_quantile(0.95, tpot))
    assert seen["probe.prompt_tokens_mean"] == pytest.approx(prompt / ok_count(after))
    assert seen["probe.slo_ttft"] == 0.4
    # The engine's own numbers came through the same windows.
    assert seen["engine.up"] == 1 and seen["engine.requests"] > 0


async def test_history_survives_a_reload_unless_its_windows_change(tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "config.yaml"
    server = f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
    cfg.write_text(server + FAST)
    app = App(parse_config(cfg.read_text()), str(cfg), evaluate=healthy)
    await app.start()
    try:
        await wait_for(_async(lambda: len(app.evaluator.history.fine) >= 3))
        kept = app.evaluator.history
        assert await app.reload()
        await wait_for(_async(lambda: app.evaluator.last is not None
                              and len(kept.fine) >= 6))
        assert app.evaluator.history is kept
        cfg.write_text(server + FAST.replace("window: 2s", "window: 3s"))
        assert await app.reload()
        await wait_for(_async(lambda: app.evaluator.history is not kept))
        assert app.evaluator.history.window == 3
        await wait_for(_async(lambda: len(app.evaluator.history.fine) >= 2))
    finally:
        await app.shutdown()


def _async(pred: Callable[[], bool]) -> Callable[[], Any]:
    async def check() -> bool:
        return pred()

    return check
