"""The two diagnosis sources agree, declaration by declaration, on the same recorded series.

An hour of a small fleet (tests/support/recorded.py) goes into the embedded history tick by
tick and, as OpenMetrics, into a real Prometheus (``promtool tsdb create-blocks-from
openmetrics``). Every declaration of ``observables.TABLES`` is then evaluated both ways over
the last ten minutes, baselines included, and the values must be equal per key: a new
declaration is covered without a line here, and one that no recorded series gives a value
fails.

The samples lie on a grid (every 10 s, the window and the baseline steps on whole minutes),
so the embedded window's start snapshot is a sample at the range's start. Prometheus 2
selects ``[t - w, t]``: its ``increase()`` then has nothing to extrapolate and equals the
embedded last-minus-first, and the over-time leaves, which the embedded windows take over
``(start, end]`` as Prometheus 3 selects a range, are read 1 ms after ``t``, where the
selector holds the same samples.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from exporter import metrics
from exporter.config.load import parse_config
from exporter.config.models import Config
from exporter.diagnosis import declare, embedded, families, observables, prometheus
from exporter.diagnosis import promqueries as pq
from exporter.diagnosis.observations import (
    ClientWindow,
    EngineWindow,
    GpuWindow,
    PathWindow,
    ProbeWindow,
)
from exporter.diagnosis.promapi import PromClient
from exporter.diagnosis.windows import History
from exporter.metrics import names
from tests.support import recorded
from tests.support.procs import Proc, free_port, http_get, wait_until
from tests.support.prometheus import command, require
from tests.support.tiers import needs

WINDOW = 600.0
CONFIG = """
diagnosis: {window: 10m, interval: 10s, history: 6h, min_baseline: 10m}
alerting: {route_lookback: 2h}
"""


@pytest.fixture(scope="module")
def config() -> Config:
    return parse_config(CONFIG)


@pytest.fixture(scope="module")
@needs("prometheus")
def fleet(tmp_path_factory: pytest.TempPathFactory, config: Config
          ) -> Iterator[dict[str, Any]]:
    require()
    require("promtool")
    tmp = tmp_path_factory.mktemp("agreement")
    # Whole ten minutes, a few hours back: inside any retention, outside the head block.
    start = (time.time() - 3 * 3600) // 600 * 600
    ticks = list(recorded.ticks(start))
    history = History.from_config(config.diagnosis)
    for at, samples in ticks:
        history.record(samples, at)
    (tmp / "fleet.om").write_text(recorded.openmetrics(ticks))
    tsdb = tmp / "tsdb"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                    str(tmp / "fleet.om"), str(tsdb)], check=True, capture_output=True,
                   timeout=120)
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
    port = free_port()
    proc = Proc(command(tmp / "prometheus.yml", tsdb, f"127.0.0.1:{port}",
                        "--storage.tsdb.retention.time=30d"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http_get(f"{url}/-/ready")[0] == 200, timeout=30,
                   what=f"prometheus ready\n{proc.output()[-2000:]}")
        yield {"history": history, "end": ticks[-1][0], "url": url}
    finally:
        proc.stop()


def _answers(url: str, end: float, window: float, config: Config) -> prometheus.Results:
    """Every query of the window ending at ``end``, each leaf answered where the server's
    range selector holds the embedded window's samples."""
    client = PromClient(url)
    answers = {}
    for planned, expr in pq.plan(window, config).items():
        leaf = planned[0]
        at = end + 0.001 if leaf is not None and leaf.open_start else end
        answers[planned] = client.query(expr, at)
    return answers


def _prometheus_context(fleet: dict[str, Any], config: Config) -> declare.Evaluation:
    return prometheus.context(_answers(fleet["url"], fleet["end"], WINDOW, config), config,
                              WINDOW)


@pytest.fixture(scope="module")
def contexts(fleet: dict[str, Any], config: Config) -> tuple[declare.Evaluation, declare.Evaluation]:
    history: History = fleet["history"]
    w = history.window_at(fleet["end"])
    assert w is not None and w.span == WINDOW
    mine = embedded.Evaluator(w, history.baseline, history, config).context()
    assert history.baseline.ready, history.baseline.seconds
    return mine, _prometheus_context(fleet, config)


