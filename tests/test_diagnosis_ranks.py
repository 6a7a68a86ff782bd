"""The chain on data-parallel ranks and histogram resolution, from observations built
directly: one rank far above its peers is engine/imbalance scoped to it (its queue taken
over from engine/queueing), the evidence of an engine quantile says which bucket bounds it
lies between, and the client-minus-engine split never subtracts P95s of two bucket grids."""

from __future__ import annotations

import datetime as dt
import json
import math
from importlib import resources
from typing import Any

import jsonschema
import pytest

from exporter import metrics
from exporter.config.load import parse_config
from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.embedded import observe
from exporter.diagnosis.families import RawSample
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.result import Diagnosis, Evidence
from exporter.diagnosis.steps.network import MEAN_SPLIT
from exporter.diagnosis.steps.words import bucket_of
from exporter.diagnosis.text import render
from exporter.diagnosis.windows import History
from tests.support.observations import all_probes, healthy, with_engine, with_probe

SCHEMA = json.loads(resources.files("exporter.diagnosis").joinpath("schema.json").read_text())
#: vLLM's default TTFT buckets (tests/fixtures/engines/vllm-0.32.0-cpu-metrics.txt).
VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
PROBE_TTFT = tuple(b for b in metrics.PROBE_TTFT.buckets or ())
QUEUED = dict(queue_seconds=900.0, waiting=25.0, running=64.0, ttft_p95=2.4)


def _json(d: Diagnosis) -> dict[str, Any]:
    doc = d.to_json()
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    return doc


def _causes(d: Diagnosis) -> list[tuple[str, str, dict[str, str]]]:
    return [(v.layer, v.cause, dict(v.scope)) for v in d.verdicts]


# --- data-parallel imbalance ----------------------------------------------------------------

def test_one_ranks_queue_is_its_imbalance_not_the_engines_capacity() -> None:
    ranks = {("ds", "0"): 1.0, ("ds", "1"): 0.5, ("ds", "2"): 23.5}
    d = diagnose(all_probes(with_engine(healthy(), waiting_by_rank=ranks, **QUEUED),
                            ttft_p95=2.6))
    assert _causes(d) == [("engine", "imbalance", {"engine": "main", "dp_rank": "2"})], render(d)
    v = d.verdicts[0]
    assert "rank 2 (ds) has 23.5 requests waiting on average against 0.75 on its peers" in \
        v.summary, v.summary
    # The queue split stays in the evidence; the rank's line is max(5, 2 x 0.75).
    waiting = [e for e in v.evidence if e.metric == metrics.ENGINE_REQUESTS_WAITING.name
               and e.labels.get("dp_rank") == "2"]
    assert waiting and waiting[0].threshold == 5.0
    assert any(e.metric.startswith("queue / (queue") for e in v.evidence)
    assert set(v.symptoms) == {"ttft"}
    doc = _json(d)
    assert doc["verdicts"][0]["scope"] == {"engine": "main", "dp_rank": "2"}


def test_even_ranks_under_load_are_queueing() -> None:
    ranks = {("ds", "0"): 12.0, ("ds", "1"): 13.0}
    d = diagnose(all_probes(with_engine(healthy(), waiting_by_rank=ranks, **QUEUED),
                            ttft_p95=2.6))
    assert _causes(d) == [("engine", "queueing", {"engine": "main"})], render(d)


def test_the_floor_and_the_ratio_both_hold() -> None:
    for ranks in ({("ds", "0"): 0.0, ("ds", "1"): 4.5},  # 4.5 against 0: under the floor
                  {("ds", "0"): 6.0, ("ds", "1"): 11.0},  # over the floor, under 2x
                  {("ds", "1"): 40.0},  # one rank: no peers
                  {("ds", "0"): 0.0, ("qwen", "1"): 30.0}):  # ranks of two models
        d = diagnose(with_engine(healthy(), waiting_by_rank=ranks))
        assert d.status == "healthy", (ranks, render(d))


