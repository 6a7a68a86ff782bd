"""The Prometheus source of the diagnosis against a real Prometheus, and the ``diagnose``
command's exit codes and one-line errors.

One module-scoped lab: the simulator, the exporter (probe linked to the engine and a
carrier, a TCP path to the simulator, a scripted NVML) and Prometheus scraping it every
second with the rules ``generate`` wrote for the same config. The scrape adds ``site`` and
``vantage`` target labels, which is how a fleet's external labels look from Mimir or
Thanos. The Observations must carry what the exporter itself measured.
"""

from __future__ import annotations

import bisect
import datetime as dt
import http.server
import json
import math
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import metrics
from exporter.config.load import load_config
from exporter.config.models import Config
from exporter.config.policy import DiagnosisConfig
from exporter.config.values import parse_duration
from exporter.diagnosis import alignment, cli, declare, promqueries
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.promapi import PromClient
from exporter.diagnosis.prometheus import PrometheusError, observe
from exporter.diagnosis.result import SCHEMA_ID, Diagnosis, Evidence, Step, StepResult, Verdict
from exporter.metrics import names
from exporter.metrics.names import RATE
from exporter.monitoring import generate
from tests.support import ROOT
from tests.support.e2e_exporter import loopback_config
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.prometheus import scrape_config, start_prometheus
from tests.support.samples import find
from tests.support.simulator import running_simulator
from tests.support.tiers import needs

# The edge scrapes the exporter, runs the rules, has the fleet's external labels.
FLEET_LABELS = {"site": "sh-gpu", "vantage": "ct-gz"}
# The central store: federates the edge, which adds its external labels on the way out,
# as remote_write to Mimir or Thanos would.
CENTRAL = """
global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: federate
    honor_labels: true
    metrics_path: /federate
    params: {{"match[]": ['{{__name__=~"llm_.+|[a-z_]+:.+"}}']}}
    static_configs: [{{targets: ["127.0.0.1:{edge}"]}}]
"""

#: Seconds of data before the source is read: enough for every rate and recorded series.
FILL = 40.0
#: Seconds a fault runs before its window is read.
FAULT = 25.0


@pytest.fixture(scope="module")
@needs("prometheus", "slow")
def prom_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("diag-prom")
    exporter_port = free_port()
    procs: list[Proc] = []
    with running_simulator(fmt="vllm", seed=7, fast=True) as sim:
        try:
            config_path = tmp / "config.yaml"
            config_path.write_text(loopback_config(
                exporter_port, sim.port, probe={"slo": {"ttft_p95_seconds": 0.8},
                                                "timeouts": {"total": "20s"}},
                # Baselines from the run's own history: it is a minute long, not the
                # default half hour. The shortest baseline window holds all of it: over
                # 12 h, the drift alerts' baseline subqueries (a 2 s step) took a core.
                diagnosis={"min_baseline": "20s"}, alerting={"baseline_window": "1h"}))
            # The peak window opens in an hour: the whole run is off-peak, so baselines fill.
            procs.append(Proc([sys.executable, "-m", "tests.support.e2e_exporter",
                               str(config_path), str(time.time() + 3600)]))
            exporter = f"http://127.0.0.1:{exporter_port}"
            wait_until(lambda: http_get(f"{exporter}/metrics")[0] == 200, timeout=20,
                       what="exporter")
            config = load_config(config_path)
            generate.write(config, tmp / "generated")
            rules = tmp / "generated" / "rules"
            edge = start_prometheus(tmp, scrape_config(exporter_port, rules, FLEET_LABELS),
                                    name="edge")
            procs.append(edge.proc)
            central = start_prometheus(tmp, CENTRAL.format(edge=edge.url.rsplit(":", 1)[1]),
                                       name="central")
            procs.append(central.proc)
            # FILL counts from the first moment the central store holds every kind's
            # series: under load the first path run or federation lands seconds late, and
            # a baseline shorter than min_baseline would be (rightly) no baseline.
            wait_until(lambda: _holds_every_kind(central.url), timeout=60,
                       what="every kind's series in the central store")
            time.sleep(FILL)
            yield {"prom": central.url, "edge": edge.url, "exporter": exporter,
                   "config": config, "config_path": config_path, "sim": sim}
        finally:
            for proc in reversed(procs):
                proc.stop()
                proc.stderr_path.unlink(missing_ok=True)


