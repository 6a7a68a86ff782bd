"""``llm-latency-exporter report`` against a real Prometheus that scraped the exporter, the
engine simulator and a TCP path for about a minute and a half.

The config's peak window opens at the first whole minute at least LEAD seconds after the
start (windows are local times of day, minutes apart), and the simulator's first tokens are
slowed from then on: the period is daytime and healthy, then peak and slow. The report's
daytime and peak tables must equal PromQL written here, its HTML must open in headless
Chromium with every plot drawn and every number equal to report.json's.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from exporter.config.models import Config
from exporter.diagnosis.promapi import PromClient
from exporter.report import stats, tables
from exporter.report.checklist import checklist
from exporter.report.model import Report
from exporter.report.routes import timeline
from exporter.report.tables import segments
from tests.support.browser import BrowserSession
from tests.support.e2e_exporter import loopback_clients, loopback_config
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.prometheus import Prometheus, api, require, scrape_config, start_prometheus
from tests.support.simulator import running_simulator
from tests.support.tiers import needs, sleep_until

#: Seconds of daytime at least before the peak window opens, and of peak after.
LEAD = 15.0
PEAK = 30.0
SLOW_FIRST_TOKEN = 0.8

# The lab's setup (up to LEAD + 60 + PEAK seconds, then the report) runs in the first test.
pytestmark = pytest.mark.timeout(300)

#: The daytime/peak split needs no GPU; a second, long-context probe beside ``chat``.
LONG_PROBE = {"name": "long", "interval": "2s", "max_tokens": 8, "profile": "long_context",
              "prompt_tokens": 3000}
DIAGNOSIS = {"window": "20s", "interval": "2s"}


def config_text(exporter: int, sim: int, peak_at: float, tmp: Path) -> str:
    return loopback_config(exporter, sim, peak=(hhmm(peak_at), hhmm(peak_at + 600)),
                           gpu=False, more_probes=[LONG_PROBE], diagnosis=DIAGNOSIS,
                           clients=loopback_clients(sim, tmp))



def hhmm(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M")


def run_report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(exporter_cmd("report", *args), capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
@needs("prometheus", "slow")
def report_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("report")
    start = round(time.time(), 3)  # as --from passes it
    peak_at = (math.floor((start + LEAD) / 60) + 1) * 60.0
    exporter_port = free_port()
    procs: list[Proc] = []
    # Timing each request (vLLM --enable-per-request-metrics) splits the probes' TTFT.
    with running_simulator(fmt="vllm", seed=3, fast=True,
                           enable_per_request_metrics=True) as sim:
        try:
            config = tmp / "config.yaml"
            config.write_text(config_text(exporter_port, sim.port, peak_at, tmp))
            # The same stack with the window twelve hours away: every minute is daytime.
            flat = tmp / "daytime.yaml"
            flat.write_text(config_text(exporter_port, sim.port, peak_at + 43200, tmp))
            procs.append(Proc(exporter_cmd("run", "--config", str(config))))
            exporter = f"http://127.0.0.1:{exporter_port}"
            wait_until(lambda: http_get(f"{exporter}/metrics")[0] == 200, timeout=20,
                       what="exporter")
            prom = start_prometheus(tmp, scrape_config(exporter_port))
            procs.append(prom.proc)
            bench = tmp / "bench.json"
            done = subprocess.run(exporter_cmd(
                "bench", "--url", sim.url, "--model", "simulated-model", "--requests", "12",
                "--concurrency", "2", "--max-tokens", "16", "--json", str(bench)),
                capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            sleep_until(peak_at)
            sim.faults(slow_first_token=SLOW_FIRST_TOKEN)
            sleep_until(peak_at + PEAK)
            end = round(time.time(), 3)
            time.sleep(2)  # Prometheus has scraped up to the end
            out = tmp / "out"
            done = run_report("--prometheus", prom.url, "--config", str(config),
                              "--from", f"{start:.3f}", "--to", f"{end:.3f}",
                              "--bench", str(bench), "--out", str(out))
            assert done.returncode == 0, done.stderr
            yield {"prom": prom.url, "start": start, "peak_at": peak_at, "end": end,
                   "out": out, "config": config, "flat": flat, "bench": bench,
                   "doc": strict_json((out / "report.json").read_text()), "tmp": tmp,
                   "stdout": done.stdout}
        finally:
            for proc in reversed(procs):
                proc.stop()
                proc.stderr_path.unlink(missing_ok=True)


def strict_json(text: str) -> Any:
    """JSON as JSON.parse reads it: Python's own parser takes Infinity and NaN."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"report.json holds {constant}, which is not JSON")
    return json.loads(text, parse_constant=refuse)


