"""The `/` page's parts without a browser: the last-hour points from the embedded windows,
the sparkline SVG, the tiles' numbers and thresholds, the checks table's units, and
escaping and redaction of every string a server or a config can put on the page.
(The page in Chromium: tests/test_page_browser.py.)"""

from __future__ import annotations

import datetime as dt
import math
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from exporter import metrics, redact
from exporter.checks.base import Check
from exporter.checks.batch import Batch
from exporter.config.load import parse_config
from exporter.diagnosis.families import RawSample
from exporter.diagnosis.observations import ClientWindow, Observations, PathWindow, ProbeWindow
from exporter.diagnosis.trends import SPAN, Trends
from exporter.diagnosis.windows import History
from exporter.runtime import page
from exporter.runtime.page import budget as page_budget
from exporter.runtime.page import fmt, tiles
from exporter.runtime.page.spark import sparkline
from exporter.runtime.scheduler import CheckState

CONFIG = """
diagnosis: {interval: 30s, window: 5m, history: 2h}
probes:
  - {name: p, url: 'http://127.0.0.1:1/v1/chat/completions', model: m,
     slo: {ttft_p95_seconds: 0.5}}
"""
PROBE = dict(zip(metrics.PROBE_LABELS, ("p", "127.0.0.1:1", "short", "", ""), strict=True))
T0 = dt.datetime(2026, 12, 1, 3, tzinfo=dt.UTC).timestamp()


def _samples(ok: float, ttft_fast: float, ttft_slow: float) -> list[RawSample]:
    bucket = f"{metrics.PROBE_TTFT.name}_bucket"
    return [
        (metrics.PROBE_REQUESTS.name, {**PROBE, "outcome": "ok"}, ok),
        (bucket, {**PROBE, "le": "0.1"}, ttft_fast),
        (bucket, {**PROBE, "le": "1.0"}, ttft_fast + ttft_slow),
        (bucket, {**PROBE, "le": "+Inf"}, ttft_fast + ttft_slow),
    ]


def test_points_are_the_windows_statistics_step_by_step() -> None:
    """Each coarse step (one a minute) is one point; the last runs to the newest fine
    snapshot; only the last hour is kept; a finished step is computed once."""
    config = parse_config(CONFIG)
    h = History.from_config(config.diagnosis)
    trends = Trends()
    # Two requests a snapshot; all fast for the first 80 minutes, all slow after.
    ok = fast = slow = 0.0
    for i in range(2 * 90 + 2):
        now = T0 + 30 * i
        if i:
            ok += 2
            fast, slow = (fast + 2, slow) if i <= 160 else (fast, slow + 2)
        h.record(_samples(ok, fast, slow), now)
        points = trends.points(h, config, now)
    assert all(p.start >= now - SPAN for p in points) and len(points) == 60
    ends = [p.end for p in points]
    assert ends == sorted(ends) and ends[-1] == now
    per_step = [p.obs.probes[0].requests for p in points]
    assert per_step == [4] * 59 + [2]  # 60 s of two requests every 30 s, then the last 30 s
    ttft = [p.obs.probes[0].ttft_p95 for p in points]
    assert ttft[0] == pytest.approx(0.095) and ttft[-2] == pytest.approx(0.1 + 0.9 * 0.95)
    assert ttft[-1] is not None and ttft[-1] > 0.5
    again = trends.points(h, config, now)
    assert all(a is b for a, b in zip(again[:-1], points[:-1], strict=True))
    # A reload (a new Config object) computes the points again for its SLOs and targets.
    reloaded = parse_config(CONFIG)
    assert trends.points(h, reloaded, now)[0] is not points[0]


def test_a_young_history_has_a_point_from_its_second_snapshot_on() -> None:
    config = parse_config(CONFIG)
    h = History.from_config(config.diagnosis)
    h.record(_samples(0, 0, 0), T0)
    assert Trends().points(h, config, T0) == ()
    h.record(_samples(2, 2, 0), T0 + 30)
    (p,) = Trends().points(h, config, T0 + 30)
    assert (p.start, p.end, p.obs.probes[0].requests) == (T0, T0 + 30, 2)


def _svg(text: str) -> ET.Element:
    return ET.fromstring(text)  # well-formed XML, or this raises