def _holds_every_kind(prom: str) -> bool:
    for kind in (declare.PROBE, declare.PATH, declare.ENGINE, declare.GPU):
        status, body = http_get(f"{prom}/api/v1/query?"
                                + urllib.parse.urlencode({"query": f"count({kind.presence})"}))
        if status != 200 or not json.loads(body)["data"]["result"]:
            return False
    return True


def exporter_samples(url: str) -> str:
    status, body = http_get(f"{url}/metrics")
    assert status == 200
    return body


def p95_of(exposition: str, family: str, **labels: str) -> float:
    """The P95 histogram_quantile() would give over the exporter's cumulative counts."""
    return p95([(float(lbl["le"]), n) for lbl, n in find(exposition, f"{family}_bucket",
                                                         **labels)])


def counts_since_first_scrape(prom: str, at: float, family: str, **labels: str
                              ) -> list[list[tuple[float, float]]]:
    """The exporter's own cumulative bucket counts as the store kept them, as each scrape up
    to ``at`` stands for one evaluation of a rate over RATE: per scrape, (le, what its
    RATE before it added, counted from the first scrape, as rate() counts)."""
    rate = parse_duration(RATE)
    series = PromClient(prom, 10).query_series(
        f"{family}_bucket{promqueries.matcher(tuple(labels.items()))}[15m]", at)
    per_le = {float(one.labels["le"]): [(t, v) for t, v in one.samples if v is not None]
              for one in series}
    evaluations: list[list[tuple[float, float]]] = []
    for i in range(min(len(samples) for samples in per_le.values())):
        row = []
        for le, samples in per_le.items():
            t, v = samples[i]
            # The last sample at least RATE before this one, else the first scrape.
            j = bisect.bisect_right(samples, t - rate, key=lambda s: s[0]) - 1
            row.append((le, v - samples[max(j, 0)][1]))
        evaluations.append(row)
    return evaluations


def recorded_window_p95(prom: str, at: float, family: str, recorded: str,
                        **labels: str) -> float:
    """The P95 the recorded ``recorded`` (``*:p95_rate5m``) holds at ``at``: the requests
    of the last RATE since the first scrape, not those before it (Prometheus may start well
    after the exporter under load, and the first requests were the fast ones in one CI run:
    61 ms given where the exporter's whole count said 25 ms), as of the rule's own last
    evaluation, which may lag the last scrape (one CI run read 62 ms recorded against 50 ms
    counted at the last scrape, a bucket and a half apart)."""
    match = promqueries.matcher(tuple(labels.items()))
    (stamp,) = PromClient(prom, 10).query(f"timestamp({recorded}{match})", at)
    evaluated = at if stamp.value is None else stamp.value
    return p95(counts_since_first_scrape(prom, evaluated, family, **labels)[-1])


def recorded_baseline_p95(prom: str, at: float, family: str, **labels: str) -> float:
    """The P95 the recorded off-peak baseline holds (``*:p95_offpeak_baseline``). The rule
    sums every evaluation's rate over RATE, and each evaluation holds the requests of the
    RATE before it, since the first scrape: on a run shorter than that, a request counts once
    for every evaluation after it, so the earliest count most (the parts tier's start, its
    busiest minute: one CI run's baseline was 72 ms where the whole run's P95 was 49 ms)."""
    evaluations = counts_since_first_scrape(prom, at, family, **labels)
    return p95([(le, sum(row[i][1] for row in evaluations))
                for i, (le, _) in enumerate(evaluations[-1])])


def p95(cumulative: list[tuple[float, float]]) -> float:
    """histogram_quantile(0.95) over (le, cumulative count) pairs."""
    buckets = sorted(cumulative)
    total = buckets[-1][1]
    rank, lower, below = 0.95 * total, 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            return lower + (le - lower) * (rank - below) / max(n - below, 1e-9)
        lower, below = le, n
    raise AssertionError("no bucket")