def scalar(prom: str, expr: str, at: float) -> float | None:
    result = api(prom, "query", query=expr, time=f"{at:.3f}")["result"]
    assert len(result) <= 1, result
    if not result:
        return None
    value = float(result[0]["value"][1])
    return value if math.isfinite(value) else None


def near(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_writes_three_files_and_the_json_follows_its_schema(report_lab: dict[str, Any]) -> None:
    out: Path = report_lab["out"]
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    assert "wrote" in report_lab["stdout"]
    umask = os.umask(0)
    os.umask(umask)
    # Readable as any file this user writes (mkstemp alone leaves them the owner's only).
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {0o666 & ~umask}
    doc = report_lab["doc"]
    jsonschema.validate(doc, Report.model_json_schema())
    report = Report.model_validate(doc)
    assert report.classes == ["daytime", "evening"]
    assert [s.cls for s in report.spans] == ["daytime", "evening"]
    assert report.spans[1].start.timestamp() == report_lab["peak_at"]
    assert report.class_seconds["evening"] == pytest.approx(report_lab["end"] - report_lab["peak_at"])
    md = (out / "report.md").read_text()
    assert "## Per carrier: daytime and peak" in md and "| TTFT | p95 |" in md


def test_daytime_and_peak_tables_match_promql(report_lab: dict[str, Any]) -> None:
    prom, start, peak_at, end = report_lab["prom"], report_lab["start"], report_lab["peak_at"], report_lab["end"]
    day = f"[{round((peak_at - start) * 1000)}ms] @ {peak_at:.3f}"
    peak = f"[{round((end - peak_at) * 1000)}ms] @ {end:.3f}"
    (carrier,) = report_lab["doc"]["carriers"]
    assert (carrier["vantage"], carrier["carrier"]) == ("", "lab")
    m = {x["metric"]: x for x in carrier["metrics"]}
    hist = {
        "ttft": 'llm_probe_time_to_first_token_seconds_bucket{carrier="lab",profile!="long_context"}',
        "tpot": 'llm_probe_time_per_output_token_seconds_bucket{carrier="lab",profile!="long_context"}',
        "rtt": 'llm_path_rtt_seconds_bucket{carrier="lab"}',
        # The probes' own connections, seen by the clients check on the simulator's port.
        "users_rtt": 'llm_clients_rtt_seconds_bucket{carrier="lab"}',
        # The probes' own connections, as their kernel timed them (TCP_INFO).
        "probe_tcp_rtt": 'llm_probe_tcp_rtt_seconds_bucket{carrier="lab"}',
        # The probes' TTFT by the engine's own timing of each request.
        **{f"ttft_{part}": 'llm_probe_server_timing_seconds_bucket'
                           f'{{carrier="lab",part="{part}",profile!="long_context"}}'
           for part in ("queue", "prefill", "network_frontend")},
    }
    for name, selector in hist.items():
        for cls, rng, at in (("daytime", day, peak_at), ("evening", peak, end)):
            for q in (0.5, 0.95, 0.99):
                want = scalar(prom, f"histogram_quantile({q}, sum by (le) "
                                    f"(increase({selector}{rng})))", at)
                got = m[name]["by_class"][cls][f"p{round(q * 100)}"]
                assert want is not None and near(got, want), (name, cls, q, got, want)
    for name, selector in (("jitter", 'llm_path_jitter_seconds{method="rfc3550"}'),
                           ("loss", "llm_path_loss_ratio")):
        for cls, rng, at in (("daytime", day, peak_at), ("evening", peak, end)):
            want = scalar(prom, f"quantile_over_time(0.95, {selector}{rng})", at)
            assert near(m[name]["by_class"][cls]["p95"], want), (name, cls)
    for cls, rng, at in (("daytime", day, peak_at), ("evening", peak, end)):
        want = scalar(prom, f"1 - sum(increase(llm_path_packets_received_total{rng})) "
                            f"/ sum(increase(llm_path_packets_sent_total{rng}))", at)
        assert near(carrier["loss_ratio"][cls], want)
        want = scalar(prom, f"sum(increase(llm_clients_segments_retransmitted_total{rng})) "
                            f"/ sum(increase(llm_clients_segments_sent_total{rng}))", at)
        assert want is not None and near(carrier["retransmission_ratio"][cls], want)
        for field, part, whole in (
                ("stream_retransmission_ratio", "retransmitted", "sent"),
                ("stream_out_of_order_ratio", "out_of_order", "received")):
            want = scalar(prom, "sum(increase(llm_probe_tcp_segments_total"
                                f'{{carrier="lab",segments="{part}"}}{rng})) / '
                                "sum(increase(llm_probe_tcp_segments_total"
                                f'{{carrier="lab",segments="{whole}"}}{rng}))', at)
            assert want is not None and near(carrier[field][cls], want), (field, cls)
    # The fault ran in the peak window: its TTFT is the slow one, and the difference says so;
    # the engine's timing puts it in the prefill, not the queue or the way in and out.
    ttft = m["ttft"]
    assert ttft["by_class"]["evening"]["p95"] > SLOW_FIRST_TOKEN
    assert ttft["by_class"]["daytime"]["p95"] < SLOW_FIRST_TOKEN
    assert m["ttft_prefill"]["by_class"]["evening"]["p50"] > SLOW_FIRST_TOKEN / 2
    for part in ("ttft_queue", "ttft_network_frontend"):
        assert m[part]["by_class"]["evening"]["p50"] < SLOW_FIRST_TOKEN / 2, part
    assert near(ttft["diff"]["evening"]["p95"],
                ttft["by_class"]["evening"]["p95"] - ttft["by_class"]["daytime"]["p95"])


def test_means_by_part_match_promql_and_add_up_to_the_first_token(
        report_lab: dict[str, Any]) -> None:
    prom, start, peak_at, end = (report_lab["prom"], report_lab["start"], report_lab["peak_at"],
                                 report_lab["end"])
    (carrier,) = report_lab["doc"]["carriers"]
    means = carrier["means"]
    assert list(means) == ["network", "network_frontend", "queue", "prefill", "ttft", "tpot"]
    probe = 'carrier="lab",profile!="long_context"'
    family = {"network": ("llm_probe_tcp_rtt_seconds", 'carrier="lab"'),
              "ttft": ("llm_probe_time_to_first_token_seconds", probe),
              "tpot": ("llm_probe_time_per_output_token_seconds", probe),
              **{p: ("llm_probe_server_timing_seconds", f'{probe},part="{p}"')
                 for p in ("network_frontend", "queue", "prefill")}}
    for cls, (t0, at) in (("daytime", (start, peak_at)), ("evening", (peak_at, end))):
        rng = f"[{round((at - t0) * 1000)}ms] @ {at:.3f}"
        for name, (metric, sel) in family.items():
            want = scalar(prom, f"sum(increase({metric}_sum{{{sel}}}{rng})) / "
                                f"sum(increase({metric}_count{{{sel}}}{rng}))", at)
            assert near(means[name][cls], want), (name, cls, means[name][cls], want)
        # The engine times each probe request's first token in three parts that sum to it.
        parts = sum(means[p][cls] for p in ("network_frontend", "queue", "prefill"))
        assert parts == pytest.approx(means["ttft"][cls], rel=0.05), (cls, means)
        # The budget plot's segments are those parts, the kernel RTT split off the first.
        seg = segments(means, cls)
        assert seg is not None and sum(seg) == pytest.approx(parts)
        assert seg[0] == pytest.approx(min(means["network"][cls], means["network_frontend"][cls]))
    md = (report_lab["out"] / "report.md").read_text()
    assert "| TTFT: prefill | mean |" in md


def test_outcomes_goodput_queue_and_long_context(report_lab: dict[str, Any]) -> None:
    doc, prom, peak_at, end = report_lab["doc"], report_lab["prom"], report_lab["peak_at"], report_lab["end"]
    peak = f"[{round((end - peak_at) * 1000)}ms] @ {end:.3f}"
    outcomes = {o["probe"]: o for o in doc["outcomes"]}
    assert set(outcomes) == {"chat", "long"}
    chat = outcomes["chat"]["by_class"]["evening"]
    want = scalar(prom, f'sum(increase(llm_probe_requests_total{{probe="chat"}}{peak}))', end)
    assert near(chat["requests"], want) and chat["requests"] > 5
    goodput = {g["probe"]: g for g in doc["goodput"]}["chat"]
    assert goodput["by_class"]["daytime"] > goodput["by_class"]["evening"]
    assert goodput["met"]["evening"] is False  # every slow first token misses the SLO
    good = scalar(prom, f'sum(increase(llm_probe_slo_good_total{{probe="chat"}}{peak})) / '
                        f'sum(increase(llm_probe_requests_total{{probe="chat"}}{peak}))', end)
    assert near(goodput["by_class"]["evening"], good)
    (queue,) = doc["queue"]
    assert (queue["target"], queue["model"]) == ("sim", "simulated-model")
    assert sum(b["share"] for b in queue["buckets"]) == pytest.approx(1.0)
    (lc,) = doc["long_context"]
    assert lc["probe"] == "long"
    assert lc["ttft"]["by_class"]["evening"]["p95"] > SLOW_FIRST_TOKEN
    (route,) = doc["routes"]
    assert (route["carrier"], route["target"], route["direction"]) == ("lab", "lo", "out")
    assert sum(route["share"].values()) == pytest.approx(1.0)
    assert doc["bench"]["summary"]["requests"] == 12


def test_the_host_checklist(report_lab: dict[str, Any]) -> None:
    # This lab has no GPU (tests/test_e2e_prometheus.py checks a GPU's rows).
    doc, prom, start, end = (report_lab[k] for k in ("doc", "prom", "start", "end"))
    rows = {c["item"]: c for c in doc["checklist"]}
    span = f"[{round(end - start)}s] @ {end:.3f}"
    swapped = scalar(prom, f"sum(increase(llm_host_swap_pages_total{span}))", end)
    assert near(rows["pages swapped in or out"]["value"], swapped)
    assert rows["pages swapped in or out"]["ok"] is (swapped is not None and swapped < 1)
    lowest = scalar(prom, f"min(min_over_time(llm_host_memory_available_bytes{span})) / "
                          f"max(max_over_time(llm_host_memory_total_bytes{span}))", end)
    assert near(rows["memory available at its lowest"]["value"], lowest)
    # No GPU, and no engine cgroup in this config: no row claims what is not measured.
    assert set(rows) == {"pages swapped in or out", "memory available at its lowest"}
    md = (report_lab["out"] / "report.md").read_text()
    assert "## Host and GPU checklist" in md


def test_the_host_rows_read_node_exporter_where_the_host_check_is_off(
        prometheus: Callable[..., Prometheus], spawn: Callable[..., Proc]) -> None:
    """A real node_exporter (meminfo and vmstat) and no exporter of ours: the checklist's
    host-wide rows are node_exporter's numbers."""
    require("prometheus-node-exporter")
    port = free_port()
    spawn(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{port}",
           "--collector.disable-defaults", "--collector.meminfo", "--collector.vmstat"])
    wait_until(lambda: http_get(f"http://127.0.0.1:{port}/metrics")[0] == 200, timeout=30,
               what="node_exporter ready")
    prom = prometheus(scrape_config(port))
    start = time.time()
    # Three scrapes of the swap counters: an increase over them.
    wait_until(lambda: (scalar(prom.url, "count_over_time(node_vmstat_pswpin[1m])",
                               time.time()) or 0) >= 3, timeout=30, what="three scrapes")
    end = time.time()
    rows = {c.item: c for c in checklist(PromClient(prom.url), Config(), start, end)}
    assert set(rows) == {"pages swapped in or out", "memory available at its lowest"}, rows
    span = f"[{max(60, round(end - start))}s] @ {end:.3f}"
    swapped = scalar(prom.url, f"sum(increase(node_vmstat_pswpin{span})) + "
                               f"sum(increase(node_vmstat_pswpout{span}))", end)
    lowest = scalar(prom.url, f"min(min_over_time(node_memory_MemAvailable_bytes{span})) / "
                              f"max(max_over_time(node_memory_MemTotal_bytes{span}))", end)
    assert swapped is not None and near(rows["pages swapped in or out"].value, swapped)
    assert lowest is not None and near(rows["memory available at its lowest"].value, lowest)
    assert rows["memory available at its lowest"].scope == {"vantage": ""}