def test_sparkline_draws_lines_gaps_dots_and_the_limit() -> None:
    series = [(0.0, 1.0), (10.0, 2.0), (20.0, None), (30.0, 4.0), (40.0, None),
              (50.0, 3.0), (60.0, 2.0)]
    svg = _svg(sparkline(series, 0, 60, "TTFT <P95>", fmt.seconds, limit=3.5))
    paths = {p.get("class"): p.get("d") for p in svg.iter("path")}
    assert svg.get("data-points") == "5"
    line, dot, limit = paths["line"], paths["dot"], paths["limit"]
    assert line is not None and line.count("M") == 2  # two runs, split at the gap
    assert dot is not None and dot.endswith("h0")  # the lone 4.0 between two gaps
    assert limit is not None and limit.startswith("M0 ")
    title = svg.find("title")
    assert title is not None and title.text == "TTFT <P95>, 5 points: 1.00 s to 4.00 s"
    empty = _svg(sparkline([(0.0, None)], 0, 60, "x", fmt.ratio, top=1.0))
    assert empty.get("data-points") == "0" and not list(empty.iter("path"))


def test_sparkline_stays_inside_its_box() -> None:
    series = [(-100.0, -5.0), (20.0, 0.5), (50.0, math.inf), (150.0, 2.0), (200.0, 1e9)]
    svg = _svg(sparkline(series, 0, 100, "x", fmt.amount, top=1.0))
    assert svg.get("data-points") == "4"  # infinity is a gap
    d = next(p.get("d") for p in svg.iter("path") if p.get("class") == "line")
    assert d is not None and d.count("M") == 2
    numbers = [float(v) for v in d.replace("M", " ").replace("L", " ").split()]
    assert all(0 <= v <= 120 for v in numbers[0::2]) and all(0 <= v <= 32 for v in numbers[1::2])


class Hostile(Check):
    kind = "probe"

    async def run(self) -> None:
        return None

    def describe(self) -> str:
        return "http://user:hunter22@host/v1?key=topsecret <b>bold</b>"

    def batch(self) -> Batch:
        return ()  # owns no series


def _view(diagnosis: dict[str, Any] | None, obs: Observations | None,
          checks: list[tuple[Check, CheckState | None]]) -> page.View:
    return page.View(version="1.0<", config_path="/etc/<x>.yaml",
                     config=parse_config(CONFIG), checks=checks, diagnosis=diagnosis,
                     observations=obs, trend=(), now=T0)


def test_every_string_is_escaped_and_secrets_redacted() -> None:
    redact.remember(["s3cr3t-token-value"])
    check = Hostile("x<script>alert(1)</script>", 0.5, 300)
    state = CheckState(runs=3, last_outcome="error", last_duration=0.0123, last_run_at=T0 - 90,
                       last_error='got "><img src=x onerror=alert(1)> s3cr3t-token-value')
    doc = {"at": "2026-12-01T03:00:00Z", "status": "failing", "source": "exporter",
           "window": "5m", "steps": [],
           "verdicts": [{"layer": "engine", "cause": "<i>c</i>", "scope": {},
                         "summary": "echo http://u:pw12345@h/?t=abc </h3><script>",
                         "evidence": [{"metric": "<m>", "labels": {"a": "<b>"}, "value": 1.5}],
                         "actions": ["<a href=x>"]}]}
    obs = Observations(at=dt.datetime.fromtimestamp(T0, dt.UTC), window=300, source="exporter",
                       probes=(ProbeWindow(probe="p", target="h:1<x>", profile="short"),),
                       paths=(PathWindow(carrier="c", target="t", route_class="<r>"),))
    html = page.document(_view(doc, obs, [(check, state)]))
    for raw in ("<script>alert", "<img", "<i>c", "</h3><script>", "<b>", "<a href=x>", "<m>",
                "<r>", "<x>", "hunter22", "topsecret", "pw12345", "s3cr3t-token-value"):
        assert raw not in html, raw
    assert html.count("<script>") == 1  # the page's own
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;r&gt;" in html
    assert "<redacted>" not in html and "&lt;redacted&gt;" in html


def test_a_pending_verdict_is_one_line_under_the_shown_one() -> None:
    doc = {"at": "2026-12-01T03:00:00Z", "status": "healthy", "source": "exporter",
           "window": "10m", "steps": [], "verdicts": [],
           "pending": {"status": "failing", "since": "2026-12-01T03:00:05Z", "evaluations": 1,
                       "confirm": 3, "verdict": {"layer": "engine", "cause": "<slow>",
                                                 "scope": {}, "summary": "s"}}}
    html = page.document(_view(doc, None, []))
    assert ('<p class="pending">Not yet confirmed: engine / &lt;slow&gt;, 1 of 3 evaluations '
            "in a row since 2026-12-01T03:00:05Z</p>") in html
    assert 'id="verdict"' not in html and "healthy: no verdict" in html
    assert 'class="pending"' not in page.document(_view({**doc, "pending": None}, None, []))