def near(value: float, buckets: tuple[float, ...] | None) -> tuple[float, float]:
    """From the lower bound of the bucket below ``value``'s to the upper bound of the one
    above: histogram_quantile() interpolates within a bucket, and two estimates of one P95
    over slightly different requests may land in neighbouring buckets."""
    assert buckets is not None
    bounds = (0.0, *buckets)
    i = next(i for i, b in enumerate(bounds) if b >= value)
    return bounds[max(i - 2, 0)], bounds[min(i + 1, len(bounds) - 1)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("window", [300.0, 60.0], ids=["recorded-5m", "raw-1m"])
def test_observations_carry_what_the_exporter_measured(prom_lab: dict[str, Any],
                                                      window: float) -> None:
    at = dt.datetime.now(dt.UTC)
    obs = observe(prom_lab["prom"], prom_lab["config"], at, window)
    truth = exporter_samples(prom_lab["exporter"])
    assert obs.source == "prometheus" and obs.window == window and obs.at == at

    (probe,) = obs.probes
    assert (probe.probe, probe.profile, probe.carrier, probe.engine) == (
        "chat", "short", "lab", "sim")
    assert (probe.site, probe.vantage) == ("sh-gpu", "ct-gz")
    assert probe.outcomes.get("ok", 0) >= 5 and probe.requests == sum(probe.outcomes.values())
    assert (probe.slo_ttft, probe.slo_tpot, probe.timeout_total) == (0.8, 0.05, 20.0)
    assert probe.ttft_p95 is not None and probe.tpot_p95 is not None
    assert probe.itl_p99 is not None and probe.itl_p99 > 0
    assert probe.stalls == 0  # the simulator streams steadily, far under 2s gaps
    if window == 300.0:
        # The window spans the whole run: the quantile of what the exporter counted (less
        # the requests before the first scrape), in its bucket or the next one.
        want = recorded_window_p95(prom_lab["prom"], at.timestamp(), metrics.PROBE_TTFT.name,
                                   names.PROBE_TTFT.p95, probe="chat")
        lo, hi = near(want, metrics.PROBE_TTFT.buckets)
        assert lo <= probe.ttft_p95 <= hi, (probe.ttft_p95, want,
                                            p95_of(truth, metrics.PROBE_TTFT.name, probe="chat"))
        # Off-peak all along: the baseline is the P95 of the same requests, weighted as
        # its rule weights them.
        assert probe.ttft_p95_baseline is not None
        base = recorded_baseline_p95(prom_lab["prom"], at.timestamp(), metrics.PROBE_TTFT.name,
                                     probe="chat")
        lo, hi = near(base, metrics.PROBE_TTFT.buckets)
        assert lo <= probe.ttft_p95_baseline <= hi, (probe.ttft_p95_baseline, base, want)
    # The probe keeps its connection alive: it opened it once, before Prometheus saw the
    # series, so no new connection in the window is no data, not 0.
    assert probe.connect_p95 is None or 0 <= probe.connect_p95 < 0.5
    assert probe.prompt_tokens_mean is not None and probe.prompt_tokens_mean > 0

    (engine,) = obs.engines
    assert (engine.engine, engine.site, engine.up) == ("sim", "sh-gpu", True)
    assert engine.requests >= probe.outcomes["ok"] * 0.5
    for part in (engine.queue_seconds, engine.prefill_seconds, engine.decode_seconds):
        assert part is not None and part >= 0
    assert engine.decode_seconds and engine.engine_seconds
    assert engine.ttft_p95 is not None and engine.itl_p95 is not None
    assert engine.stalls == 0  # the simulator never pauses a stream for seconds
    assert engine.running is not None and engine.waiting is not None
    # The fast simulator rarely has a request in flight at a scrape: a max, not a count.
    assert engine.running_max is not None and engine.running_max >= engine.running
    assert engine.kv_cache_usage is not None and 0 <= engine.kv_cache_usage <= 1
    assert engine.request_rate is not None
    assert math.isclose(engine.request_rate, engine.requests / window)
    assert engine.prompt_tokens_mean is not None and engine.prompt_tokens_mean > 0

    (path,) = obs.paths
    assert (path.carrier, path.target, path.region, path.protocol) == (
        "lab", "lo", "local", "tcp")
    assert (path.site, path.vantage) == ("sh-gpu", "ct-gz")
    assert path.sent >= 10 and path.lost == 0 and path.loss == 0
    assert path.rtt_mean is not None and 0 < path.rtt_mean < 0.05
    assert path.jitter is not None and path.jitter < 0.05
    assert path.in_peak is False
    if window == 300.0:
        # The recorded off-peak loss ratio, whose rule's span includes the window.
        assert path.loss_baseline == 0

    (gpu,) = obs.gpus
    assert gpu.gpu == "0" and "H200" in gpu.name and gpu.site == "sh-gpu"
    assert gpu.utilization is not None and gpu.memory_used_ratio is not None
    assert 0 <= gpu.memory_used_ratio <= 1
    if window == 300.0:
        assert gpu.xid_errors >= 1  # the XID the lab's NVML reports at start
    assert all(isinstance(c, str) and "/" in c for c in obs.failing_checks)


def test_engine_baselines_stand_on_the_history_they_cover(prom_lab: dict[str, Any]) -> None:
    """The request rate before the window is over the time Prometheus has data for, not
    over the whole 12h baseline window (which would make any load look like a surge), and
    there is no baseline at all under diagnosis.min_baseline of it."""
    at = dt.datetime.now(dt.UTC)
    obs = observe(prom_lab["prom"], prom_lab["config"], at, 10.0)
    (engine,), (path,) = obs.engines, obs.paths
    # The off-peak path before the window, computed as the embedded source keeps it.
    assert path.loss_baseline == 0
    assert path.rtt_baseline is not None and 0 < path.rtt_baseline < 0.05
    # The probe sends one request a second (and the fast simulator answers it).
    assert engine.request_rate_baseline is not None
    assert 0.3 < engine.request_rate_baseline < 3, engine.request_rate_baseline
    assert engine.prompt_tokens_baseline is not None and engine.prompt_tokens_baseline > 0
    strict = prom_lab["config"].model_copy(
        update={"diagnosis": DiagnosisConfig(min_baseline="1h")})
    (engine,) = observe(prom_lab["prom"], strict, at, 10.0).engines
    assert engine.request_rate_baseline is None and engine.prompt_tokens_baseline is None
    (probe,) = observe(prom_lab["prom"], strict, at, 10.0).probes
    assert probe.ttft_p95_baseline is None and probe.prompt_tokens_baseline is None


def test_a_window_with_no_data_is_empty_not_zero(prom_lab: dict[str, Any]) -> None:
    # An hour before the lab started: no series, so no windows and no invented numbers.
    obs = observe(prom_lab["prom"], prom_lab["config"], dt.datetime.now(dt.UTC)
                  - dt.timedelta(hours=1), 60.0)
    assert cli.is_empty(obs) and obs.failing_checks == ()


def test_every_query_parses_on_the_real_prometheus(prom_lab: dict[str, Any]) -> None:
    for name, expr in promqueries.all_queries(600.0, Config()).items():
        status, body = http_get(f"{prom_lab['prom']}/api/v1/query?"
                                + urllib.parse.urlencode({"query": expr}))
        assert status == 200, (name, body[:300])


def test_probe_queries_are_evaluated_at_the_engines_last_scrape(prom_lab: dict[str, Any]) -> None:
    """The probes are read up to the engine's last scrape, as the embedded source reads
    them: no later than the window's end, and no older than a scrape the engine could take
    plus the edge's and the central store's scrapes (alignment.py)."""
    config = prom_lab["config"]
    at = time.time()
    success = PromClient(prom_lab["prom"], 10).query(alignment.QUERIES["success"], at)
    assert {s.labels["check"] for s in success} == {"engine/sim"}, success
    t = alignment.probe_time(PromClient(prom_lab["prom"], 10), at, config)
    assert at - alignment.max_lag(config.engines[0], config) - 2 < t < at


# --- the command --------------------------------------------------------------------------


def _verdict() -> Verdict:
    return Verdict("network", "packet_loss", {"carrier": "lab", "probe": "chat"}, ("ttft",),
                   0.9, "Carrier lab loses 6% of packets.",
                   (Evidence("llm_path_packets_lost_per_sent", 0.06, {"carrier": "lab"},
                             0.02, 0.001, "10m"),), ("Move traffic off lab.",))


def _stub_chain(seen: list[Observations]) -> cli.Wiring:
    def chain(config: Config) -> cli.Evaluate:
        def evaluate(obs: Observations) -> Diagnosis:
            seen.append(obs)
            return Diagnosis(obs.at, "1m", obs.source, "degraded", (_verdict(),),
                             (Step("symptom", StepResult.IMPLICATED),))
        return evaluate
    return cli.Wiring(chain, lambda d: f"NOTE {d.status} {d.verdicts[0].summary}")


def test_prometheus_source_runs_the_chain_and_prints_json(
    prom_lab: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[Observations] = []
    rc = cli.main(["--prometheus", prom_lab["prom"], "--window", "1m", "--json",
                   "--config", str(prom_lab["config_path"])], _stub_chain(seen))
    assert rc == cli.EXIT_FOUND
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == SCHEMA_ID and doc["status"] == "degraded"
    assert seen[0].window == 60.0 and seen[0].probes and seen[0].engines
    rc = cli.main(["--prometheus", prom_lab["prom"], "--window", "1m"], _stub_chain([]))
    assert rc == cli.EXIT_FOUND
    assert capsys.readouterr().out.startswith("NOTE degraded Carrier lab")


def test_a_remote_written_store_is_read_query_offset_behind_now(
    prom_lab: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Remote write delivers each series on its own: the window ends where all have arrived.
    config = yaml.safe_load(Path(prom_lab["config_path"]).read_text())
    config.setdefault("diagnosis", {})["query_offset"] = "30s"
    path = tmp_path / "offset.yaml"
    path.write_text(yaml.safe_dump(config))
    seen: list[Observations] = []
    before = dt.datetime.now(dt.UTC)
    cli.main(["--prometheus", prom_lab["prom"], "--window", "1m", "--config", str(path)],
             _stub_chain(seen))
    after = dt.datetime.now(dt.UTC)
    assert before - dt.timedelta(seconds=30) <= seen[0].at <= after - dt.timedelta(seconds=30)
    # An explicit --at is the end the user asked for.
    at = before.replace(microsecond=0)
    cli.main(["--prometheus", prom_lab["prom"], "--window", "1m", "--config", str(path),
              "--at", at.isoformat()], _stub_chain(seen))
    assert seen[1].at == at
    capsys.readouterr()


def test_the_installed_command_prints_json_from_prometheus(prom_lab: dict[str, Any],
                                                           tmp_path: Path) -> None:
    out = subprocess.run(
        exporter_cmd("diagnose", "--prometheus", prom_lab["prom"], "--window", "1m", "--json",
                     "--config", str(prom_lab["config_path"])),
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    # Whatever the chain concludes about the lab, the output is the contract.
    assert out.returncode in (cli.EXIT_HEALTHY, cli.EXIT_FOUND, cli.EXIT_NO_DATA), out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == SCHEMA_ID and doc["source"] == "prometheus"
    assert "Traceback" not in out.stderr


@pytest.mark.timeout(180)
def test_stalls_and_rate_limits_show_in_the_window_they_happened(prom_lab: dict[str, Any]) -> None:
    # Last of the lab's tests: it changes the simulator, and puts it back.
    sim = prom_lab["sim"]
    sim.faults(stall=2.5, mid_stream_after=4, rate_limit_rate=0.3)
    # Each request draws its 429 (30%): five in a window miss it one time in six, so the
    # window is read again, as it slides, until a 429 is in it (or a minute more passed).
    deadline = time.monotonic() + FAULT + 60
    try:
        time.sleep(FAULT)
        while True:
            obs = observe(prom_lab["prom"], prom_lab["config"], dt.datetime.now(dt.UTC),
                          FAULT - 5)
            (probe,) = obs.probes
            if probe.outcomes.get("rate_limited", 0) or time.monotonic() > deadline:
                break
            time.sleep(2)
    finally:
        sim.faults()
    assert probe.outcomes.get("rate_limited", 0) >= 1, probe.outcomes
    assert probe.stalls >= 2 and probe.stalls <= probe.outcomes.get("ok", 0), probe
    # One gap of 2.5s in 15: the P99 of the gaps lies in the bucket holding it.
    assert probe.itl_p99 is not None and 2.0 <= probe.itl_p99 <= 5.0, probe.itl_p99


def diagnose(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(exporter_cmd("diagnose", *args), cwd=cwd, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin",
                                                      "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("args", [
    ("--bogus",),
    ("--window",),
    ("--window", "10x"),
    ("--window", "1.5s"),
    ("--at", "yesterday"),
    ("--at", "2026-11-30T21:40:00"),  # no offset
    ("--exporter", "http://a:1", "--prometheus", "http://b:1"),
    ("--prometheus", "prometheus:9090"),
    ("--config", "/nonexistent/config.yaml"),
    ("--config.file", "/nonexistent/config.yaml"),
    # An exporter answers with its latest diagnosis of its own window: not a silent 10m.
    ("--exporter", "http://127.0.0.1:1", "--window", "1m"),
    ("--window", "1m"),
    ("--at", "2026-11-30T21:40:00Z"),
], ids=lambda a: " ".join(a))
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], tmp_path: Path) -> None:
    out = diagnose(*args, cwd=tmp_path)
    assert out.returncode == cli.EXIT_USAGE, out.stderr
    assert out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("error: ")


def _server(status: int, body: bytes) -> tuple[http.server.HTTPServer, str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(("flag", "status", "body", "says"), [
    ("--prometheus", 503, b'{"status":"error","error":"overloaded"}', "HTTP 503: overloaded"),
    ("--prometheus", 200, b"<html>login</html>", "did not answer with JSON"),
    ("--prometheus", 400, b'{"status":"error","error":"parse error"}', "HTTP 400"),
    ("--exporter", 404, b"404 page not found", "HTTP 404"),
    ("--exporter", 200, b'{"schema":"other/v9"}', "llm-latency-diagnosis/v1"),
], ids=["prom-503", "prom-html", "prom-400", "exporter-404", "exporter-schema"])
def test_a_source_that_fails_is_one_line_and_exit_3(
    flag: str, status: int, body: bytes, says: str, tmp_path: Path
) -> None:
    server, url = _server(status, body)
    try:
        out = diagnose(flag, url, cwd=tmp_path)
    finally:
        server.shutdown()
    assert out.returncode == cli.EXIT_NO_DATA, out.stderr
    (line,) = out.stderr.splitlines()
    assert line.startswith("error: ") and says in line, line


@pytest.mark.parametrize("flag", ["--prometheus", "--exporter"])
def test_an_unreachable_source_is_one_line_and_exit_3(flag: str, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = diagnose(flag, url, cwd=tmp_path)
    assert out.returncode == cli.EXIT_NO_DATA
    assert out.stderr.splitlines() == [f"error: cannot reach {url}: Connection refused"]


def test_unreachable_default_exporter(tmp_path: Path) -> None:
    out = diagnose(cwd=tmp_path)
    assert out.returncode == cli.EXIT_NO_DATA  # nothing listens on 9400 in the tests
    assert cli.DEFAULT_EXPORTER in out.stderr and len(out.stderr.splitlines()) == 1


def test_exporter_source_renders_its_json(capsys: pytest.CaptureFixture[str]) -> None:
    d = Diagnosis(dt.datetime(2026, 11, 30, 13, 40, tzinfo=dt.UTC), "10m", "exporter",
                  "failing", (_verdict(),), (Step("symptom", StepResult.IMPLICATED),))
    server, url = _server(200, json.dumps(d.to_json()).encode())
    try:
        assert cli.main(["--exporter", url, "--json"], _stub_chain([])) == cli.EXIT_FOUND
        assert json.loads(capsys.readouterr().out) == d.to_json()
        assert cli.main(["--exporter", url], _stub_chain([])) == cli.EXIT_FOUND
        assert capsys.readouterr().out.strip() == "NOTE failing Carrier lab loses 6% of packets."
        healthy = {**d.to_json(), "status": "healthy", "verdicts": []}
        server.shutdown()
        server, url = _server(200, json.dumps(healthy).encode())
        assert cli.main(["--exporter", url, "--json"]) == cli.EXIT_HEALTHY
    finally:
        server.shutdown()


@pytest.mark.parametrize(("text", "want"), [
    ("2026-11-30T21:40:00+08:00", dt.datetime(2026, 11, 30, 13, 40, tzinfo=dt.UTC)),
    ("2026-11-30T13:40:00Z", dt.datetime(2026, 11, 30, 13, 40, tzinfo=dt.UTC)),
    ("1796046000", dt.datetime(2026, 11, 30, 13, 40, tzinfo=dt.UTC)),
    ("1796046000.5", dt.datetime(2026, 11, 30, 13, 40, 0, 500000, tzinfo=dt.UTC)),
])
def test_at_takes_rfc3339_and_unix_seconds(text: str, want: dt.datetime) -> None:
    assert cli.parse_at(text) == want


def test_prometheus_error_is_one_line() -> None:
    with pytest.raises(PrometheusError) as exc:
        observe(f"http://127.0.0.1:{free_port()}", Config(), dt.datetime.now(dt.UTC), 60.0)
    assert "\n" not in str(exc.value)
