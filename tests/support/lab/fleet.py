"""The fleet lab: docs/scaling.md run for real, in network namespaces.

    hub ns:      VictoriaMetrics :8428 (the central store), Alertmanager :9093
                   ▲ remote write, alerts (one management link per edge)
    site ns:     engine simulator :8800, the GPU site's exporter (engines, GPU, a local
                 probe) and its edge Prometheus, external label site=lab-gpu
    vp-<carrier> three vantage points, one per carrier: a probe-only exporter (a probe and
                 an ICMP path, both through that carrier's routers and impaired namespace
                 to the site) and its edge Prometheus, external label vantage=<name>

Every edge Prometheus runs ``deploy/prometheus/edge.yml`` as shipped (rendered the way its
header says, with a short interval), with the rules ``generate`` writes for its exporter's
config. Everything listens inside the lab's namespaces; nothing binds a host port, and
``close()`` stops every process by PID and deletes every namespace.
"""

from __future__ import annotations

import json
import re
import string
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from exporter import metrics
from exporter.config.load import load_config
from exporter.monitoring import generate
from tests.support import ROOT
from tests.support.e2e_exporter import loopback_clients
from tests.support.lab.base import NetRun
from tests.support.lab.scenario import CARRIERS, DEFAULT_HOPS, CarrierPath
from tests.support.lab.topology import PROXY_PORT, CarrierLab
from tests.support.prometheus import command as prometheus_command
from tests.support.simulator import simulate_args

#: Debian's name for the Alertmanager binary (as exporter/stack/supervisor.py).
ALERTMANAGER_BINARY = "prometheus-alertmanager"
EDGE_TEMPLATE = ROOT / "deploy" / "prometheus" / "edge.yml"
SITE = "lab-gpu"
#: Each carrier's vantage point, named as in docs/scaling.md.
VANTAGE = {"telecom": "ct-gz", "unicom": "cu-bj", "mobile": "cm-sh"}
SIM_PORT, EXPORTER_PORT, PROMETHEUS_PORT, VM_PORT, AM_PORT = 8800, 9400, 9090, 8428, 9093
#: Scrape and rule evaluation interval of every edge (15s in production).
INTERVAL = "2s"
#: The model the simulator serves.
MODEL = "simulated-model"
#: What every exporter config and the central diagnosis share: a tight TTFT SLO that
#: retransmissions break, one short burn-rate pair so a budget burn pages within the run,
#: and the recording window as the diagnosis window, where the central diagnosis reads the
#: recorded quantiles (the buckets behind them stay at the edges, docs/scaling.md).
SHARED: dict[str, Any] = {
    "peak_windows": {"timezone": "UTC", "windows": {"evening": {"start": "12:00",
                                                               "end": "13:00"}}},
    "slo": {"ttft_p95_seconds": 0.2, "tpot_p95_seconds": 0.1},
    "alerting": {"burn_windows": [{"long": "2m", "short": "1m", "factor": 5, "hold": "10s",
                                   "severity": "critical"}]},
    # The central store gets each series from the edges' remote write on its own: read it
    # as docs/scaling.md says, behind the edges' 5 s send deadline with room for a slow one.
    "diagnosis": {"window": "5m", "interval": "2s", "history": "10m", "min_requests": 3,
                  "query_offset": "15s"},
}
PROBE = {"model": MODEL, "interval": "1s", "max_tokens": 16, "min_spacing": "100ms",
         "timeouts": {"connect": "2s", "first_token": "10s", "total": "20s"}}
ALERTMANAGER = """
route: {receiver: blackhole, group_wait: 1s, group_interval: 5s}
receivers: [{name: blackhole}]
"""


class FleetError(Exception):
    """The fleet could not start; one line."""


@dataclass
class Edge:
    """One exporter and the edge Prometheus beside it, in namespace ``ns``."""

    name: str
    ns: str
    labels: dict[str, str]
    uplink: str  # the hub's address on this edge's management link


def render_edge(labels: dict[str, str], exporter: str, alertmanager: str, remote_write: str,
                interval: str = INTERVAL) -> str:
    """deploy/prometheus/edge.yml filled in, as envsubst would."""
    flow = "{" + ", ".join(f"{k}: {v}" for k, v in labels.items()) + "}"
    return string.Template(EDGE_TEMPLATE.read_text()).substitute(
        EXTERNAL_LABELS=flow, INTERVAL=interval, EXPORTER=exporter,
        ALERTMANAGER=alertmanager, REMOTE_WRITE_URL=remote_write)


def keep_list() -> list[dict[str, Any]]:
    """The ``write_relabel_configs`` of deploy/prometheus/edge.yml."""
    text = render_edge({"vantage": "x"}, "x:1", "x:2", "http://x/api/v1/write")
    rules: list[dict[str, Any]] = yaml.safe_load(text)["remote_write"][0][
        "write_relabel_configs"]
    return rules