def test_checks_table_units_outcomes_and_age() -> None:
    class Plain(Hostile):
        def describe(self) -> str:
            return "plain"

    fast, slow, new = Plain("a", 0.5, 0.25), Plain("b", 300, 60), Plain("c", 15, 5)
    states: list[tuple[Check, CheckState | None]] = [
        (fast, CheckState(runs=1, last_outcome="success", last_duration=0.0042,
                          last_run_at=T0 - 2)),
        (slow, CheckState(runs=2, last_outcome="timeout", last_duration=60.0,
                          last_run_at=T0 - 600)),
        (new, None),
    ]
    live = page.live(_view(None, None, states))
    rows = live.split('<tr data-check="')[1:]
    assert '<td data-label="interval">500ms</td><td data-label="timeout">250ms</td>' in rows[0]
    assert 'class="o o-success">success<' in rows[0] and ">2s ago<" in rows[0]
    assert ">4.2 ms<" in rows[0]
    assert '<td data-label="interval">5m</td><td data-label="timeout">1m</td>' in rows[1]
    assert 'class="o o-timeout">timeout<' in rows[1] and ">10m ago<" in rows[1]
    assert ">60.00 s<" in rows[1]
    assert 'class="o o-pending">pending<' in rows[2]
    assert "waiting for the first evaluation" in live and 'id="layers"' not in live


def test_tiles_mark_what_is_past_its_threshold() -> None:
    obs = Observations(
        at=dt.datetime.fromtimestamp(T0, dt.UTC), window=300, source="exporter",
        probes=(ProbeWindow(probe="p", target="h", profile="short", requests=20,
                            outcomes={"ok": 18, "timeout": 2}, ttft_p95=0.7, tpot_p95=0.02,
                            slo_ttft=0.5, slo_tpot=0.1),))
    live = page.live(_view(None, obs, []))
    assert 'class="v bad" data-metric="ttft_p95" data-value="0.7">700 ms<' in live
    assert 'class="v" data-metric="tpot_p95" data-value="0.02">20 ms<' in live
    # 90 % success is under 1 - slo.probe_failure_ratio (95 %).
    assert 'class="v bad" data-metric="success" data-value="0.9">90.0 % of 20<' in live
    assert live.count('<svg class="spark"') == 3


def test_a_tile_per_carrier_of_real_users() -> None:
    obs = Observations(
        at=dt.datetime.fromtimestamp(T0, dt.UTC), window=300, source="exporter",
        clients=(ClientWindow(carrier="mobile", connections=42.0, sent=20_000,
                              retransmitted=1000, rtt_mean=0.04, rtt_p95=0.12, in_peak=True),
                 # 10 % of 50 segments: not judged, so not red.
                 ClientWindow(carrier="other", connections=1.0, sent=50, retransmitted=5)))
    live = page.live(_view(None, obs, []))
    tiles = live.split('<article class="tile"')[1:]
    assert [t.split('data-name="')[1].split('"')[0] for t in tiles] == [
        "mobile users", "other users"]
    assert "real users · peak" in tiles[0]
    assert 'data-metric="connections" data-value="42.0">42<' in tiles[0]
    assert ('class="v bad" data-metric="retransmission" data-value="0.05">5.0 % of 20000<'
            in tiles[0])
    assert 'data-metric="rtt" data-value="0.04">40 ms (P95 120 ms)<' in tiles[0]
    assert 'class="v" data-metric="retransmission" data-value="0.1">10.0 % of 50<' in tiles[1]