def test_a_ranks_kv_cache_far_above_its_peers_is_degraded_before_users_feel_it() -> None:
    kv = {("ds", "0"): 0.35, ("ds", "1"): 0.4, ("ds", "2"): 0.9}
    d = diagnose(with_engine(healthy(), kv_by_rank=kv))
    assert d.status == "degraded", render(d)
    assert _causes(d) == [("engine", "imbalance", {"engine": "main", "dp_rank": "2"})]
    assert "no probe is past its SLO over the last " in d.verdicts[0].summary
    kv_ev = d.verdicts[0].evidence[0]
    assert kv_ev.metric == metrics.ENGINE_KV_CACHE_USAGE.name
    assert kv_ev.value == 0.9 and kv_ev.threshold is not None
    assert abs(kv_ev.threshold - 0.675) < 1e-9  # the peers' 0.375 + 0.3


def test_a_rank_over_both_lines_is_one_verdict_with_both_in_evidence() -> None:
    d = diagnose(with_engine(healthy(), waiting_by_rank={("ds", "0"): 1.0, ("ds", "1"): 9.0},
                             kv_by_rank={("ds", "0"): 0.3, ("ds", "1"): 0.8}))
    assert _causes(d) == [("engine", "imbalance", {"engine": "main", "dp_rank": "1"})]
    metrics_read = {e.metric for e in d.verdicts[0].evidence}
    assert {metrics.ENGINE_REQUESTS_WAITING.name, metrics.ENGINE_KV_CACHE_USAGE.name} <= \
        metrics_read


def test_no_imbalance_from_an_engine_that_is_down() -> None:
    d = diagnose(all_probes(with_engine(healthy(), up=False,
                                        waiting_by_rank={("ds", "0"): 0.0, ("ds", "1"): 30.0}),
                            outcomes={"connect_error": 20}, ttft_p95=None, tpot_p95=None))
    assert [v.cause for v in d.verdicts] == ["down"], render(d)


# --- histogram resolution -------------------------------------------------------------------

def test_bucket_of_is_the_bounds_histogram_quantile_interpolates_between() -> None:
    assert bucket_of(0.4, VLLM_TTFT) == (0.25, 0.5)
    assert bucket_of(0.5, VLLM_TTFT) == (0.25, 0.5)  # a bound is its bucket's upper edge
    assert bucket_of(0.0005, VLLM_TTFT) == (0.0, 0.001)  # from 0 in the first bucket
    assert bucket_of(3000.0, VLLM_TTFT) is None  # past the last finite bound
    assert bucket_of(0.4, ()) is None


def test_a_threshold_inside_the_quantiles_bucket_says_it_is_interpolated() -> None:
    # Short prompts: the prefill is the engine's, not the prompts' (application/long_prompts).
    obs = with_probe(with_engine(healthy(), ttft_p95=0.4, prefill_seconds=110.0,
                                 prompt_tokens_mean=300.0, ttft_buckets=VLLM_TTFT),
                     "chat", ttft_p95=0.45, slo_ttft=0.3)
    d = diagnose(obs)
    (v,) = [v for v in d.verdicts if v.cause == "slow_prefill"]
    assert "no bucket between 250 ms and 500 ms" in v.summary, v.summary
    assert "against the 300 ms TTFT SLO is interpolated" in v.summary
    ttft = [e for e in v.evidence if e.metric == metrics.ENGINE_TTFT.name]
    assert ttft and ttft[0].bucket == (0.25, 0.5)
    assert "0.4 in (0.25, 0.5]" in render(d)
    doc = _json(d)
    assert {"lower": 0.25, "upper": 0.5} in [
        e.get("bucket") for e in doc["verdicts"][0]["evidence"]]


def test_a_quantile_clear_of_its_threshold_carries_its_bucket_without_the_warning() -> None:
    obs = all_probes(with_engine(healthy(), ttft_p95=2.0, prefill_seconds=600.0,
                                 ttft_buckets=VLLM_TTFT), ttft_p95=2.6)
    d = diagnose(obs)
    (v,) = [v for v in d.verdicts if v.cause == "slow_prefill"]
    assert "interpolated" not in v.summary
    assert [e.bucket for e in v.evidence if e.metric == metrics.ENGINE_TTFT.name] == [
        (1.0, 2.5)]
    # Cleared evidence of a healthy engine carries the bounds too.
    calm = diagnose(with_engine(healthy(), ttft_buckets=VLLM_TTFT))
    (eng,) = [s for s in calm.steps if s.step == "engine"]
    assert [e.bucket for e in eng.evidence if e.metric == metrics.ENGINE_TTFT.name] == [
        (0.25, 0.5)]


