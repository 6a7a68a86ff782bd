"""The first token's budget (exporter/diagnosis/steps/budget.py ``ledger``): each probe's mean
TTFT as network, frontend, queue, KV transfer, prefill and a remainder that sum to it, the
probe's own exactly split requests preferred to the engine's means."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.parts import BudgetPart as P
from exporter.diagnosis.parts import StreamPart as S
from exporter.diagnosis.remote import from_json
from exporter.diagnosis.result import StepResult
from exporter.diagnosis.steps.budget import FRONTEND_PART
from exporter.diagnosis.steps.engine import QUEUE_SHARE
from exporter.diagnosis.text import render
from exporter.monitoring.findings import explains, unmatched
from exporter.runtime.page import verdict as page_verdict
from tests.support.observations import all_probes, healthy, with_engine, with_probe

#: An engine whose means say 50 ms of frontend, 20 ms of queue and 300 ms of prefill.
ENGINE = dict(frontend_mean=0.05, queue_mean=0.02, prefill_mean=0.3)


def _budget(obs: object, probe: str = "chat-mobile") -> dict[P, float | None]:
    doc = diagnose(obs)  # type: ignore[arg-type]
    (b,) = [b for b in doc.budget if b.probe == probe]
    assert b.ttft == pytest.approx(sum(v for v in b.parts.values() if v is not None))
    return dict(b.parts)


def test_the_parts_sum_to_the_clients_mean_ttft_and_keep_the_remainder() -> None:
    obs = all_probes(with_engine(healthy(), **ENGINE), ttft_mean=0.5, tcp_rtt_mean=0.04)
    parts = _budget(obs)
    assert parts[P.NETWORK] == 0.04 and parts[P.FRONTEND] == 0.05
    assert parts[P.QUEUE] == 0.02 and parts[P.PREFILL] == 0.3 and parts[P.KV_TRANSFER] is None
    assert parts[P.REMAINDER] == pytest.approx(0.09)


def test_a_probes_own_exact_split_is_preferred_to_the_engines_means() -> None:
    obs = with_probe(with_engine(healthy(), **ENGINE), "chat-mobile", ttft_mean=0.9,
                     tcp_rtt_mean=0.06, exact_splits=10, split_queue_mean=0.4,
                     split_prefill_mean=0.35)
    parts = _budget(obs)
    assert (parts[P.QUEUE], parts[P.PREFILL]) == (0.4, 0.35)
    assert parts[P.REMAINDER] == pytest.approx(0.9 - 0.06 - 0.05 - 0.4 - 0.35)


def test_a_kv_handover_is_taken_out_of_the_prefill_it_sits_in() -> None:
    obs = all_probes(with_engine(healthy(), **ENGINE, kv_transfer_mean=0.2), ttft_mean=0.6)
    parts = _budget(obs)
    assert parts[P.KV_TRANSFER] == 0.2 and parts[P.PREFILL] == pytest.approx(0.1)
    # Unmeasured, the network is in the remainder; a handover longer than the prefill it is
    # counted in cannot be more than that prefill.
    assert parts[P.NETWORK] is None
    assert parts[P.REMAINDER] == pytest.approx(0.6 - 0.05 - 0.02 - 0.3)
    over = _budget(all_probes(with_engine(healthy(), **ENGINE, kv_transfer_mean=0.5),
                              ttft_mean=0.6))
    assert (over[P.KV_TRANSFER], over[P.PREFILL]) == (0.3, 0.0)


def test_the_remainder_is_negative_when_the_parts_exceed_what_the_client_waited() -> None:
    parts = _budget(all_probes(with_engine(healthy(), **ENGINE), ttft_mean=0.3))
    assert parts[P.REMAINDER] == pytest.approx(-0.07)


def test_probes_without_a_ttft_have_no_budget_and_the_budget_travels_in_json() -> None:
    obs = with_probe(all_probes(with_engine(healthy(), **ENGINE), ttft_mean=0.5),
                     "chat", ttft_mean=None)
    doc = diagnose(obs)
    assert "chat" not in {b.probe for b in doc.budget}, render(doc)
    back = from_json(json.loads(json.dumps(doc.to_json())))
    assert back.budget == doc.budget
    assert doc.to_json()["budget"][0]["parts"].keys() == {str(p) for p in P}


def test_the_stream_is_the_engines_time_per_token_and_its_delivery() -> None:
    # The probe's own requests on the engine's clock: 300 ms of decode over 11 tokens is
    # 30 ms a gap; the client saw 50 ms, so 20 ms a token went on the way out.
    exact = with_probe(with_engine(healthy(), itl_mean=0.045), "chat-mobile", ttft_mean=0.5,
                       tpot_mean=0.05, exact_splits=10, split_decode_mean=0.3,
                       output_tokens_mean=11.0)
    (b,) = [b for b in diagnose(exact).budget if b.probe == "chat-mobile"]
    assert b.tpot == 0.05 and b.stream[S.ENGINE] == pytest.approx(0.03)
    assert b.stream[S.DELIVERY] == pytest.approx(0.02)
    # Not timed per request: the engine's mean inter-token gap over all its requests.
    means = with_probe(with_engine(healthy(), itl_mean=0.045), "chat-mobile", ttft_mean=0.5,
                       tpot_mean=0.04)
    (b,) = [b for b in diagnose(means).budget if b.probe == "chat-mobile"]
    assert b.stream[S.ENGINE] == 0.045 and b.stream[S.DELIVERY] == pytest.approx(-0.005)


def test_without_the_engines_time_per_token_the_stream_is_unknown_and_travels_as_null() -> None:
    obs = with_probe(with_engine(healthy(), itl_mean=None), "chat-mobile", ttft_mean=0.5,
                     tpot_mean=0.05)
    doc = diagnose(obs)
    (b,) = [b for b in doc.budget if b.probe == "chat-mobile"]
    assert b.tpot is None and not b.stream
    (row,) = [r for r in doc.to_json()["budget"] if r["probe"] == "chat-mobile"]
    assert row["tpot"] is None and row["stream"] == {str(p): None for p in S}
    assert from_json(json.loads(json.dumps(doc.to_json()))).budget == doc.budget
    assert "tpot engine" in render(doc)


def test_a_slow_first_token_whose_prefill_cannot_account_for_it_is_the_api_servers() -> None:
    # The engine's TTFT is over its SLO with little queueing and 150 ms of prefill per
    # request, while its API server holds each request 400 ms: under the frontend's own
    # line (half the SLO), yet the part that grew; slow prefill would send the user to
    # tune chunked prefill.
    slow = all_probes(with_engine(healthy(), ttft_p95=1.5, frontend_mean=0.4), ttft_p95=1.6)
    doc = diagnose(slow)
    v = doc.verdicts[0]
    assert (v.layer, v.cause) == ("engine", "frontend"), render(doc)
    assert "holds each request 400 ms" in v.summary and "ttft" in v.symptoms
    # Where prefill takes longer than the API server holds a request, prefill it is.
    doc = diagnose(all_probes(with_engine(healthy(), ttft_p95=1.5, frontend_mean=0.1),
                              ttft_p95=1.6))
    assert (doc.verdicts[0].layer, doc.verdicts[0].cause) == ("engine", "slow_prefill")


def test_a_prefix_cache_miss_that_stretches_decode_is_one_cause() -> None:
    # A timestamp at the head of the shared system prompt: the prefix computed again in
    # chunks beside the running decodes stretches their steps (inter-token P95 600 ms).
    obs = all_probes(with_engine(
        healthy(), ttft_p95=2.0, itl_p95=0.6, prefix_hit_ratio=0.0,
        prefix_hit_ratio_baseline=0.89, prefill_mean=0.6, prefill_mean_baseline=0.15),
        ttft_p95=2.6, tpot_p95=0.3)
    doc = diagnose(obs)
    assert [(v.layer, v.cause) for v in doc.verdicts] == [("engine", "prefix_cache_miss")], \
        render(doc)
    assert set(doc.verdicts[0].symptoms) == {"ttft", "tpot"}
    assert "stretch the decode steps" in doc.verdicts[0].summary


def test_a_stream_slowed_after_the_engine_says_so_and_blames_no_blind_step() -> None:
    # The client's TPOT P95 is over its SLO while the engine's own inter-token gap is fine:
    # no GPU is configured, yet no GPU could explain tokens that left the engine on time.
    obs = all_probes(with_engine(healthy(), itl_p95=0.02, itl_mean=0.015), tpot_p95=0.3,
                     tpot_mean=0.2, ttft_mean=0.3)
    obs = replace(obs, gpus=())
    doc = diagnose(obs)
    (v,) = [v for v in doc.verdicts if v.scope.get("probe") == "chat-mobile"]
    assert (v.layer, v.cause) == ("exporter", "no_data") and "tpot" in v.symptoms
    assert "185 ms of its 200 ms mean per output token is spent after the engine" in v.summary
    assert "no data for the" not in v.summary, v.summary


#: A real vLLM's prefix cache that stopped hitting, its prompts as long as before: each
#: request also waits out another's long prefill step before the engine queues it, which
#: reads as API-server time over its line (CI at 1c24842: 288 ms against a 100 ms line).
MISSED = dict(ttft_p95=3.0, frontend_mean=0.6, prefix_hit_ratio=0.0,
              prefix_hit_ratio_baseline=0.89, prefill_mean=1.5, prefill_mean_baseline=0.15,
              prefill_seconds=180.0, prompt_tokens_mean=6000.0, prompt_tokens_baseline=None)


def test_of_two_parts_over_their_lines_the_one_holding_more_is_the_cause() -> None:
    slow = {"ttft_p95": 3.2, "ttft_mean": 2.0}
    doc = diagnose(all_probes(with_engine(healthy(), **MISSED), **slow))
    assert [(v.layer, v.cause) for v in doc.verdicts][:1] == [("engine", "prefix_cache_miss")]
    assert {"long_prompts", "frontend"}.isdisjoint(v.cause for v in doc.verdicts), render(doc)
    # The API server's part is the miss's, in its evidence, and its alert is the miss's.
    assert FRONTEND_PART in {e.metric for e in doc.verdicts[0].evidence}
    verdict = doc.to_json()["verdicts"][0]
    assert explains(verdict, {"alertname": "LLMEngineFrontendBound", "target": "main"})
    # The API server holding each request 1.6 s is the part that grew instead; the cache
    # that stopped hitting is still a cause of its own, under it (its alert pages too).
    front = diagnose(all_probes(with_engine(healthy(), **{**MISSED, "frontend_mean": 1.6}),
                                **slow))
    causes = [v.cause for v in front.verdicts]
    assert causes[0] in ("frontend", "long_prompts") and "prefix_cache_miss" in causes[1:], \
        render(front)


def test_a_queue_behind_a_prefix_cache_miss_is_the_miss_s() -> None:
    # Every prompt computed whole holds the engine longer per request: the queue that forms
    # behind it is the miss's evidence, and the capacity alert is the miss's to answer.
    queued = {**MISSED, "queue_mean": 2.0, "queue_seconds": 600.0, "waiting": 3.0}
    doc = diagnose(all_probes(with_engine(healthy(), **queued), ttft_p95=3.2, ttft_mean=2.0))
    causes = [v.cause for v in doc.verdicts]
    assert causes[0] == "prefix_cache_miss" and "queueing" not in causes, render(doc)
    assert QUEUE_SHARE in {e.metric for e in doc.verdicts[0].evidence}, render(doc)
    verdict = doc.to_json()["verdicts"][0]
    assert explains(verdict, {"alertname": "LLMEngineCapacityBound", "target": "main"})
    assert not unmatched([{"alertname": "LLMEngineCapacityBound", "target": "main"},
                          {"alertname": "LLMEnginePrefixCacheMiss", "target": "main"}],
                         [verdict])


def test_the_queue_a_miss_forms_counts_against_the_api_servers_part() -> None:
    # A real vLLM saturated by a missed 1,800-token prefix (CI at f38e254): prefill grew
    # 1.74 s and each request waited 2.12 s before the engine queued it, its API server at
    # 0.02 of a core; the queue behind the miss, 2.5 s more, is the miss's, so it holds
    # more of the first token than the API server's part and is the cause.
    saturated = {**MISSED, "frontend_mean": 2.12, "prefill_mean": 2.0, "prefill_mean_baseline":
                 0.26, "queue_mean": 2.5, "queue_seconds": 600.0, "waiting": 4.3,
                 "process_cpu": 0.02}
    doc = diagnose(all_probes(with_engine(healthy(), **saturated), ttft_p95=20.0,
                              ttft_mean=6.0))
    causes = [v.cause for v in doc.verdicts]
    assert causes[0] == "prefix_cache_miss" and "frontend" not in causes, render(doc)
    assert "requests queue 2.5 s behind it; that is 4.24 s of the" in doc.verdicts[0].summary
    # Without the queue the API server's 2.12 s is more than the miss's 1.74 s.
    alone = diagnose(all_probes(with_engine(healthy(), **{**saturated, "queue_mean": 0.1,
                                                           "queue_seconds": 1.0}),
                                ttft_p95=20.0, ttft_mean=6.0))
    assert [v.cause for v in alone.verdicts][:1] == ["frontend"], render(alone)


def test_a_layer_the_config_leaves_out_is_not_a_blind_step_and_the_budget_says_where() -> None:
    # The engine's parts are all under their lines and no GPU is configured: the 850 ms
    # the client waited beyond them sits between the client and the engine's clock.
    obs = all_probes(with_engine(healthy(), ttft_p95=0.3, **{**ENGINE, "prefill_mean": 0.05}),
                     ttft_p95=1.5, ttft_mean=1.0, tcp_rtt_mean=0.03)
    doc = diagnose(replace(obs, gpus=()))
    v = doc.verdicts[0]
    assert (v.layer, v.cause) == ("exporter", "no_data"), render(doc)
    assert "no data for the" not in v.summary and "no gpu section is configured" in v.summary
    assert "850 ms of its 1 s mean first token lies outside every measured part" in v.summary
    steps = {s.step: s.result for s in doc.steps}
    assert steps["gpu"] is StepResult.NOT_CONFIGURED and doc.to_json()["steps"][3]["result"] \
        == "not_configured"
    assert "Not configured: gpu" in render(doc) and "No data for" not in render(doc)
    assert "Not configured: gpu" in page_verdict.section(doc.to_json())
    # A GPU check that fails is a blind step, not a layer left out.
    failing = diagnose(replace(obs, gpus=(), failing_checks=("gpu/nvml",)))
    assert "gpu section" not in failing.verdicts[0].summary, render(failing)
    assert {s.step: s.result for s in failing.steps}["gpu"] is StepResult.NO_DATA
    # The engine's own per-token time under its line, the client's stream slow: said so.
    stream = all_probes(with_engine(healthy(), itl_p95=0.06, itl_mean=0.045), tpot_p95=0.3,
                        tpot_mean=0.05, ttft_mean=0.3)
    doc = diagnose(replace(stream, gpus=()))
    assert "the engine makes each token in 45 ms of its 50 ms mean" in doc.verdicts[0].summary


def test_drafts_seldom_accepted_off_peak_have_nothing_to_lose() -> None:
    # Sampled traffic rejects ngram drafts: 10% off-peak, none now, is no change of text.
    low = diagnose(with_engine(healthy(), spec_acceptance=0.0, spec_acceptance_baseline=0.1))
    assert "spec_decode" not in {v.cause for v in low.verdicts}, render(low)
    fell = diagnose(with_engine(healthy(), spec_acceptance=0.0, spec_acceptance_baseline=0.9))
    assert [v.cause for v in fell.verdicts] == ["spec_decode"], render(fell)


def test_a_queue_behind_rejected_drafts_is_theirs() -> None:
    # Drafts rejected: each answer takes more steps and holds its batch slot longer, so at
    # the same load a queue forms. One verdict, which explains the first tokens too.
    spec = dict(spec_acceptance=0.05, spec_acceptance_baseline=0.9)
    doc = diagnose(all_probes(with_engine(healthy(), **spec, queue_seconds=900.0, waiting=3.0,
                                          ttft_p95=2.4), ttft_p95=2.6, tpot_p95=0.22))
    assert [v.cause for v in doc.verdicts] == ["spec_decode"], render(doc)
    v = doc.verdicts[0]
    assert set(v.symptoms) >= {"ttft", "tpot"} and "requests queue" in v.summary, render(doc)
    assert QUEUE_SHARE in {e.metric for e in v.evidence}
    assert not unmatched([{"alertname": "LLMEngineCapacityBound", "target": "main"},
                          {"alertname": "LLMEngineSpecDecodeAcceptance", "target": "main"}],
                         [doc.to_json()["verdicts"][0]])
    # Without a queue it explains the stream alone: a slow first token is someone else's.
    doc = diagnose(all_probes(with_engine(healthy(), **spec, ttft_p95=2.0,
                                          prefill_seconds=600.0), ttft_p95=2.6, tpot_p95=0.22))
    assert [v.cause for v in doc.verdicts][:2] == ["spec_decode", "slow_prefill"], render(doc)
    assert doc.verdicts[0].symptoms == ("tpot",)