def test_verdicts_of_the_period_have_time_and_evidence(report_lab: dict[str, Any]) -> None:
    episodes = report_lab["doc"]["verdicts"]
    slow = [e for e in episodes if (e["layer"], e["cause"]) == ("engine", "slow_prefill")]
    assert slow, f"the slow first tokens got no slow_prefill verdict: {episodes}"
    first = min(slow, key=lambda e: e["start"])
    start = dt.datetime.fromisoformat(first["start"]).timestamp()
    assert first["primary"] and first["scope"] == {"engine": "sim"}
    assert report_lab["peak_at"] <= start <= report_lab["end"]
    assert first["duration_s"] >= 10, episodes
    # The chain's evidence at the episode's end: the prefill time the fault added.
    assert "prefill" in first["summary"]
    assert any(line.startswith("llm_engine_prefill_time_seconds") for line in first["evidence"])


def test_html_opens_offline_with_every_plot_and_the_json_numbers(report_lab: dict[str, Any],
                                                                browser: BrowserSession) -> None:
    doc = report_lab["doc"]
    url = (report_lab["out"] / "report.html").resolve().as_uri()
    with browser.open(url) as tab:
        page = tab.page
        requested: list[str] = []
        page.on("request", lambda r: requested.append(r.url))
        page.reload(wait_until="networkidle")
        images = page.eval_on_selector_all(
            "img", "els => els.map(e => [e.dataset.plot, e.complete, e.naturalWidth,"
                   " e.getBoundingClientRect().height])")
        cells = page.eval_on_selector_all(
            "[data-path]", "els => els.map(e => [e.dataset.path, e.dataset.value ?? null,"
                           " e.textContent])")
        assert "LLM latency acceptance report" in page.locator("h1").inner_text()
        screenshot = tab.screenshot("report")
    assert not tab.problems, tab.problems
    assert all(u.startswith(("file:", "data:")) for u in requested), requested
    plots = {p for p, *_ in images}
    assert {"budget", "carrier-0", "timeline", "outcomes", "queue", "goodput", "bench"} <= plots
    broken = [i for i in images if not (i[1] and i[2] > 0 and i[3] > 50)]
    assert not broken, broken
    assert len(cells) > 50
    for path, value, text in cells:
        want = resolve(doc, path)
        if want is None:
            assert value is None and text == "-", (path, text)
            continue
        assert float(value) == want, (path, value, want)
        # Three significant digits; counts and durations whole.
        whole = re.fullmatch(r"[\d,]+|(\d+h)?(\d+m)?\d+s", text) is not None
        assert shown(text) == pytest.approx(want, rel=0.006, abs=0.5 if whole else 1e-9), (
            path, text, want)
    assert screenshot.stat().st_size > 10_000