def _split(d: Diagnosis, probe: str) -> list[Evidence]:
    (net,) = [s for s in d.steps if s.step == "network"]
    return [e for e in net.evidence if e.labels.get("part") == "client_minus_engine"
            and e.labels.get("probe") == probe]


def test_p95s_of_two_bucket_grids_are_never_subtracted() -> None:
    # The probe's P95 is far over the engine's, but their grids differ: the means decide,
    # and they say the engine is where the time goes.
    obs = with_probe(with_engine(healthy(), ttft_buckets=VLLM_TTFT, ttft_mean=0.3),
                     "chat", ttft_p95=2.0, ttft_buckets=PROBE_TTFT, ttft_mean=0.38)
    (e,) = _split(diagnose(obs), "chat")
    assert e.metric == MEAN_SPLIT
    assert abs(e.value - 0.08) < 1e-9 and e.baseline == 0.3
    assert e.threshold is not None and abs(e.threshold - 0.19) < 1e-9
    # Without the means there is nothing honest to subtract: no split at all.
    bare = with_probe(with_engine(healthy(), ttft_buckets=VLLM_TTFT), "chat", ttft_p95=2.0,
                      ttft_buckets=PROBE_TTFT)
    assert _split(diagnose(bare), "chat") == []


def test_p95s_of_one_grid_are_subtracted() -> None:
    obs = with_probe(with_engine(healthy(), ttft_buckets=VLLM_TTFT, ttft_mean=0.3),
                     "chat", ttft_p95=2.0, ttft_buckets=VLLM_TTFT, ttft_mean=0.38)
    d = diagnose(obs)
    (e,) = _split(d, "chat")
    assert e.metric == metrics.PROBE_TTFT.name
    assert abs(e.value - 1.7) < 1e-9  # 2.0 - the engine's 0.3
    # Over the network's share: no path names a cause, so the chain says where, not why.
    (v,) = [v for v in d.verdicts if v.scope.get("probe") == "chat"]
    assert v.cause == "no_data" and "between client and engine" in v.summary, render(d)


# --- the embedded source, from the exporter's own samples ---------------------------------

def test_the_embedded_source_reads_each_ranks_queue_and_the_engines_bucket_grid() -> None:
    config = parse_config("engines:\n  - {name: main, url: 'http://127.0.0.1:1/metrics'}\n"
                          "diagnosis: {window: 60s, interval: 5s, history: 10m}\n")
    h = History.from_config(config.diagnosis)
    rank = {r: {"target": "main", "engine": "vllm", "model": "ds", "dp_rank": r}
            for r in ("0", "1")}
    ttft = f"{metrics.ENGINE_TTFT.name}"

    def samples(n: int) -> list[RawSample]:
        out: list[RawSample] = [(metrics.ENGINE_UP.name, {"target": "main"}, 1.0)]
        for r, labels in rank.items():
            out += [(metrics.ENGINE_REQUESTS_WAITING.name, labels, 12.0 if r == "1" else 1.0),
                    (metrics.ENGINE_KV_CACHE_USAGE.name, labels, 0.8 if r == "1" else 0.3)]
            # Two requests a snapshot per rank: one at 0.3 s, one at 0.6 s.
            for le, c in ((0.25, 0), (0.5, 1), (0.75, 2), (math.inf, 2)):
                out.append((f"{ttft}_bucket", {**labels, "le": "+Inf" if le == math.inf
                                                else repr(le)}, c * n))
            out += [(f"{ttft}_sum", labels, 0.9 * n), (f"{ttft}_count", labels, 2.0 * n)]
        return out

    t0 = 1_700_000_000.0
    for i in range(13):
        h.record(samples(i), at=t0 + 5 * i)
    (e,) = observe(h, config, t0 + 60).engines
    assert e.waiting_by_rank == {("ds", "0"): 1.0, ("ds", "1"): 12.0}
    assert e.kv_by_rank == pytest.approx({("ds", "0"): 0.3, ("ds", "1"): 0.8})
    assert e.ttft_buckets == (0.25, 0.5, 0.75)
    assert e.ttft_mean == pytest.approx(0.45)
    obs = Observations(at=dt.datetime.fromtimestamp(t0 + 60, dt.UTC), window=60.0,
                       source="exporter", engines=(e,))
    d = diagnose(obs)
    assert _causes(d) == [("engine", "imbalance", {"engine": "main", "dp_rank": "1"})], render(d)