def test_a_path_tile_shows_its_carriers_probe_streams() -> None:
    """The stream rows of a path tile are the worst of the probes riding it (tagged with
    its carrier); an untagged probe, or one on another carrier, is not on it."""
    def probe(name: str, carrier: str, retransmit: float, out_of_order: float) -> ProbeWindow:
        return ProbeWindow(probe=name, target="h", profile="short", carrier=carrier,
                           requests=20, outcomes={"ok": 20}, tcp_retransmit_ratio=retransmit,
                           tcp_out_of_order_ratio=out_of_order)
    obs = Observations(
        at=dt.datetime.fromtimestamp(T0, dt.UTC), window=300, source="exporter",
        probes=(probe("m1", "mobile", 0.01, 0.09), probe("m2", "mobile", 0.03, 0.0),
                probe("local", "", 0.5, 0.5), probe("u", "unicom", 0.0, 0.0)),
        paths=(PathWindow(carrier="mobile", target="site", sent=100, lost=0, rtt_mean=0.02),
               PathWindow(carrier="unicom", target="site", sent=100, lost=0, rtt_mean=0.02),
               PathWindow(carrier="telecom", target="site", sent=100, lost=0)))
    live = page.live(_view(None, obs, []))
    tiles = {t.split('data-name="')[1].split('"')[0]: t
             for t in live.split('<article class="tile"')[1:]}
    mobile, unicom, telecom = (tiles[f"{c} → site"] for c in ("mobile", "unicom", "telecom"))
    # ICMP clean (loss 0 %), the stream over the 2 % loss line: red.
    assert 'class="v" data-metric="loss" data-value="0.0">0.0 % of 100<' in mobile
    assert ('class="v bad" data-metric="stream_retransmission" data-value="0.03">3.0 %<'
            in mobile)
    assert ('class="v bad" data-metric="stream_out_of_order" data-value="0.09">9.0 %<'
            in mobile)
    assert 'class="v" data-metric="stream_retransmission" data-value="0.0">0.0 %<' in unicom
    # No probe rides telecom: no figure, not a clean one.
    assert f'data-metric="stream_retransmission" data-value="{fmt.attr(None)}"' in telecom


def _widths(markup: str) -> dict[str, float]:
    return {m[0]: float(m[1]) for m in
            re.findall(r'data-part="(\w+)"[^>]*width:([\d.]+)%', markup)}


def test_budget_bar_parts_are_shares_of_the_ttft_or_of_their_sum() -> None:
    row = {"probe": "p", "carrier": "telecom", "ttft": 1.0,
           "parts": {"network": 0.1, "queue": None, "prefill": 0.6, "remainder": 0.3}}
    assert _widths(page_budget.html([row])) == {"network": 10.0, "prefill": 60.0,
                                                "remainder": 30.0}
    # The engine's means over all its requests add up to more than this probe waited: the
    # bar is their sum, each part in proportion, and the excess is said in words.
    row["parts"] = {"network": 0.1, "prefill": 1.1, "remainder": -0.2}
    markup = page_budget.html([row])
    assert _widths(markup) == {"network": pytest.approx(100 / 12, abs=0.01),
                               "prefill": pytest.approx(1100 / 12, abs=0.01)}
    assert "add up to 200 ms more than the client waited" in markup


def test_the_stream_bar_is_the_engines_time_per_token_and_its_delivery() -> None:
    row = {"probe": "p", "ttft": 0.5, "parts": {"prefill": 0.5}, "tpot": 0.05,
           "stream": {"engine": 0.03, "delivery": 0.02}}
    markup = page_budget.html([row])
    stream = markup[markup.index('data-bar="StreamPart"'):]
    assert _widths(stream) == {"engine": 60.0, "delivery": 40.0}
    assert "per output token 50 ms mean" in markup
    # The engine's time per token above what the client saw: the bar is the engine's.
    row["stream"] = {"engine": 0.06, "delivery": -0.01}
    markup = page_budget.html([row])
    assert _widths(markup[markup.index('data-bar="StreamPart"'):]) == {"engine": 100.0}
    assert "add up to 10 ms more than the client waited" in markup
    # No engine time per token: no stream bar.
    assert "StreamPart" not in page_budget.html([{**row, "tpot": None, "stream": {}}])


def test_a_p95_whose_bucket_holds_the_slo_shows_the_bucket() -> None:
    # vLLM's TTFT buckets jump from 250 to 500 ms: a 300 ms SLO sits inside one, and a P95
    # of 400 ms there is the interpolation's, not a measurement.
    grid = (0.1, 0.25, 0.5, 1.0)
    assert tiles.quantile_text(0.4, grid, 0.3) == "400 ms (one bucket: 250 ms to 500 ms)"
    assert tiles.quantile_text(0.4, grid, 1.0) == "400 ms"
    assert tiles.quantile_text(0.4, (), 0.3) == "400 ms"
    assert tiles.quantile_text(None, grid, 0.3) == fmt.NONE