ALL = [(table, o) for table in observables.TABLES for o in table]


@pytest.mark.parametrize(("table", "observable"), ALL,
                         ids=[f"{o.kind.name}.{o.field}" for _, o in ALL])
def test_both_sources_give_the_same_numbers(
    contexts: tuple[declare.Evaluation, declare.Evaluation], table: tuple[declare.Observable, ...],
    observable: declare.Observable,
) -> None:
    mine, theirs = contexts
    got = declare.evaluate(observable.expr, observable.kind, mine)
    want = declare.evaluate(observable.expr, observable.kind, theirs)
    assert got, f"no recorded series gives {observable.field} a value"
    assert sorted(got) == sorted(want), (got, want)
    for key, value in got.items():
        assert math.isclose(value, want[key], rel_tol=1e-9, abs_tol=1e-9), (key, value,
                                                                            want[key])


def test_every_field_is_declared_once() -> None:
    """Each table fills fields of its window, none twice, and every measured field of a
    window has its row: what a new observation adds."""
    # What names a window, the config's own values, and the sum of the outcomes.
    named = {"target", "vantage", "site"}
    for table, window, identity in (
        (observables.PROBE_TABLE, ProbeWindow, {"probe", "profile", "carrier", "engine",
                                                "requests", "slo_ttft", "slo_tpot",
                                                "timeout_total"}),
        (observables.PATH_TABLE, PathWindow, {"carrier", "region", "protocol"}),
        (observables.ENGINE_TABLE, EngineWindow, {"engine"}),
        (observables.GPU_TABLE, GpuWindow, {"gpu", "name", "engine"}),
        (observables.CLIENTS_TABLE, ClientWindow, {"carrier"}),
    ):
        fields = [o.field for o in table]
        assert len(fields) == len(set(fields)), fields
        assert set(fields) == {f.name for f in dataclasses.fields(window)} - identity - named


def test_the_recorded_fleet_gives_every_sample_a_declaration_reads() -> None:
    """The samples the history keeps are derived from the declarations (families.py): a new
    observation over a sample the recorded fleet lacks fails here, by name, before the
    comparison above finds no value for it."""
    given = {name for _, samples in recorded.ticks(0.0) for name, _, _ in samples}
    missing = set(families.KINDS) - given - {families.ALIGNMENT}
    assert not missing, f"tests/support/recorded.py gives no {sorted(missing)}"


def test_the_embedded_history_keeps_every_sample_a_declaration_reads() -> None:
    """A row over a family the history does not keep would be absent from the exporter
    alone: the window families hold every sample, the coarse ones every baseline's."""
    for table in observables.TABLES:
        for o in table:
            for leaf, base in declare.in_baseline(o.expr):
                if isinstance(leaf, declare.Quantile | declare.Grid):
                    sample = f"{leaf.family.name}_bucket"
                elif isinstance(leaf, declare.InPeak):
                    sample = o.kind.presence
                elif isinstance(leaf, declare.PeakRatio):
                    # Read over the whole history: the coarse snapshots must keep both.
                    for sample in (leaf.num, leaf.den):
                        assert sample in families.COARSE_SAMPLES, (o.field, sample)
                    continue
                else:
                    assert isinstance(leaf, declare.Increase | declare.MeanOverTime
                                      | declare.MaxOverTime | declare.Last | declare.Seen)
                    sample = leaf.sample
                assert sample in families.KINDS, (o.field, sample)
                assert not base or sample in families.COARSE_SAMPLES, (o.field, sample)