def resolve(doc: Any, pointer: str) -> Any:
    for part in pointer.lstrip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def shown(text: str) -> float:
    """A number as the report prints it, back in base units."""
    text = re.sub(r" \(one bucket: [^)]*\)$", "", text).replace(",", "")
    if m := re.fullmatch(r"([+-]?[\d.e+-]+) ms", text):
        return float(m[1]) / 1000
    if m := re.fullmatch(r"([+-]?[\d.e+-]+) ?(%|[a-z/]+)?", text):  # s, req/s, pages, ...
        return float(m[1]) / (100 if m[2] == "%" else 1)
    if m := re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(\d+)?s?", text):
        return int(m[1] or 0) * 3600 + int(m[2] or 0) * 60 + int(m[3] or 0)
    raise AssertionError(f"not a number: {text!r}")


def test_quantiles_inside_one_bucket_say_so_with_the_bucket() -> None:
    # vLLM's queue time: every request under its first bound, 300 ms. The quantiles are
    # the interpolation's (150, 285 and 297 ms), not the data's.
    within = stats.from_buckets({0.3: 100.0, 0.5: 100.0, math.inf: 100.0})
    assert within is not None and within.p95 == pytest.approx(0.285)
    assert within.buckets == {q: (0.0, 0.3) for q in ("p50", "p95", "p99")}
    assert tables.shared_bucket(within, "p95", "s") == " (one bucket: under 300 ms)"
    spread = stats.from_buckets({0.1: 50.0, 0.3: 96.0, 1.0: 100.0, math.inf: 100.0})
    assert spread is not None and spread.buckets["p99"] == (0.3, 1.0)
    assert [tables.shared_bucket(spread, q, "s") for q in ("p50", "p95", "p99")] == [""] * 3
    tail = stats.from_buckets({0.1: 1.0, 0.3: 2.0, math.inf: 100.0})
    assert tail is not None and tail.buckets["p99"] == (0.3, None)
    assert tables.shared_bucket(tail, "p50", "s") == " (one bucket: over 300 ms)"


