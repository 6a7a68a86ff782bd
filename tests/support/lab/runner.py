"""One scenario, end to end: the carrier lab, the engine (the simulator, or the real vLLM
tier's ``vllm serve`` with the tiny model: ``engine.kind``), background load, the real
exporter with the fake NVML (and Prometheus for that source); apply; wait; read the
diagnosis; compare with ``expect``. ``LabRun.rerun`` runs the next scenario on the same
engine (one slow vLLM start for several scenarios): everything but the engine and the
namespaces starts afresh, so no window, history or alert of one scenario reaches the next.

Every process is started through the lab (its own process group, stopped by PID) and every
namespace is deleted in ``LabRun.close()``, which runs on failure, on Ctrl-C and on SIGTERM
too. Everything listens inside the lab's namespaces, so nothing binds a host port.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from exporter import metrics
from exporter.checks.engine.table import rows_for_engine
from exporter.config.load import load_config
from exporter.config.values import format_duration, parse_duration
from exporter.diagnosis.causes import BY_KEY, CLIENT_TIMEOUTS, FRONTEND
from exporter.monitoring import findings, generate
from tests.support.cgroups import CpuCap, Pod
from tests.support.lab.base import NetRun
from tests.support.lab.load import FILLER
from tests.support.lab.scenario import (
    CARRIERS,
    DEFAULT_HOPS,
    CarrierPath,
    Gpu,
    Load,
    Scenario,
)
from tests.support.lab.topology import PROXY_PORT, SITE_ADDR, CarrierLab
from tests.support.netlab import in_netns
from tests.support.procs import FOREGROUND_NICE, ahead_of_load, children_at
from tests.support.prometheus import command as prometheus_command
from tests.support.prometheus import scrape_config
from tests.support.samples import total
from tests.support.simulator import simulate_args
from tests.support.vllm_server import ENV as VLLM_ENV
from tests.support.vllm_server import MODEL_NAME as VLLM_MODEL
from tests.support.vllm_server import START_TIMEOUT as VLLM_START_TIMEOUT
from tests.support.vllm_server import chat as vllm_chat
from tests.support.vllm_server import serve_args

SIM_PORT = 8800
EXPORTER_PORT = 9400
PROMETHEUS_PORT = 9090
#: Load while the lab is healthy, before a scenario applies.
BASELINE_LOAD = Load(rate=2, prompt_tokens=256, max_tokens=32)
#: Defaults of the generated config; a scenario's ``exporter:`` merges over them.
DIAGNOSIS = {"window": "30s", "interval": "2s", "history": "10m", "min_requests": 3}
SLO = {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.1}
#: A lab's history is minutes: the shortest baseline window is as good as 12 h there, and
#: the drift alerts' baseline subqueries run one step per diagnosis.baseline_step of it
#: (2 s here) at every evaluation. Over 12 h they took a whole core of the lab's
#: Prometheus (the prefix-cache and spec-decode alerts, about 1 s of every 1 s), and
#: several labs at once starved the tier (diagnose's queries unanswered within 30 s).
ALERTING = {"baseline_window": "1h"}
DIAGNOSIS_PATH = "/api/v1/diagnosis"
#: Seconds a peak scenario allows its watchers to start before the baseline counts.
PEAK_LEAD = 10
#: The probes' timeouts unless a scenario's ``probes.timeouts`` changes them.
PROBE_TIMEOUTS: dict[str, str | float] = {"connect": "2s", "first_token": "10s", "total": "20s"}
#: The engine's name in the exporter config (the verdicts' ``engine`` scope) and the model
#: it serves, by ``engine.kind``.
ENGINE_NAMES = {"simulator": "sim", "vllm": "vllm"}
MODELS = {"simulator": "simulated-model", "vllm": VLLM_MODEL}


class LabError(Exception):
    """The lab could not run the scenario (not a verdict mismatch); one line."""


def exporter_config(scenario: Scenario, targets: dict[str, str], now: dt.datetime,
                    peak_at: dt.datetime | None = None, engine_cgroup: str | None = None
                    ) -> dict[str, Any]:
    """The exporter config for a scenario: three carriers with a tagged probe and an ICMP
    path each, one untagged probe on the direct link, the engine check and the GPU check;
    the host check on the engine's cgroup where the lab made one."""
    # A peak window that opens at ``peak_at`` (a whole minute), or twelve hours away: the run
    # is off-peak from start to end, whatever the time of day, so no verdict depends on when
    # CI happens to run.
    start = (peak_at or now + dt.timedelta(hours=12)).astimezone(dt.UTC)
    window = {"start": start.strftime("%H:%M"),
              "end": (start + dt.timedelta(minutes=30)).strftime("%H:%M")}
    timeouts: dict[str, str | float] = {
        **PROBE_TIMEOUTS, **{k: format_duration(v) for k, v in scenario.probes.timeouts.items()}}
    interval = scenario.probes.interval
    kind = scenario.engine.kind
    probe = {"model": MODELS[kind],
             "interval": "1s" if interval is None else format_duration(interval),
             "max_tokens": 16, "min_spacing": "100ms", "engine": ENGINE_NAMES[kind],
             "timeouts": timeouts}
    probes = [{"name": "local", "url": f"http://{SITE_ADDR}:{SIM_PORT}/v1/chat/completions",
               **probe}]
    probes += [{"name": c, "url": f"http://{targets[c]}:{PROXY_PORT}/v1/chat/completions",
                "carrier": c, **probe} for c in CARRIERS]
    extra = scenario.exporter
    # Every second, so a 30 s window holds enough; an API server capped at a few percent of
    # a core would spend all of it rendering /metrics that often, so there the users'
    # default (every 5 s, 4 s to answer).
    scrape = {"interval": "1s", "timeout": "900ms"} if scenario.api_server_cpus is None else {}
    return {
        "server": {"listen_address": f"0.0.0.0:{EXPORTER_PORT}", "log_level": "warning"},
        "peak_windows": {"timezone": "UTC", "windows": {"evening": window}},
        "slo": {**SLO, **extra.get("slo", {})},
        "engines": [{"name": ENGINE_NAMES[kind], "url": f"http://{SITE_ADDR}:{SIM_PORT}/metrics",
                     "type": "vllm", **scrape}],
        "probes": probes,
        "paths": {
            "interval": "2s", "burst": 10, "spacing": "50ms", "timeout": "1500ms",
            "route_interval": "10s",
            "carriers": {c: [{"name": "site", "host": targets[c], "region": "lab"}]
                         for c in CARRIERS},
        },
        "gpu": {"enabled": True, "interval": "1s"},
        # The lab's host is the test tier's, shared with every other test: its pressure is
        # theirs, never a scenario's fault. Only the engine's own cgroup is read, where a
        # scenario loads it.
        "host": ({"interval": "1s", "engine_cgroup": engine_cgroup} if engine_cgroup
                 else {"enabled": False}),
        "alerting": {**ALERTING, **extra.get("alerting", {})},
        "diagnosis": {**DIAGNOSIS, **extra.get("diagnosis", {})},
    }