def test_the_observations_agree_too(fleet: dict[str, Any], config: Config) -> None:
    """The windows both sources hand the chain, built from those values, are the same
    windows (the Prometheus one finds its keys in the data, the embedded one in the
    config, so the fleet's config names what the data holds)."""
    history: History = fleet["history"]
    end = fleet["end"]
    full = parse_config(CONFIG + _fleet_config())
    mine = embedded.observe(history, full, end)
    theirs = prometheus.observations(_answers(fleet["url"], end, WINDOW, full), full,
                                     dt.datetime.fromtimestamp(end, dt.UTC), WINDOW)
    assert [p.probe for p in mine.probes] == [p.probe for p in theirs.probes]
    for a, b in zip(mine.probes, theirs.probes, strict=True):
        assert _same(a, b)
    for path_a, path_b in zip(mine.paths, sorted(theirs.paths, key=lambda p: p.carrier),
                              strict=True):
        assert _same(path_a, path_b)
    assert sorted(c.carrier for c in mine.clients) == sorted(recorded.CLIENTS)
    for client_a, client_b in zip(sorted(mine.clients, key=lambda c: c.carrier),
                                  sorted(theirs.clients, key=lambda c: c.carrier), strict=True):
        assert _same(client_a, client_b)
    # Both gauges held the clocks: gpu 0 throttled in the window, gpu 1 had its XID.
    assert [g.clock_events for g in mine.gpus] == [g.clock_events for g in theirs.gpus]
    assert [g.xid_errors for g in mine.gpus] == [g.xid_errors for g in theirs.gpus] == [0, 1]
    assert mine.failing_checks == theirs.failing_checks == ("engine/triton",)
    main = next(e for e in theirs.engines if e.engine == "main")
    assert _same(next(e for e in mine.engines if e.engine == "main"), main)


def _same(a: object, b: object) -> bool:
    """Equal fields, floats within rounding; the fields only one source knows aside (the
    fleet labels the local exporter's own samples do not carry)."""
    skip = {"site", "vantage"}
    for name, x in vars(a).items():
        y = vars(b)[name]
        if name in skip:
            continue
        if isinstance(x, float) and isinstance(y, float):
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9), (name, x, y)
        elif isinstance(x, dict) and x and all(isinstance(v, float) for v in x.values()):
            # per-rank means: one value per key, within rounding
            assert sorted(x) == sorted(y), (name, x, y)
            assert all(math.isclose(v, y[k], rel_tol=1e-9) for k, v in x.items()), (name, x, y)
        else:
            assert x == y, (name, x, y)
    return True


def _fleet_config() -> str:
    probes = "".join(
        f"  - {{name: {p}, url: 'https://{t}/v1/chat/completions', model: m, profile: {pr},"
        f" carrier: {c}, engine: {e}}}\n" for p, t, pr, c, e in recorded.PROBES)
    paths = "".join(
        f"    {c}: [{{name: {t}, host: 127.0.0.1, region: {r}, protocol: {proto}"
        f"{', port: 443' if proto == 'tcp' else ''}}}]\n" for c, t, r, proto in recorded.PATHS)
    carriers = ", ".join(f"{c}: {c}.txt" for c in recorded.CLIENTS
                         if c != metrics.CLIENTS_OTHER_CARRIER)
    return (f"probes:\n{probes}paths:\n  carriers:\n{paths}"
            f"clients: {{ports: [{recorded.CLIENT_PORT}], carriers: {{{carriers}}}}}\n"
            "engines:\n  - {name: main, url: 'http://127.0.0.1:1/metrics'}\n"
            "  - {name: triton, url: 'http://127.0.0.1:2/metrics'}\n")


def test_the_recording_window_reads_the_recorded_series(config: Config) -> None:
    """Over names.RATE the quantiles and the baselines the rules record are read as they
    are (what a fleet's central store has); over any other window they are computed, as
    above. No exact agreement is asked of those: a rule's group evaluates at instants of its
    own (offset by a hash of its name), so the recorded value at the window's end is the
    one of a few seconds before (tests/test_diagnosis_prometheus.py checks them against the
    exporter's counts on a live server)."""
    five = "\n".join(pq.all_queries(300.0, config).values())
    ten = "\n".join(pq.all_queries(WINDOW, config).values())
    for series in (names.PROBE_TTFT.p95, names.ENGINE_ITL.p95, names.PROBE_TTFT_PEAK.baseline,
                   names.PATH_LOSS_BASELINE):
        assert series in five and series not in ten
    assert f"{metrics.PROBE_TTFT.name}_bucket" in ten
    assert f"{metrics.PROBE_TTFT.name}_bucket" not in five
    # Nor the bucket grids: the buckets stay at a fleet's edge, the bounds are unknown there.
    assert f"{metrics.ENGINE_TTFT.name}_bucket" in ten
    assert f"{metrics.ENGINE_TTFT.name}_bucket" not in five