def test_a_baseline_comparison_marks_the_regression(report_lab: dict[str, Any]) -> None:
    prom, start, peak_at, end, tmp = (report_lab[k] for k in ("prom", "start", "peak_at", "end",
                                                       "tmp"))
    before, after = tmp / "before", tmp / "after"
    done = run_report("--prometheus", prom, "--config", str(report_lab["flat"]), "--from",
                      f"{start:.3f}", "--to", f"{peak_at - 1:.3f}", "--out", str(before))
    assert done.returncode == 0, done.stderr
    done = run_report("--prometheus", prom, "--config", str(report_lab["flat"]), "--from",
                      f"{peak_at + 1:.3f}", "--to", f"{end:.3f}", "--out", str(after),
                      "--baseline", str(before / "report.json"))
    assert done.returncode == 1, done.stderr
    assert "regressions against" in done.stderr and "ttft" in done.stderr
    doc = json.loads((after / "report.json").read_text())
    changes = {c["metric"]: c for c in doc["baseline"]["changes"]}
    ttft = changes["carrier lab ttft p95 daytime"]
    assert ttft["regression"] and ttft["current"] > ttft["baseline"]
    assert not changes["carrier lab rtt p50 daytime"]["regression"] or True
    assert "REGRESSION" in (after / "report.html").read_text()
    # A bench baseline compares with the report's bench run: the same run, no regression.
    same = tmp / "same"
    done = run_report("--prometheus", prom, "--config", str(report_lab["config"]), "--from",
                      f"{start:.3f}", "--to", f"{end:.3f}", "--out", str(same),
                      "--bench", str(report_lab["bench"]), "--baseline", str(report_lab["bench"]))
    assert done.returncode == 0, done.stderr
    bench = json.loads((same / "report.json").read_text())["baseline"]
    assert bench["kind"] == "bench" and not any(c["regression"] for c in bench["changes"])