def ships(name: str, rules: list[dict[str, Any]] | None = None) -> bool:
    """Whether a series named ``name`` passes the relabel rules, read the way Prometheus
    applies them (anchored regexes, ``;``-joined source labels, an empty value removes the
    label); the fleet test checks this reading against what really arrives."""
    labels = {"__name__": name}
    for rule in keep_list() if rules is None else rules:
        source = ";".join(labels.get(x, "") for x in rule.get("source_labels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), source)
        action = rule.get("action", "replace")
        if (action == "keep" and not match) or (action == "drop" and match):
            return False
        if action == "replace" and match:
            value = match.expand(re.sub(r"\$\{?(\d+)\}?", r"\\\1",
                                        rule.get("replacement", "$1")))
            if value:
                labels[rule["target_label"]] = value
            else:
                labels.pop(rule["target_label"], None)
        elif action not in ("keep", "drop", "replace"):
            raise ValueError(f"relabel action {action!r} is not modelled here")
    return True


def shipped_buckets() -> set[str]:
    """The histogram bucket series the keep-list lets through."""
    return {f"{f.name}_bucket" for f in metrics.SCHEMA.values()
            if f.kind is metrics.Kind.HISTOGRAM and ships(f"{f.name}_bucket")}


def site_config(directory: Path) -> dict[str, Any]:
    """The site's exporter; its real users are the probes' and the load's connections to the
    simulator (``directory`` holds the clients check's CIDR file, beside the config)."""
    local = f"http://127.0.0.1:{SIM_PORT}"
    return {
        "server": {"listen_address": f"127.0.0.1:{EXPORTER_PORT}", "log_level": "warning"},
        **SHARED,
        "engines": [{"name": "sim", "url": f"{local}/metrics", "type": "vllm",
                     "interval": "1s", "timeout": "900ms"}],
        "probes": [{"name": "chat", "url": f"{local}/v1/chat/completions", "engine": "sim",
                    **PROBE}],
        "gpu": {"enabled": True, "interval": "1s"},
        "clients": loopback_clients(SIM_PORT, directory),
    }


def vantage_config(carrier: str, target: str) -> dict[str, Any]:
    return {
        "server": {"listen_address": f"127.0.0.1:{EXPORTER_PORT}", "log_level": "warning"},
        **SHARED,
        "probes": [{"name": "chat", "url": f"http://{target}:{PROXY_PORT}/v1/chat/completions",
                    "carrier": carrier, **PROBE}],
        "paths": {"interval": "2s", "burst": 10, "spacing": "50ms", "timeout": "1500ms",
                  "route_interval": "10s",
                  "carriers": {carrier: [{"name": "site", "host": target, "region": "lab"}]}},
    }


class Fleet(NetRun):
    """The running fleet. Use as a context manager; ``close()`` always cleans up."""

    error = FleetError

    def __init__(self, workdir: Path, peak_for: float, load_seconds: float) -> None:
        super().__init__(workdir)
        self.peak_for = peak_for
        self.load_seconds = load_seconds
        self.hub = ""
        self.edges: dict[str, Edge] = {}
        self.vm: subprocess.Popen[bytes] | None = None
        self.gpu_file = workdir / "gpu.json"
        self.central_config = workdir / "central.yaml"
        self.gpu: dict[str, Any] = {"count": 1, "utilization": 0.6, "memory_used": 0.5}

    # --- start ----------------------------------------------------------------------------
    def start(self) -> None:
        self.carrier_lab = CarrierLab(self.workdir, SIM_PORT, vantage_points=True)
        self.hub = self.net.lab.netns("hub")
        for i, carrier in enumerate(CARRIERS):
            self.net.set_route(carrier, list(DEFAULT_HOPS[carrier]))
            self.net.shape(carrier, CarrierPath(), seed=1)
            c = self.net.carriers[carrier]
            self.edges[VANTAGE[carrier]] = Edge(VANTAGE[carrier], c.client,
                                                {"vantage": VANTAGE[carrier]},
                                                self._uplink(c.client, i))
        self.edges[SITE] = Edge(SITE, self.net.site, {"site": SITE},
                                self._uplink(self.net.site, len(CARRIERS)))
        self.central_config.write_text(yaml.safe_dump(SHARED, sort_keys=False))
        self.start_vm()
        (self.workdir / "alertmanager.yml").write_text(ALERTMANAGER)
        self.spawn(self.hub, "alertmanager", [
            ALERTMANAGER_BINARY,
            f"--config.file={self.workdir / 'alertmanager.yml'}",
            f"--storage.path={self.workdir / 'am'}", f"--web.listen-address=:{AM_PORT}",
            "--cluster.listen-address="])
        self.spawn(self.net.site, "simulator", [
            sys.executable, "-m", "exporter",
            # Per-request timing on: the overview's first-token parts need it, as from vLLM.
            *simulate_args(SIM_PORT, fmt="vllm", host="0.0.0.0", seed=1,
                           enable_per_request_metrics=True)])
        self.wait(lambda: self.get(self.net.site, f"http://127.0.0.1:{SIM_PORT}/health", 1)[0]
                  == 200, 30, "simulator")
        self.write_gpu()
        peak_end = str(time.time() + self.peak_for)
        for carrier in CARRIERS:
            edge = self.edges[VANTAGE[carrier]]
            self._exporter(edge, vantage_config(carrier, self.net.carriers[carrier].target),
                           self.workdir / f"{edge.name}-gpu.json", peak_end)
        self._exporter(self.edges[SITE], site_config(self.workdir), self.gpu_file, peak_end)
        for edge in self.edges.values():
            self._prometheus(edge)
        for edge in self.edges.values():
            self._ready(edge.ns, f"{EXPORTER_PORT}/metrics", f"{edge.name}-exporter")
            self._ready(edge.ns, f"{PROMETHEUS_PORT}/-/ready", f"{edge.name}-prometheus")
        self._ready(self.hub, f"{AM_PORT}/-/ready", "alertmanager")
        self.spawn(self.net.site, "load", [
            sys.executable, "-m", "tests.support.lab.load",
            f"http://127.0.0.1:{SIM_PORT}/v1/chat/completions",
            f"--phase={self.load_seconds}:2:256:32:64"])

    def _ready(self, ns: str, where: str, what: str, timeout: float = 40) -> None:
        url = f"http://127.0.0.1:{where}"
        self.wait(lambda: self.get(ns, url, 2)[0] == 200, timeout, what)

    def _uplink(self, ns: str, index: int) -> str:
        edge_side, hub_side = f"198.18.40.{4 * index + 1}", f"198.18.40.{4 * index + 2}"
        self.net.lab.link(ns, edge_side, self.hub, hub_side)
        return hub_side

    def _exporter(self, edge: Edge, config: dict[str, Any], gpu_file: Path, peak_end: str
                  ) -> None:
        path = self.workdir / f"{edge.name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        if not gpu_file.exists():
            gpu_file.write_text(json.dumps({"count": 0}))
        self.spawn(edge.ns, f"{edge.name}-exporter", [
            sys.executable, "-m", "tests.support.lab.exporter_main", str(path), str(gpu_file),
            peak_end])

    def _prometheus(self, edge: Edge) -> None:
        folder = self.workdir / f"edge-{edge.name}"
        generate.write(load_config(self.workdir / f"{edge.name}.yaml"), folder)
        config = folder / "prometheus.yml"
        config.write_text(render_edge(
            edge.labels, f"127.0.0.1:{EXPORTER_PORT}", f"{edge.uplink}:{AM_PORT}",
            f"http://{edge.uplink}:{VM_PORT}/api/v1/write"))
        self.spawn(edge.ns, f"{edge.name}-prometheus", prometheus_command(
            config, folder / "tsdb", f"127.0.0.1:{PROMETHEUS_PORT}",
            "--storage.tsdb.retention.time=2d"))

    # --- the central store ----------------------------------------------------------------
    def start_vm(self) -> None:
        # Answers include the newest samples (latencyOffset) and never a cached range, so
        # a query right after a write, or after the outage, sees what arrived.
        self.vm = self.spawn(self.hub, "victoria-metrics", [
            "victoria-metrics", f"-storageDataPath={self.workdir / 'vm'}",
            f"-httpListenAddr=:{VM_PORT}", "-search.latencyOffset=1s",
            "-search.disableCache", "-loggerLevel=WARN"])
        self.wait(lambda: self.get(self.hub, f"http://127.0.0.1:{VM_PORT}/health", 1)[0]
                  == 200, 30, "victoria-metrics")

    def stop_vm(self) -> None:
        assert self.vm is not None
        self.net.lab.stop(self.vm)
        self.vm = None

    @property
    def vm_url(self) -> str:
        return f"http://127.0.0.1:{VM_PORT}"

    def api(self, where: str, path: str, **params: str | float) -> Any:
        """``/api/v1/<path>`` of VictoriaMetrics (``where="central"``) or an edge's
        Prometheus (``where=<edge name>``); raises on an error answer."""
        ns = self.hub if where == "central" else self.edges[where].ns
        port = VM_PORT if where == "central" else PROMETHEUS_PORT
        url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        status, body = self.get(ns, url, timeout=30)
        if status != 200:
            raise FleetError(f"{where} {path} {params}: HTTP {status or 'no answer'}: "
                             f"{body[:300]}")
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise FleetError(f"{where} {path}: {doc}")
        return doc["data"]

    def alertmanager_alerts(self) -> list[dict[str, Any]]:
        status, body = self.get(self.hub, f"http://127.0.0.1:{AM_PORT}/api/v2/alerts")
        if status != 200:
            raise FleetError(f"Alertmanager: HTTP {status or 'no answer'}")
        alerts: list[dict[str, Any]] = json.loads(body)
        return alerts

    def diagnose(self) -> dict[str, Any]:
        """The diagnosis's Prometheus source against VictoriaMetrics, as a person runs it."""
        return self.diagnose_in(self.hub, self.vm_url, self.central_config, timeout=90)

    # --- faults ---------------------------------------------------------------------------
    def impair(self, carrier: str, path: CarrierPath) -> None:
        self.net.shape(carrier, path, seed=2)

    def write_gpu(self) -> None:
        self.write_json(self.gpu_file, self.gpu)

    def xid(self, gpu: int, code: int) -> None:
        self.gpu = {**self.gpu, "xids": [*self.gpu.get("xids", []), [gpu, code]]}
        self.write_gpu()
