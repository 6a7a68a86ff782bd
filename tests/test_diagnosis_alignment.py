"""Layers compared over the same span (exporter/diagnosis/alignment.py), from real History
snapshots of a registry filled the way the exporter fills it: the probe's families when a
request ends, the engine's when the engine check scrapes, the check's last-success time.

The race of the README demo: a slow first token starts, the probe's next request ends after
the engine's scrape and before the diagnosis snapshot. Read to the end, the probe's window
holds a slow request the engine's does not, and the chain blames the way between them; read
up to the engine's scrape, it names the engine one snapshot later and nothing before."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from exporter import metrics
from exporter.config.load import parse_config
from exporter.diagnosis import alignment
from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.embedded import observe, observe_window
from exporter.diagnosis.families import raw_samples
from exporter.diagnosis.promapi import Sample
from exporter.diagnosis.result import Diagnosis
from exporter.diagnosis.thresholds import resolve
from exporter.diagnosis.windows import History

CONFIG = parse_config("""
slo: {ttft_p95_seconds: 1.0, tpot_p95_seconds: 0.1}
engines: [{name: demo, url: "http://127.0.0.1:1/metrics", type: vllm, interval: 5s, timeout: 4s}]
probes:
  - {name: chat, url: "http://127.0.0.1:1/v1/chat/completions", model: m, interval: 5s,
     engine: demo}
diagnosis: {window: 60s, interval: 5s, history: 10m}
""")
PROBE = ("chat", "127.0.0.1:1", "short", "", "demo")
ENGINE = ("demo", "vllm", "m", "0")
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0)
#: Seconds into each 5 s snapshot period: a request ends after the engine's scrape.
SCRAPE_AT, REQUEST_ENDS_AT = 3.5, 4.0


@dataclass
class Exporter:
    """The families the chain reads, on a registry, and the engine's requests since its last
    scrape (what the engine knows and the exporter does not yet)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    unscraped: list[float] = field(default_factory=list)
    engine_up: bool = True

    def __post_init__(self) -> None:
        r = self.registry
        self.runs = metrics.EXPORTER_CHECK_RUNS.counter(r)
        self.last_success = metrics.EXPORTER_CHECK_LAST_SUCCESS.gauge(r)
        self.requests = metrics.PROBE_REQUESTS.counter(r).labels(*PROBE, "ok")
        self.ttft = metrics.PROBE_TTFT.histogram(r).labels(*PROBE)
        self.up = metrics.ENGINE_UP.gauge(r).labels("demo")
        self.engine = {f: f.histogram(r, BUCKETS).labels(*ENGINE) for f in (
            metrics.ENGINE_TTFT, metrics.ENGINE_QUEUE_TIME, metrics.ENGINE_PREFILL_TIME,
            metrics.ENGINE_DECODE_TIME, metrics.ENGINE_E2E)}
        for check in ("probe/chat", "engine/demo"):
            self.runs.labels(check, metrics.CHECK_SUCCESS)

    def request(self, ttft: float, at: float) -> None:
        """A probe request ends: the probe's families now, the engine's at its next scrape."""
        self.requests.inc()
        self.ttft.observe(ttft + 0.02)  # the client sees the engine's TTFT and the way
        self.runs.labels("probe/chat", metrics.CHECK_SUCCESS).inc()
        self.last_success.labels("probe/chat").set(at)
        self.unscraped.append(ttft)

    def scrape(self, at: float) -> None:
        if not self.engine_up:
            return
        for ttft in self.unscraped:
            for f, v in ((metrics.ENGINE_TTFT, ttft), (metrics.ENGINE_QUEUE_TIME, 0.002),
                         (metrics.ENGINE_PREFILL_TIME, ttft - 0.002),
                         (metrics.ENGINE_DECODE_TIME, 0.3), (metrics.ENGINE_E2E, ttft + 0.3)):
                self.engine[f].observe(v)
        self.unscraped.clear()
        self.up.set(1)
        self.runs.labels("engine/demo", metrics.CHECK_SUCCESS).inc()
        self.last_success.labels("engine/demo").set(at)