def test_a_period_without_data_is_exit_3(report_lab: dict[str, Any], tmp_path: Path) -> None:
    done = run_report("--prometheus", report_lab["prom"], "--from", "2020-01-01T00:00:00Z",
                      "--to", "2020-01-01T01:00:00Z", "--out", str(tmp_path / "r"))
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "no llm_ series" in done.stderr
    assert not list((tmp_path / "r").glob("report.*"))


def test_route_changes_skip_unknown_and_wait_for_the_old_class_to_go() -> None:
    share, changes = timeline({1.0: {"cn2_gia"}, 2.0: {"cn2_gia", "chinanet_163"},
                               3.0: {"chinanet_163"}, 4.0: {"unknown"},
                               5.0: {"chinanet_163"}, 6.0: {"cn2_gia"}})
    assert changes == [(3.0, "cn2_gia", "chinanet_163"), (6.0, "chinanet_163", "cn2_gia")]
    assert share == pytest.approx({"chinanet_163": 2 / 6, "cn2_gia": 3 / 6, "unknown": 1 / 6})


@pytest.mark.parametrize(("args", "message"), [
    (("--from", "yesterday"), "--from 'yesterday': expected a duration"),
    (("--from", "2026-01-01T00:00:00"), "needs a UTC offset"),
    (("--from", "1h", "--to", "soon"), "--to 'soon'"),
    (("--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"), "before --to"),
    (("--from", "40d"), "longer than 31 days"),
    (("--from", "1h", "--max-regression", "-1"), "--max-regression"),
    (("--from", "1h", "--baseline", "/nonexistent.json"), "--baseline /nonexistent.json"),
    (("--from", "1h", "--bench", "{config}"), "not JSON"),
    (("--from", "1h", "--baseline", "{bench}"), "needs --bench"),
    (("--from", "1h", "--config", "{bench}"), "--config"),
    (("--from", "1h", "--out", "{config}"), "is not a directory"),
    (("--from", "1h", "--nonsense"), "unrecognized arguments"),
])
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], message: str,
                                         tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("slo: {ttft_p95_seconds: 1}\n")
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"format": "llm-latency-exporter-bench/1", "summary": {}}))
    filled = [a.format(config=config, bench=bench) for a in args]
    if "--out" not in filled:
        filled += ["--out", str(tmp_path / "out")]
    done = run_report("--prometheus", "http://127.0.0.1:9", *filled)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("out/report.*"))


def test_bad_url_and_unreachable_prometheus(tmp_path: Path) -> None:
    done = run_report("--prometheus", "prometheus:9090", "--from", "1h", "--out",
                      str(tmp_path))
    assert done.returncode == 2 and "http:// or https://" in done.stderr
    done = run_report("--prometheus", f"http://127.0.0.1:{free_port()}", "--from", "1h",
                      "--out", str(tmp_path / "r"))
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot reach" in done.stderr
    assert not (tmp_path / "r").exists(), "an empty --out folder left behind"