def peak_start(now: dt.datetime, scenario: Scenario) -> dt.datetime:
    """When a peak scenario's window opens: the first whole minute at least its baseline
    after ``now``, with time for the exporter, Prometheus and the load to start."""
    at = now + dt.timedelta(seconds=scenario.baseline + PEAK_LEAD)
    return at.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)


def engine_total(text: str, family: metrics.Family, suffix: str = "") -> float:
    """The sum over the series of one normalized family in a vLLM exposition (the
    simulator's too: it renders vLLM's names), read under the name vLLM serves it as."""
    [row] = [r for r in rows_for_engine("vllm") if r.target is family and not r.legacy]
    return total(text, row.name + suffix)


def _post(url: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        if resp.status != 200:
            raise LabError(f"{url}: HTTP {resp.status}")


class LabRun(NetRun):
    """A running lab for one scenario. Use as a context manager; ``close()`` always cleans up."""

    error = LabError

    def __init__(self, scenario: Scenario, workdir: Path,
                 sources: tuple[str, ...] = ("exporter",)) -> None:
        super().__init__(workdir)
        self.scenario = scenario
        self.sources = sources
        self.sim: subprocess.Popen[bytes] | None = None
        #: What starts afresh for each scenario: the exporter, Prometheus, the load.
        self.watchers: list[subprocess.Popen[bytes]] = []
        self.runs = 1
        #: When a peak scenario's window opens (start_watchers sets it).
        self.peak_at: dt.datetime | None = None
        #: The API server's CPU cap while a scenario holds one.
        self.cap: CpuCap | None = None
        #: The engine's cgroup and the hogs beside it, while a scenario loads its host.
        self.pod: Pod | None = None

    @property
    def gpu_file(self) -> Path:
        return self.workdir / "gpu.json"

    @property
    def config_file(self) -> Path:
        return self.workdir / "config.yaml"

    def client_get(self, path: str, port: int = EXPORTER_PORT, timeout: float = 5) -> tuple[int, str]:
        """GET from inside the client namespace (where the exporter and Prometheus listen)."""
        return self.get(self.net.client, f"http://127.0.0.1:{port}{path}", timeout)

    def engine_metrics(self) -> str:
        """The engine's own exposition, read over the direct link as the engine check does."""
        status, body = self.get(self.net.client, f"http://{SITE_ADDR}:{SIM_PORT}/metrics")
        if status != 200:
            raise LabError(f"the engine's /metrics: HTTP {status or 'no answer'}")
        return body

    def sim_post(self, path: str, body: dict[str, Any]) -> None:
        in_netns(self.net.client, lambda: _post(f"http://{SITE_ADDR}:{SIM_PORT}{path}", body))

    def write_gpu(self, gpu: Gpu) -> None:
        self.write_json(self.gpu_file, gpu.model_dump())

    # --- phases ---------------------------------------------------------------------------
    def start(self) -> None:
        s = self.scenario
        self.carrier_lab = CarrierLab(self.workdir, SIM_PORT)
        for carrier in CARRIERS:
            self.net.set_route(carrier, list(DEFAULT_HOPS[carrier]))
            self.net.shape(carrier, self.first(carrier), s.seed)
        self.start_engine()
        self.start_watchers()

    def start_engine(self) -> None:
        """The simulator, or ``vllm serve`` (the tiny model), on SIM_PORT in the site
        namespace; returned once it answers."""
        s = self.scenario
        if s.engine.kind == "simulator":
            flags: dict[str, Any] = dict(s.simulator.flags)
            self.sim = self.spawn(self.net.site, "simulator", [
                sys.executable, "-m", "exporter", *simulate_args(
                    SIM_PORT, fmt="vllm", host="0.0.0.0", seed=s.seed, **flags)])
            ready, what, timeout = "/health", "simulator", 20.0
        else:
            self.sim = self.spawn(self.net.site, "vllm", serve_args(
                "0.0.0.0", SIM_PORT, *s.engine.serve_flags()), env=VLLM_ENV)
            # Not niced: the carriers' userspace responders and proxies take real-time
            # priority themselves, so a saturated vLLM cannot delay them into jitter, and at
            # niceness 10 the engine got a tenth of a CPU beside the parts tier's other
            # tests (CI at 2c2d9b5: the `healthy` scenario's TTFT P95 2.35 s).
            ready, what, timeout = "/v1/models", "vllm", VLLM_START_TIMEOUT
        proc = self.sim

        def up() -> bool:
            if proc.poll() is not None:
                log = self.logs[what].read_text(errors="replace")[-400:].strip()
                raise LabError(f"{what} exited {proc.returncode} while starting (log: {log})")
            return self.get(self.net.client, f"http://{SITE_ADDR}:{SIM_PORT}{ready}",
                            1)[0] == 200
        self.wait(up, timeout, what)
        if s.engine.kind == "vllm":
            # The API server only (its engine core and worker are its children, started by
            # now, and stay at the tests' niceness): it is light, and what it waits for a
            # CPU is no part of the engine the scenario's SLOs are set for. Once it shared
            # the CPUs with the tier's other tests as they started, a `healthy` probe's TTFT
            # P95 was 1.17 s over its 1 s SLO while vLLM's own P95 was 0.45 s (CI at
            # feb1986), the rest outside the engine. The exporter is raised likewise.
            ahead_of_load(proc.pid)
            self.warm_up()

    def warm_up(self) -> None:
        """A few requests before any scenario: a freshly started vLLM serves its first ones
        slower, partly before its own clock starts (the API server's first chat template and
        detokenizer), so a probe's first answer would be late by time the engine does not
        count, and a healthy scenario read through Prometheus (whose 5m span reaches back to
        the start) would hold it. One alone, then two at once (the batch of two)."""
        base = f"http://{SITE_ADDR}:{SIM_PORT}"
        prompt = " ".join([FILLER] * 200)

        def one() -> None:
            in_netns(self.net.client, lambda: vllm_chat(base, prompt, 16, ignore_eos=True))
        try:
            one()
            with ThreadPoolExecutor(2) as pool:
                list(pool.map(lambda _: one(), range(2)))
        except OSError as exc:
            raise LabError(f"vllm: a warm-up request failed: {exc}") from None

    def engine_at_its_niceness(self) -> None:
        """A real engine whose scenario needs it at its light-load speed (no verdict, the
        clients' own timeouts, whose premise is an engine answering in time, or its API
        server starved while the engine core is not) runs its
        engine core and worker ahead of the tier's other load: its SLOs are set for the CPUs
        it gets alone, and at a light load it takes little of them (CI at eb99541: at the
        tier's busy start, vLLM's own TTFT P95 1.9 s for a mean prefill of 122 ms in
        `healthy`; at df06281, 820 ms in `client-timeouts`, the first scenario). One whose
        scenario slows it stays at the tests' niceness: saturated ahead of them, it would
        hold the other tests' CPUs for minutes (its API server stays ahead, start_engine())."""
        assert self.sim is not None
        light = all(BY_KEY.get((e.layer, e.cause)) in (CLIENT_TIMEOUTS, FRONTEND)
                    for e in self.scenario.expect)
        children_at(self.sim.pid, FOREGROUND_NICE if light else 0)

    def start_watchers(self) -> None:
        """The exporter (with its config and the GPU state), Prometheus and the load."""
        s = self.scenario
        targets = {c: self.net.carriers[c].target for c in CARRIERS}
        now = dt.datetime.now(dt.UTC)
        self.peak_at = peak_start(now, s) if s.peak else None
        if s.host is not None and self.sim is not None and self.pod is None:
            self.pod = Pod(self.sim.pid, f"{self.net.lab.tag}-engine")
            # The engine ahead of the tier's other load, as on a host whose engine has its
            # CPUs: its pod's waits are then the scenario's hogs', not the test machine's
            # (CI at 35a869a..ebdf1a4: the engine alone in its pod waited for a CPU over the
            # 30% line while five other labs ran).
            ahead_of_load(self.sim.pid)
        config = exporter_config(s, targets, now, self.peak_at,
                                 self.pod.name if self.pod is not None else None)
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self.write_gpu(s.gpu.calm() if s.baseline == 0 else Gpu(count=s.gpu.count))
        command = [sys.executable, "-m", "tests.support.lab.exporter_main",
                   str(self.config_file), str(self.gpu_file)]
        if self.pod is not None:
            # `ip netns exec` mounts a fresh /sys without the cgroup file systems: the
            # exporter's host check sees the engine's group once cgroup2 is mounted again
            # (in the namespace's own mount table only).
            command = ["sh", "-c", 'mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec "$@"',
                       "exporter", *command]
        exporter = self.spawn(self.net.client, "exporter", command)
        self.watchers.append(exporter)
        if s.engine.kind == "vllm":  # the prober of a real engine: see start_engine()
            ahead_of_load(exporter.pid)
            self.engine_at_its_niceness()
        if "prometheus" in self.sources:
            generated = self.workdir / "generated"
            generate.write(load_config(self.config_file), generated)
            prom = self.workdir / "prometheus.yml"
            prom.write_text(scrape_config(EXPORTER_PORT, generated / "rules"))
            self.watchers.append(self.spawn(self.net.client, "prometheus", prometheus_command(
                prom, self.workdir / "tsdb", f"127.0.0.1:{PROMETHEUS_PORT}")))
        self.wait(lambda: self.client_get("/metrics", timeout=1)[0] == 200, 30, "exporter")
        if "prometheus" in self.sources:
            self.wait(lambda: self.client_get("/-/ready", PROMETHEUS_PORT, 1)[0] == 200, 30,
                      "prometheus")

        base = s.baseline_simulator
        if base is not None and s.baseline > 0:
            # The known-good state the scenario then changes (applied before any load).
            if base.faults:
                self.sim_post("/admin/faults", base.faults)
            if base.config:
                self.sim_post("/admin/config", base.config)
        phases = []
        if s.baseline > 0:
            phases.append((self.baseline_left(), s.baseline_load or BASELINE_LOAD))
        phases.append((s.settle + 30, s.load))  # outlasts the read, never the run
        self.watchers.append(self.spawn(self.net.site, "load", [
            sys.executable, "-m", "tests.support.lab.load",
            f"http://127.0.0.1:{SIM_PORT}/v1/chat/completions",
            f"--model={MODELS[s.engine.kind]}",
            *(f"--phase={sec}:{p.rate}:{p.prompt_tokens}:{p.max_tokens}:{p.concurrency}"
              f":{p.system_prompt_tokens}:{p.system_prompt}"
              f":{'' if p.temperature is None else p.temperature}" for sec, p in phases)]))

    def rerun(self, scenario: Scenario, idle_timeout: float = 120) -> None:
        """Make the lab ``scenario``'s, on the engine already running (started again if a
        scenario stopped it): stop the exporter, Prometheus and the load, wait until the
        engine has nothing running or waiting, put the carriers back to the new scenario's
        start, and start the rest afresh in a folder of its own (a fresh TSDB, so no alert
        of the last scenario is pending in this one)."""
        if scenario.engine != self.scenario.engine:
            raise LabError(f"rerun needs the same engine: {scenario.engine} is not "
                           f"{self.scenario.engine}")
        for proc in self.watchers:
            self.net.lab.stop(proc)
        self.watchers.clear()
        self.uncap()
        previous, self.scenario = self.scenario, scenario
        self.runs += 1
        self.workdir = self.workdir.parent / f"{self.workdir.name.split('.')[0]}.{self.runs}"
        self.workdir.mkdir()
        for carrier in CARRIERS:
            if previous.path(carrier).hops is not None:
                self.net.set_route(carrier, list(DEFAULT_HOPS[carrier]))
            if self.net.carriers[carrier].path != self.first(carrier):
                self.net.shape(carrier, self.first(carrier), scenario.seed)
        if self.sim is None or self.sim.poll() is not None:
            self.start_engine()
        else:
            self.wait(self.engine_idle, idle_timeout, "load")
        self.start_watchers()

    def uncap(self) -> None:
        if self.cap is not None:
            self.cap.release()
            self.cap = None
        if self.pod is not None:
            self.pod.release()
            self.pod = None

    def close(self) -> None:
        try:
            super().close()  # stops the engine first, so no process is left in the cgroup
        finally:
            self.uncap()

    def engine_idle(self) -> bool:
        text = self.engine_metrics()
        return (engine_total(text, metrics.ENGINE_REQUESTS_RUNNING)
                + engine_total(text, metrics.ENGINE_REQUESTS_WAITING)) == 0

    def first(self, carrier: str) -> CarrierPath:
        """A carrier's shape from the start: the scenario's without a baseline phase."""
        return self.scenario.path(carrier) if self.scenario.baseline == 0 else CarrierPath()

    def apply(self) -> None:
        """The scenario's faults, engine knobs, paths, routes and GPU state."""
        s = self.scenario
        if s.simulator.faults:
            self.sim_post("/admin/faults", s.simulator.faults)
        if s.simulator.config:
            self.sim_post("/admin/config", s.simulator.config)
        for carrier, path in s.paths.items():
            if s.baseline > 0 and path.model_dump(exclude={"hops"}) != CarrierPath().model_dump(
                    exclude={"hops"}):
                self.net.shape(carrier, path, s.seed)
            if path.hops is not None:
                self.net.set_route(carrier, path.hops)
        if s.baseline > 0:
            self.write_gpu(s.gpu.calm())
        if s.api_server_cpus is not None and self.sim is not None:
            self.cap = CpuCap(self.sim.pid, s.api_server_cpus, f"{self.net.lab.tag}-api")
        if s.host is not None and self.pod is not None:
            if s.host.cpu_hog:
                self.pod.cpu_hog(s.host.cpu_hog)
            if s.host.memory_hog:
                self.pod.memory_hog(self.workdir / "memory-hog", s.host.memory_hog)
            if s.host.io_hog:
                self.pod.io_hog(self.workdir / "io-hog")
        if s.simulator.down and self.sim is not None:
            self.net.lab.stop(self.sim)

    def baseline_left(self) -> float:
        """Seconds of the baseline phase from now: ``baseline``, or until the peak opens."""
        if self.peak_at is None:
            return self.scenario.baseline
        return max(0.0, (self.peak_at - dt.datetime.now(dt.UTC)).total_seconds())

    def window(self) -> float:
        """The diagnosis window of the generated config, seconds."""
        return parse_duration({**DIAGNOSIS, **self.scenario.exporter.get("diagnosis", {})
                               }["window"])

    def diagnosis(self, source: str) -> dict[str, Any]:
        window = {**DIAGNOSIS, **self.scenario.exporter.get("diagnosis", {})}["window"]
        if source == "exporter":
            status, body = self.client_get(DIAGNOSIS_PATH)
            if status == 404:
                raise LabError(f"the exporter answers 404 on {DIAGNOSIS_PATH}: the embedded "
                               "diagnosis source is not on this branch yet")
            if status != 200:
                raise LabError(f"GET {DIAGNOSIS_PATH}: HTTP {status or 'no answer'}")
            return json.loads(body)  # type: ignore[no-any-return]
        # The run's own config: its SLOs and diagnosis thresholds, as the exporter's.
        return self.diagnose_in(self.net.client, f"http://127.0.0.1:{PROMETHEUS_PORT}",
                                self.config_file, "--window", str(window))

    def scraped(self, span: float = 3, timeout: float = 60) -> None:
        """Wait until every scrape of the last ``span`` seconds succeeded: one scrape that
        timed out on a loaded machine leaves stale series, and an ``absent()`` alert
        pending for that moment says nothing about the scenario."""
        query = urllib.parse.quote(f'min_over_time(up{{job="llm"}}[{span:g}s])')

        def ok() -> bool:
            status, body = self.client_get(f"/api/v1/query?query={query}",
                                           port=PROMETHEUS_PORT, timeout=5)
            result = json.loads(body)["data"]["result"] if status == 200 else []
            return bool(result) and all(float(r["value"][1]) == 1 for r in result)
        # Named by the log whose tail explains a timeout: the exporter Prometheus scrapes.
        self.wait(ok, timeout, "exporter")

    def alerts(self) -> list[dict[str, str]]:
        """The labels of every alert the generated rules have pending or firing in the run's
        Prometheus (``alertname`` among them)."""
        status, body = self.client_get(
            "/api/v1/query?query=ALERTS", port=PROMETHEUS_PORT, timeout=10)
        if status != 200:
            raise LabError(f"Prometheus ALERTS query: HTTP {status or 'no answer'}")
        found = [dict(s["metric"]) for s in json.loads(body)["data"]["result"]]
        for labels in found:
            labels.pop("__name__", None)
        return sorted(found, key=lambda a: sorted(a.items()))

    def screenshot(self, png: Path) -> None:
        """The exporter's live page, from inside the client namespace where it listens."""
        shot = subprocess.run(
            ["ip", "netns", "exec", self.net.client, sys.executable, "-m",
             "tests.support.lab.shot", f"http://127.0.0.1:{EXPORTER_PORT}/", str(png)],
            capture_output=True, text=True, timeout=90)
        if shot.returncode != 0:
            raise LabError(f"screenshot of the live page: {shot.stderr.strip()[-400:]}")

    def outcome(self, progress: Callable[[str], None] = lambda _: None,
                ) -> dict[str, tuple[dict[str, Any], list[str]]]:
        """Run the scenario on the started lab: baseline, apply, settle, then per source
        the diagnosis JSON and why it misses ``expect``."""
        s = self.scenario
        expect = [e.model_dump() for e in s.expect]
        progress(f"lab up; baseline {self.baseline_left():.0f}s")
        time.sleep(self.baseline_left())
        self.apply()
        progress(f"scenario applied; settling {s.settle:g}s")
        if s.gpu.xids:
            # Raised at the window's middle: an XID older than the window is no verdict, and
            # one from the last seconds might not be read yet.
            early = max(0.0, s.settle - self.window() / 2)
            time.sleep(early)
            self.write_gpu(s.gpu)
            time.sleep(s.settle - early)
        else:
            time.sleep(s.settle)
        out = {}
        for source in self.sources:
            if source == "prometheus":
                self.scraped()
            diagnosis = self.diagnosis(source)
            why = match(expect, diagnosis) + accounting(diagnosis)
            if source == "prometheus":
                why += one_answer(self.alerts(), diagnosis)
            out[source] = (diagnosis, why)
        return out


def misses(name: str, results: dict[str, tuple[dict[str, Any], list[str]]],
           width: int = 4000) -> str:
    """What each source of ``results`` (``LabRun.outcome``) missed, with the start of its
    diagnosis, as one assertion message; empty when every source got what was expected."""
    return "\n".join(f"{name} ({source}): {'; '.join(found)}\n"
                     f"{json.dumps(doc, indent=1)[:width]}"
                     for source, (doc, found) in results.items() if found)


def match(expect: list[dict[str, Any]], diagnosis: dict[str, Any]) -> list[str]:
    """Why ``diagnosis`` does not meet ``expect`` ([] when it does). The first expected
    verdict must be the primary one; the others must follow in the listed (chain) order;
    an empty ``expect`` means no verdict and status ``healthy``. A scope matches on the keys
    expected."""
    verdicts = diagnosis.get("verdicts", [])
    if not expect:
        if verdicts:
            return [f"expected no verdict, got {_names(verdicts)}"]
        # No verdict because nothing could be decided is not healthy.
        status = diagnosis.get("status")
        return [] if status == "healthy" else [f"expected status 'healthy', got {status!r}"]
    if not verdicts:
        return [f"expected {_names(expect)}, got no verdict (status "
                f"{diagnosis.get('status')!r})"]

    def fits(want: dict[str, Any], got: dict[str, Any]) -> bool:
        scope = got.get("scope", {})
        return (want["layer"], want["cause"]) == (got["layer"], got["cause"]) and all(
            scope.get(k) == v for k, v in want.get("scope", {}).items())

    if not fits(expect[0], verdicts[0]):
        return [f"expected primary {_names(expect[:1])}, got {_names(verdicts)}"]
    rest = iter(verdicts[1:])
    for want in expect[1:]:
        if not any(fits(want, got) for got in rest):
            return [f"expected {_names([want])} after the primary, in chain order; got "
                    f"{_names(verdicts)}"]
    return []


#: A primary verdict that explains a slow first token accounts for at least this share of it.
ACCOUNTED = 0.5


def accounting(diagnosis: dict[str, Any]) -> list[str]:
    """Why the primary verdict does not account for the slow first tokens it explains ([]
    when it does): over its probes, its own parts of the budget (``Cause.parts``) must hold at
    least ACCOUNTED of the excess, the share of each TTFT P95 over its SLO taken of that
    probe's mean TTFT (what the parts sum to). A cause with no part of the first token (a
    slow decode, a 429) is not asked."""
    verdicts = diagnosis.get("verdicts") or []
    cause = BY_KEY.get((verdicts[0]["layer"], verdicts[0]["cause"])) if verdicts else None
    if cause is None or not cause.parts or "ttft" not in verdicts[0].get("symptoms", ()):
        return []
    budget = {b["probe"]: b for b in diagnosis.get("budget") or []}
    covered = excess = 0.0
    for e in verdicts[0].get("evidence") or []:
        row = budget.get(e.get("labels", {}).get("probe"))
        slo, p95 = e.get("threshold"), e.get("value")
        if e["metric"] != metrics.PROBE_TTFT.name or row is None or not slo or p95 <= slo:
            continue
        excess += row["ttft"] * (p95 - slo) / p95
        covered += sum(row["parts"].get(str(p)) or 0.0 for p in cause.parts)
    if excess and covered < ACCOUNTED * excess:
        return [f"primary {cause} accounts for {covered:.3f} s of the {excess:.3f} s its probes'"
                f" mean TTFTs are over (its parts: {', '.join(cause.parts)})"]
    return []


def one_answer(alerts: list[dict[str, str]], diagnosis: dict[str, Any]) -> list[str]:
    """Why the alerts pending or firing and the verdicts are not one answer ([] when they
    are): each alert maps onto a verdict's cause and scope and each verdict of a paging cause
    has its alert (exporter/monitoring/findings.py); a healthy verdict pages nobody, not
    even pending."""
    if diagnosis.get("status") == "healthy":
        return [f"status healthy, yet alert {findings.show(a)} is pending or firing"
                for a in alerts]
    return findings.unmatched(alerts, diagnosis.get("verdicts") or [])


def _names(verdicts: list[dict[str, Any]]) -> str:
    def one(v: dict[str, Any]) -> str:
        scope = ",".join(f"{k}={x}" for k, x in v.get("scope", {}).items())
        return f"{v['layer']}/{v['cause']}" + (f"{{{scope}}}" if scope else "")
    return "[" + ", ".join(one(v) for v in verdicts) + "]"


def run_scenario(scenario: Scenario, workdir: Path, sources: tuple[str, ...],
                 progress: Callable[[str], None] = lambda _: None,
                 screenshot: Path | None = None,
                 ) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Run one scenario in a lab of its own; per source, the diagnosis and why it misses
    ``expect`` (the lab's CLI; tests take the ``scenario_lab`` fixture). ``screenshot``:
    the exporter's live page once the diagnosis is read, saved there (PNG)."""
    with LabRun(scenario, workdir, sources) as run:
        out = run.outcome(progress)
        if screenshot is not None:
            run.screenshot(screenshot)
        return out