def run(periods: int, fault_from: int, engine_down_from: int | None = None
        ) -> tuple[History, list[tuple[float, Diagnosis, Diagnosis]]]:
    """Snapshots every 5 s; per period an engine scrape, then a probe request that is slow
    from period ``fault_from`` on. Per snapshot: (time, aligned diagnosis, diagnosis of the
    same window read to the end)."""
    ex = Exporter()
    history = History.from_config(CONFIG.diagnosis)
    th = resolve(CONFIG)
    out = []
    for k in range(periods):
        start = 1000.0 + 5 * k
        now = start
        history.record(raw_samples(ex.registry.collect()), now)
        w = history.window_at(now)
        assert w is not None
        aligned = diagnose(observe(history, CONFIG, now), th)
        to_the_end = diagnose(observe_window(w, CONFIG, now, history.baseline, history), th)
        out.append((now, aligned, to_the_end))
        ex.engine_up = engine_down_from is None or k < engine_down_from
        ex.scrape(start + SCRAPE_AT)
        ex.request(1.9 if k >= fault_from else 0.2, start + REQUEST_ENDS_AT)
    return history, out


def primary(d: Diagnosis) -> tuple[str, str] | None:
    return (d.verdicts[0].layer, d.verdicts[0].cause) if d.verdicts else None


def test_a_probe_ahead_of_the_engines_scrape_is_not_blamed_on_the_way_between() -> None:
    fault = 14  # 12 healthy requests in the 60 s window before it
    _, snaps = run(periods=20, fault_from=fault)
    verdicts = [(primary(a), primary(b)) for _, a, b in snaps]
    # The snapshot after the first slow request: read to the end, the probe's P95 is over
    # its SLO while the engine's last scrape has none of it (the race the test can lose).
    first_slow = fault + 1
    assert verdicts[first_slow][1] == ("exporter", "no_data"), verdicts[first_slow]
    # (The probe's and the engine's TTFT histograms have different buckets here, so the
    # split is of means, where one slow request among twelve stays under the network's
    # share: the wrong verdict names no cause rather than the way between.)
    assert "cannot name the cause" in snaps[first_slow][2].verdicts[0].summary
    # Aligned: healthy until the engine has scraped the slow request, then the engine (the
    # first snapshot is before the engine's first scrape: down).
    assert [a for a, _ in verdicts[1:first_slow + 1]] == [None] * first_slow
    assert all(a == ("engine", "slow_prefill") for a, _ in verdicts[first_slow + 1:]), verdicts
    assert all(snaps[i][1].status == "healthy" for i in range(2, first_slow + 1))


def test_the_probe_window_ends_at_the_newest_snapshot_before_the_engines_scrape() -> None:
    history, snaps = run(periods=16, fault_from=99)
    now = snaps[-1][0]
    w = history.window_at(now)
    assert w is not None
    aligned = alignment.probe_windows(w, CONFIG)["chat"]
    scraped = now - 5 + SCRAPE_AT
    assert alignment.scraped_at(w.last, "demo") == scraped
    assert aligned.first is w.first and aligned.last.at == now - 5 <= scraped
    # The probe counted, in its window, only requests the engine had when scraped.
    probe_n = [v for k, v in aligned.increase(f"{metrics.PROBE_TTFT.name}_count")]
    engine_n = [v for k, v in w.increase(f"{metrics.ENGINE_E2E.name}_count")]
    assert probe_n and engine_n and probe_n[0] <= engine_n[0]


def test_a_stale_engine_does_not_hold_the_probe_back() -> None:
    """An engine no longer scraped has its own verdict; the probe is read to the end."""
    history, snaps = run(periods=20, fault_from=99, engine_down_from=14)
    now = snaps[-1][0]
    w = history.window_at(now)
    assert w is not None
    assert now - (alignment.scraped_at(w.last, "demo") or 0) > alignment.max_lag(
        CONFIG.engines[0], CONFIG)
    assert alignment.probe_windows(w, CONFIG)["chat"] is w


def test_prometheus_source_evaluates_the_probes_at_the_oldest_fresh_engine_scrape() -> None:
    def success(check: str, value: float, site: str) -> Sample:
        return Sample({"__name__": alignment.LAST_SUCCESS, "check": check, "site": site},
                      value)

    def scraped(check: str, value: float, site: str) -> Sample:
        return Sample({"check": check, "site": site}, value)

    at = 2000.0
    found = [success("engine/demo", 1996.5, "sh"), success("engine/demo", 1994.0, "bj"),
             success("engine/gone", 1500.0, "sh")]  # stale: its own verdict says so
    taken = [scraped("engine/demo", 1999.0, "sh"), scraped("engine/demo", 1998.0, "bj"),
             scraped("engine/gone", 1999.0, "sh")]
    assert alignment.aligned_time(found, taken, at, CONFIG) == 1994.0
    assert alignment.aligned_time(found[2:], taken[2:], at, CONFIG) == at
    assert alignment.aligned_time([], [], at, CONFIG) == at
