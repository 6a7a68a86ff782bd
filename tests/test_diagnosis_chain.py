"""The decision chain on synthetic observations: every cause of the vocabulary as the primary
verdict with its scope, healthy at moderate values, combinations in chain order, attribution,
no_data instead of a guess, ruled-out evidence, thresholds from slo:, and the JSON contract
against schema.json."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from typing import Any

import jsonschema
import pytest

from exporter.config.models import Config
from exporter.diagnosis.causes import NAMES
from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.result import Diagnosis
from exporter.diagnosis.text import render
from exporter.diagnosis.thresholds import Thresholds, resolve
from tests.support.observations import (
    AT,
    all_probes,
    engine,
    fleet,
    healthy,
    probe,
    with_engine,
    with_gpu,
    with_host,
    with_path,
    with_probe,
)

SLOW_ALL = dict(ttft_p95=2.6)
QUEUED = dict(queue_seconds=900.0, waiting=25.0, running=64.0, ttft_p95=2.4)
SLOW_DECODE = dict(itl_p95=0.2, decode_seconds=4000.0)
RANK_QUEUED = {("ds", "0"): 1.5, ("ds", "1"): 23.5}


def _lc(obs: Observations) -> Observations:
    """A long-context probe beside the short ones."""
    return replace(obs, probes=(*obs.probes, probe("long", profile="long_context",
                                                   ttft_p95=4.5, ttft_p95_baseline=1.2,
                                                   slo_ttft=3.0)))


def _mobile(obs: Observations, **kw: Any) -> Observations:
    return with_probe(obs, "chat-mobile", **kw)


#: cause -> (observations, expected layer, expected scope subset)
CASES: dict[str, tuple[Observations, str, dict[str, str]]] = {
    "packet_loss": (_mobile(with_path(healthy(), "mobile", lost=12), ttft_p95=1.8),
                    "network", {"carrier": "mobile", "target": "gpu-sh"}),
    "jitter": (_mobile(with_path(healthy(), "mobile", jitter=0.09), tpot_p95=0.16),
               "network", {"carrier": "mobile", "target": "gpu-sh"}),
    "rtt_floor": (_mobile(with_path(healthy(), "mobile", rtt_mean=0.25), ttft_p95=1.3),
                  "network", {"carrier": "mobile", "target": "gpu-sh"}),
    "route_change": (_mobile(with_path(healthy(), "mobile", route_class="cmi", route_changes=1,
                                       rtt_mean=0.2), ttft_p95=1.4),
                     "network", {"carrier": "mobile", "target": "gpu-sh"}),
    "peak_congestion": (_mobile(with_path(healthy(), "mobile", in_peak=True, lost=10,
                                          loss_baseline=0.001), ttft_p95=1.6),
                        "network", {"carrier": "mobile", "target": "gpu-sh"}),
    "connection_setup": (with_probe(healthy(), "chat", ttft_p95=1.5, connect_p95=1.0),
                         "network", {"probe": "chat"}),
    "stream_stalls": (_mobile(healthy(), stalls=4, itl_p99=3.2), "network",
                      {"probe": "chat-mobile", "carrier": "mobile"}),
    "down": (all_probes(with_engine(healthy(), up=False, ttft_p95=None, itl_p95=None),
                        outcomes={"connect_error": 20}, ttft_p95=None, tpot_p95=None,
                        itl_p99=None),
             "engine", {"engine": "main"}),
    "queueing": (all_probes(with_engine(healthy(), **QUEUED), **SLOW_ALL), "engine",
                 {"engine": "main"}),
    "slow_prefill": (_lc(with_engine(healthy(), ttft_p95=2.0, prefill_seconds=600.0)),
                     "engine", {"engine": "main"}),
    "slow_decode": (all_probes(with_engine(healthy(), **SLOW_DECODE), tpot_p95=0.22),
                    "engine", {"engine": "main"}),
    # The engine's API server holds each request 1.2 s before queueing it: no prefill's.
    "frontend": (all_probes(with_engine(healthy(), ttft_p95=2.0, frontend_mean=1.2,
                                        process_cpu=0.97), **SLOW_ALL),
                 "engine", {"engine": "main"}),
    # A decode instance waits 1.1 s for each prompt's KV from its prefill instance.
    "kv_transfer": (all_probes(with_engine(healthy(), ttft_p95=2.0, kv_transfer_mean=1.1,
                                           deferred=3.0, external_kv_share=0.99), **SLOW_ALL),
                    "engine", {"engine": "main"}),
    # A timestamp at the head of the shared system prompt: 89% of prompt tokens hit before.
    "prefix_cache_miss": (all_probes(with_engine(
        healthy(), ttft_p95=2.0, prefix_hit_ratio=0.0, prefix_hit_ratio_baseline=0.89,
        prefill_mean=0.6, prefill_mean_baseline=0.15), **SLOW_ALL), "engine", {"engine": "main"}),
    # Drafts accepted 15% of the time against 70%: the stream slows, each step's gap does not.
    "spec_decode": (all_probes(with_engine(healthy(), spec_acceptance=0.15,
                                           spec_acceptance_baseline=0.7), tpot_p95=0.22),
                    "engine", {"engine": "main"}),
    "kv_cache_pressure": (all_probes(with_engine(healthy(), kv_cache_usage=0.99,
                                                 preemptions=14.0, **QUEUED), **SLOW_ALL),
                          "engine", {"engine": "main"}),
    # One rank holds the queue: the queue is its, the cause the imbalance.
    "imbalance": (all_probes(with_engine(healthy(), waiting_by_rank=RANK_QUEUED, **QUEUED),
                             **SLOW_ALL), "engine", {"engine": "main", "dp_rank": "1"}),
    "throttling": (with_gpu(all_probes(with_engine(healthy(), **SLOW_DECODE), tpot_p95=0.22),
                            0, clock_events=("hw_thermal",)), "gpu", {"gpu": "0"}),
    "memory_full": (with_gpu(all_probes(with_engine(healthy(), ttft_p95=2.0), **SLOW_ALL), 1,
                             memory_used_ratio=0.995), "gpu", {"gpu": "1"}),
    "xid_errors": (with_gpu(all_probes(with_engine(healthy(), ttft_p95=2.0), **SLOW_ALL), 0,
                            xid_errors=3), "gpu", {"gpu": "0"}),
    "underutilized": (with_gpu(with_gpu(all_probes(with_engine(healthy(), ttft_p95=2.0),
                                                   **SLOW_ALL), 0, utilization=0.2), 1,
                               utilization=0.25), "gpu", {"gpu": "0,1", "engine": "main"}),
    "memory_bandwidth": (with_gpu(all_probes(with_engine(healthy(), **SLOW_DECODE),
                                             tpot_p95=0.22), 0,
                                  dram_bandwidth_utilization=0.96), "gpu", {"gpu": "0"}),
    # GPU 0's PCIe link trained at x8 of x16 under a slow decode.
    "interconnect": (with_gpu(all_probes(with_engine(healthy(), **SLOW_DECODE), tpot_p95=0.22),
                              0, pcie_width=8.0), "gpu", {"gpu": "0"}),
    # Another job takes the engine's CPUs: its steps slow and its GPUs idle.
    "cpu_saturated": (with_gpu(with_host(all_probes(with_engine(healthy(), **SLOW_DECODE),
                                                    tpot_p95=0.22), cpu=0.85),
                               0, utilization=0.2), "host", {"engine": "main"}),
    "memory_pressure": (with_host(all_probes(with_engine(healthy(), ttft_p95=2.0), **SLOW_ALL),
                                  memory=0.4), "host", {"engine": "main"}),
    "io_pressure": (with_host(all_probes(with_engine(healthy(), ttft_p95=2.0), **SLOW_ALL),
                              io=0.7), "host", {"engine": "main"}),
    "long_prompts": (all_probes(with_engine(healthy(), ttft_p95=2.0, prompt_tokens_mean=6000.0,
                                            prompt_tokens_baseline=1500.0), **SLOW_ALL),
                     "application", {"engine": "main"}),
    "rate_limited": (with_probe(healthy(), "chat", outcomes={"ok": 12, "rate_limited": 8}),
                     "application", {"engine": "main"}),
    "client_concurrency": (all_probes(with_engine(healthy(), request_rate=2.0,
                                                  request_rate_baseline=0.5, **QUEUED),
                                      **SLOW_ALL), "application", {"engine": "main"}),
    "client_timeouts": (with_probe(healthy(), "chat", outcomes={"ok": 15, "timeout_total": 5},
                                   timeout_total=5.0), "application", {"probe": "chat"}),
    "no_data": (with_probe(replace(with_engine(healthy(), up=None), failing_checks=(
        "engine/main",)), "chat", ttft_p95=2.5), "exporter", {"engine": "main"}),
}

SCHEMA = json.loads(resources.files("exporter.diagnosis").joinpath("schema.json").read_text())


def valid(d: Diagnosis) -> dict[str, Any]:
    doc = d.to_json()
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    return doc


def test_every_cause_has_a_case() -> None:
    assert set(CASES) == {c for causes in NAMES.values() for c in causes}


@pytest.mark.parametrize("cause", sorted(CASES))
def test_cause_is_primary(cause: str) -> None:
    obs, layer, scope = CASES[cause]
    d = diagnose(obs)
    assert d.verdicts, render(d)
    v = d.verdicts[0]
    assert (v.layer, v.cause) == (layer, cause), render(d)
    assert {k: v.scope.get(k) for k in scope} == scope, v.scope
    assert 0 < v.confidence <= 1
    assert v.summary.endswith(".") and v.actions and v.evidence
    assert d.status in ("degraded", "failing")
    valid(d)


def test_healthy_at_moderate_values() -> None:
    for obs in (healthy(), fleet()):
        d = diagnose(obs)
        assert d.status == "healthy" and d.verdicts == (), render(d)
        assert [s.result for s in d.steps] == ["ruled_out"] * 6
        assert "Healthy" in render(d)
        valid(d)


def test_ruled_out_steps_carry_the_evidence_that_cleared_them() -> None:
    d = diagnose(CASES["packet_loss"][0])
    by = {s.step: s for s in d.steps}
    assert by["network"].result == "implicated"
    assert by["engine"].result == "ruled_out"
    metrics = {e.metric for e in by["engine"].evidence}
    assert "llm_engine_time_to_first_token_seconds" in metrics
    assert all(e.threshold is not None for e in by["engine"].evidence)
    assert "Ruled out:" in render(d)


def test_mobile_ttft_is_attributed_to_mobile_loss() -> None:
    d = diagnose(CASES["packet_loss"][0])
    assert len(d.verdicts) == 1, render(d)
    v = d.verdicts[0]
    assert v.symptoms == ("ttft",)
    assert "chat-mobile probe's TTFT P95 1.8 s over its 1 s SLO follows from it" in v.summary
    assert v.summary.startswith("Mobile path to gpu-sh loses 6% of packets (threshold 2%)")
    assert d.status == "failing"


def test_loss_on_one_carrier_plus_overload_names_both() -> None:
    obs = all_probes(with_path(with_engine(healthy(), **QUEUED), "mobile", lost=12), **SLOW_ALL)
    d = diagnose(obs)
    got = [(v.layer, v.cause) for v in d.verdicts]
    # The queue explains three probes' first tokens, the loss one: the queue is primary,
    # and the loss is never dropped.
    assert got == [("engine", "queueing"), ("network", "packet_loss")], render(d)
    assert d.verdicts[1].scope == {"carrier": "mobile", "target": "gpu-sh"}
    # The mobile probe's symptom goes to the loss, the others' to the queue.
    assert "chat-mobile" in d.verdicts[1].summary
    assert "chat-mobile" not in d.verdicts[0].summary
    net = {s.step: s for s in d.steps}["network"]
    assert net.result == "implicated" and any(
        e.labels.get("carrier") == "mobile" for e in net.evidence)
    valid(d)


NO_BASELINE = dict(prompt_tokens_baseline=None, request_rate_baseline=None)


@pytest.mark.parametrize(("engine_kw", "want", "replaced"), [
    # Long prompts are why prefill is slow: the verdict is theirs, the split its evidence.
    (dict(ttft_p95=2.0, prefill_seconds=600.0, prompt_tokens_mean=6000.0,
          prompt_tokens_baseline=1500.0), ("application", "long_prompts"), "slow_prefill"),
    # No baseline yet (a fresh deployment, prompts always long): at the engine's best
    # prefill rate, which is the window's own, the prompt alone takes 60% of the TTFT SLO.
    # Too long, baseline or none.
    (dict(ttft_p95=2.0, prefill_seconds=180.0, prompt_tokens_mean=6000.0, **NO_BASELINE),
     ("application", "long_prompts"), "slow_prefill"),
    # The same prompts at a third of the engine's best prefill rate: at its best the TTFT
    # would be back inside the SLO, so the slowdown is what breaks it, not the prompt.
    (dict(ttft_p95=2.0, prefill_seconds=600.0, prompt_tokens_mean=6000.0, **NO_BASELINE),
     ("engine", "slow_prefill"), ""),
    # The usual prompts at a prefill rate fallen from 10000 to 750 tokens/s: the engine's.
    (dict(ttft_p95=2.0, prefill_seconds=600.0, **NO_BASELINE), ("engine", "slow_prefill"), ""),
    # Queued at the batch limit with no growth to blame: capacity.
    (dict(**QUEUED, **NO_BASELINE), ("engine", "queueing"), ""),
    (dict(**QUEUED, request_rate=0.5, request_rate_baseline=0.45), ("engine", "queueing"), ""),
    # The same queue with the request rate 4x its baseline: more clients at the same
    # capacity is why it queues.
    (dict(**QUEUED, request_rate=2.0, request_rate_baseline=0.5),
     ("application", "client_concurrency"), "queueing"),
    # A full cache that preempts is why requests queue: one cause, the cache's.
    (dict(**QUEUED, kv_cache_usage=0.99, preemptions=14.0, **NO_BASELINE),
     ("engine", "kv_cache_pressure"), "queueing"),
    # A full cache without preemptions admits what it holds: the queue is capacity.
    (dict(**QUEUED, kv_cache_usage=0.99, preemptions=0.0, **NO_BASELINE),
     ("engine", "queueing"), ""),
])
def test_a_cause_replaces_the_engine_split_it_explains(
        engine_kw: dict[str, Any], want: tuple[str, str], replaced: str) -> None:
    d = diagnose(all_probes(with_engine(healthy(), **engine_kw), **SLOW_ALL))
    got = [(v.layer, v.cause) for v in d.verdicts]
    assert got == [want], render(d)
    if replaced:  # the split is not reported again, but stays in the evidence
        assert not any(v.cause == replaced for v in d.verdicts)
        assert len(d.verdicts[0].evidence) > 1
    valid(d)


def test_stalls_the_engine_makes_itself_are_not_the_networks() -> None:
    # A preempting cache pauses a stream for seconds while most tokens flow: the engine's
    # ITL P95 is fine, but its own gaps over the stall line say where the stall is.
    obs = all_probes(with_engine(healthy(), kv_cache_usage=0.99, preemptions=14.0, stalls=3,
                                 **QUEUED), **SLOW_ALL)
    obs = _mobile(obs, stalls=1, itl_p99=3.6)
    d = diagnose(obs)
    assert [(v.layer, v.cause) for v in d.verdicts] == [("engine", "kv_cache_pressure")], \
        render(d)
    assert "tpot" in d.verdicts[0].symptoms
    # The same client stalls with an engine that never paused: on the way.
    d = diagnose(_mobile(healthy(), stalls=1, itl_p99=3.6))
    assert d.verdicts[0].cause == "stream_stalls", render(d)
    d = diagnose(with_engine(_mobile(healthy(), stalls=1, itl_p99=3.6), stalls=0))
    assert d.verdicts[0].cause == "stream_stalls", render(d)


def test_a_cause_beside_probes_with_too_few_requests_does_not_claim_users_feel_nothing() -> None:
    # Probes that time out after 10 s finish two requests in a 30 s window: under
    # min_requests, the symptom step has no data, and the full cache's verdict must not say
    # that no probe is past its SLO.
    obs = with_engine(all_probes(healthy(), requests=2), kv_cache_usage=0.99, preemptions=14.0)
    d = diagnose(obs)
    assert [(v.layer, v.cause) for v in d.verdicts][:1] == [("engine", "kv_cache_pressure")], \
        render(d)
    assert d.steps[0].result == "no_data"
    summary = d.verdicts[0].summary
    assert "no probe finished 3 requests in the window" in summary, summary
    assert "past its SLO" not in summary
    valid(d)


def test_loss_over_the_alert_line_without_symptoms_is_degraded() -> None:
    # LLMPathPacketLoss pages on it: the chain says so too, network floor first.
    d = diagnose(with_path(healthy(), "mobile", lost=12))
    assert d.status == "degraded", render(d)
    assert [(v.layer, v.cause) for v in d.verdicts] == [("network", "packet_loss")]
    assert d.verdicts[0].summary.startswith("Mobile path to gpu-sh loses 6% of packets")
    assert "no probe is past its SLO over the last " in d.verdicts[0].summary
    # Under the line: healthy.
    assert diagnose(with_path(healthy(), "mobile", lost=2)).status == "healthy"


def test_engine_check_failing_is_no_data_not_a_guess() -> None:
    d = diagnose(CASES["no_data"][0])
    assert [(v.layer, v.cause) for v in d.verdicts] == [("exporter", "no_data")], render(d)
    assert {s.step: s.result for s in d.steps}["engine"] == "no_data"
    assert "engine/main" in d.verdicts[0].summary
    assert d.verdicts[0].symptoms == ("ttft",)


def test_metrics_endpoint_failing_while_engine_serves_is_no_data() -> None:
    # up=0 (the scrape fails) but the probes get answers: the engine serves, the numbers are
    # missing. Slow probes then yield no_data, not "down".
    obs = replace(all_probes(with_engine(healthy(), up=False, ttft_p95=None, itl_p95=None),
                             **SLOW_ALL), failing_checks=("engine/main",))
    d = diagnose(obs)
    causes = {v.cause for v in d.verdicts}
    assert "down" not in causes and causes == {"no_data"}, render(d)


def test_engine_down_fails_without_probes() -> None:
    obs = Observations(at=AT, window=600.0, source="prometheus",
                       engines=(engine(up=False),))
    d = diagnose(obs)
    assert d.status == "failing" and d.verdicts[0].cause == "down"
    valid(d)


def test_nothing_to_judge_is_unknown() -> None:
    d = diagnose(Observations(at=AT, window=600.0, source="exporter"))
    assert d.status == "unknown" and not d.verdicts
    assert "No data" in render(d)
    few = with_engine(all_probes(healthy(), requests=1), up=None)
    d = diagnose(replace(few, paths=(), gpus=(), hosts=()))
    assert d.status == "unknown"


def test_drift_without_breach_is_degraded() -> None:
    obs = with_probe(with_path(healthy(), "mobile", lost=8), "chat-mobile", ttft_p95=0.9,
                     ttft_p95_baseline=0.4)
    d = diagnose(obs)
    assert d.status == "degraded" and d.verdicts[0].cause == "packet_loss", render(d)
    assert "2.2x its off-peak" in d.verdicts[0].summary


def test_failures_go_to_the_cause_that_produces_them() -> None:
    # 429s on a probe of an overloaded engine: the failures are rate limiting's, the slow
    # first tokens the queue's.
    obs = with_probe(all_probes(with_engine(healthy(), **QUEUED), **SLOW_ALL), "chat",
                     outcomes={"ok": 10, "rate_limited": 10})
    d = diagnose(obs)
    got = [(v.layer, v.cause) for v in d.verdicts]
    assert got == [("engine", "queueing"), ("application", "rate_limited")], render(d)
    assert d.verdicts[1].symptoms == ("failures",)


def test_per_probe_slo_override_is_used() -> None:
    obs = with_probe(healthy(), "chat", ttft_p95=1.5, slo_ttft=2.0, ttft_p95_baseline=1.4)
    assert diagnose(obs).status == "healthy"


def test_thresholds_derive_from_slo_and_alerting() -> None:
    cfg = Config.model_validate({
        "slo": {"ttft_p95_seconds": 2, "loss_ratio": 0.1, "probe_failure_ratio": 0.2,
                "jitter_seconds": 0.05},
        "alerting": {"queue_share_ratio": 0.4, "kv_cache_usage_ratio": 0.9},
        "diagnosis": {"jitter_seconds": 0.02, "drift_ratio": 2},
    })
    th = resolve(cfg)
    assert (th.slo_ttft, th.loss_ratio, th.failure_ratio) == (2.0, 0.1, 0.2)
    assert th.jitter_seconds == 0.02  # set under diagnosis: wins over slo
    assert (th.queue_share, th.kv_cache_usage, th.drift_ratio) == (0.4, 0.9, 2.0)
    assert resolve(Config()) == Thresholds()
    # 6% loss is under a 10% loss SLO: no verdict on it.
    obs, _, _ = CASES["packet_loss"]
    d = diagnose(obs, th)
    assert "packet_loss" not in {v.cause for v in d.verdicts}, render(d)


def test_text_forms() -> None:
    out = render(diagnose(CASES["queueing"][0]))
    assert out.splitlines()[0].endswith("FAILING")
    assert "Primary: engine/queueing (engine=main)" in out
    assert "Evidence:" in out and "Next:" in out and "threshold" in out
    nd = render(diagnose(CASES["no_data"][0]))
    assert "Primary: exporter/no_data" in nd and "No data for: engine" in nd


def test_pure_and_deterministic() -> None:
    obs = CASES["client_concurrency"][0]
    assert diagnose(obs).to_json() == diagnose(obs).to_json()
    assert diagnose(obs).to_json()["at"] == "2026-12-01T21:30:00Z"


def test_schema_rejects_outside_the_vocabulary() -> None:
    doc = valid(diagnose(CASES["jitter"][0]))
    doc["verdicts"][0]["cause"] = "cosmic_rays"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    doc = valid(diagnose(CASES["jitter"][0]))
    doc["verdicts"][0]["layer"] = "engine"  # jitter is a network cause
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_schema_matches_the_vocabulary() -> None:
    branches = SCHEMA["$defs"]["verdict"]["oneOf"]
    assert {b["properties"]["layer"]["const"]: tuple(b["properties"]["cause"]["enum"])
            for b in branches} == dict(NAMES)


def test_the_probes_own_long_prompts_are_no_users_prompts() -> None:
    # An engine that serves only the probes, one of them a long-context probe (3000-token
    # prompts), its prefill slowed and no best rate in the history yet: the engine counts two
    # requests more than the probes (the window's edges), but there are no users' prompts to
    # blame, so the slow prefill is the engine's.
    obs = all_probes(healthy(), **SLOW_ALL, prompt_tokens_mean=30.0)
    obs = with_probe(obs, "chat", profile="long_context", prompt_tokens_mean=3000.0)
    tokens = 20 * 3000.0 + 60 * 30.0 + 2 * 3000.0
    obs = with_engine(obs, ttft_p95=2.0, requests=82.0, prompt_tokens_mean=tokens / 82,
                      prefill_seconds=82 * 0.8, prefill_rate_max=None, **NO_BASELINE)
    d = diagnose(obs)
    assert [(v.layer, v.cause) for v in d.verdicts][:1] == [("engine", "slow_prefill")], render(d)


def test_users_prompts_as_short_as_the_probes_are_not_long_on_a_slow_engine() -> None:
    # A prefill slowed to 0.8 s a request with no best rate in the history yet (a young
    # exporter): at the window's own rate any prompt costs the budget. The users send
    # prompts as short as the probes' (ten more requests than the probes made), so the slow
    # prefill is the engine's; the same users with 40x longer prompts are long prompts, and
    # with 20x (600 tokens, under long_prompt_tokens) the engine's again: a chat turn of a
    # few hundred tokens is not long however slow the engine is at it.
    obs = all_probes(healthy(), **SLOW_ALL, prompt_tokens_mean=30.0)
    probes = 4 * 20

    def primary(users_prompt: float) -> tuple[str, str]:
        tokens = probes * 30.0 + 10 * users_prompt
        d = diagnose(with_engine(obs, ttft_p95=2.0, requests=probes + 10.0,
                                 prompt_tokens_mean=tokens / (probes + 10),
                                 prefill_seconds=(probes + 10) * 0.8, prefill_rate_max=None,
                                 **NO_BASELINE))
        return d.verdicts[0].layer, d.verdicts[0].cause

    assert primary(30.0) == ("engine", "slow_prefill")
    assert primary(1200.0) == ("application", "long_prompts")
    assert primary(600.0) == ("engine", "slow_prefill")


def test_a_mean_moved_by_the_mix_of_probes_and_users_is_no_growth() -> None:
    # Users send 1,864-token prompts before and after, the four probes 200-token ones. Off-
    # peak the users made a fifth of the engine's requests (its mean 533 tokens), now
    # 220 of 300 (1,420): the engine's mean "grew" 2.7x, the users' prompts did not. The
    # shared system prompt stopped being cached (hits 89% to 0%, prefill 4x): that is the
    # cause; where the probes' off-peak rate is unknown the engine's mean is all there is.
    users = 1864.0
    obs = all_probes(healthy(), **SLOW_ALL, prompt_tokens_mean=200.0,
                     prompt_tokens_baseline=200.0, ok_rate_baseline=0.2)
    engine = dict(ttft_p95=2.0, requests=300.0, prompt_tokens_mean=(220 * users + 80 * 200) / 300,
                  request_rate_baseline=1.0, prompt_tokens_baseline=0.2 * users + 0.8 * 200,
                  prefix_hit_ratio=0.0, prefix_hit_ratio_baseline=0.89, prefill_mean=0.6,
                  prefill_mean_baseline=0.15)
    d = diagnose(with_engine(obs, **engine))
    assert [(v.layer, v.cause) for v in d.verdicts][:1] == [
        ("engine", "prefix_cache_miss")], render(d)
    grew = diagnose(with_engine(obs, **{**engine, "prompt_tokens_mean":
                                        (220 * 3 * users + 80 * 200) / 300}))
    assert [(v.layer, v.cause) for v in grew.verdicts][:1] == [
        ("application", "long_prompts")], render(grew)
    assert "3.0x the off-peak 1864" in grew.verdicts[0].summary, render(grew)


def test_request_rate_growth_is_the_users_not_the_probes() -> None:
    # The engine serves 1 request/s before and after. Off-peak the four probes sent 0.2/s
    # each (0.8 of it); queued, each finishes only 60 in the 10 min window (0.4/s together):
    # the users went from 0.2/s to 0.6/s, what queued the probes.
    same = dict(prompt_tokens_mean=200.0, prompt_tokens_baseline=200.0)
    obs = all_probes(with_engine(healthy(), request_rate=1.0, request_rate_baseline=1.0,
                                 **QUEUED, **same), **SLOW_ALL, outcomes={"ok": 60},
                     ok_rate_baseline=0.2)
    d = diagnose(obs)
    assert [(v.layer, v.cause) for v in d.verdicts][:1] == [
        ("application", "client_concurrency")], render(d)
    assert "users send 0.6 requests/s, 3.0x the off-peak 0.2/s" in d.verdicts[0].summary
    # The engine's rate tripled, but by the probes' own requests (each 0.6/s now, 0.025/s
    # off-peak): the users' 0.4/s did not grow, and the queue is the engine's.
    probes = all_probes(with_engine(healthy(), request_rate=2.8, request_rate_baseline=0.5,
                                    **QUEUED, **same), **SLOW_ALL, outcomes={"ok": 360},
                        ok_rate_baseline=0.025)
    d = diagnose(probes)
    assert "client_concurrency" not in {v.cause for v in d.verdicts}, render(d)
    assert d.verdicts[0].cause == "queueing", render(d)


def test_a_setup_that_leaves_the_first_token_fast_times_out_no_answer() -> None:
    # A 40 ms connect of a 70 ms first token (a distant carrier, every request on a new
    # connection), well inside the SLO: the answers cut by the probe's own 200 ms total
    # timeout are the client's, not the handshake's.
    obs = with_probe(healthy(), "chat", ttft_p95=0.07, connect_p95=0.04,
                     outcomes={"ok": 5, "timeout_total": 15}, timeout_total=0.2)
    d = diagnose(obs)
    assert [(v.layer, v.cause) for v in d.verdicts] == [
        ("application", "client_timeouts")], render(d)
    # Connections that time out are the setup's, first token fast or not.
    connect = with_probe(healthy(), "chat", ttft_p95=0.07, connect_p95=0.04,
                         outcomes={"ok": 5, "timeout_connect": 15})
    d = diagnose(connect)
    assert [(v.layer, v.cause) for v in d.verdicts][:1] == [
        ("network", "connection_setup")], render(d)


def test_connections_that_open_a_second_late_are_the_setups_with_the_first_token_fast() -> None:
    # The probe's TTFT starts once connected: a dropped SYN's second (the kernel's retry)
    # is over half the 1 s SLO however fast the first token, on a clean path.
    obs = with_probe(healthy(), "chat-mobile", ttft_p95=0.3, connect_p95=1.02,
                     tcp_rtt_mean=0.03)
    d = diagnose(obs)
    assert [(v.layer, v.cause, v.scope.get("probe")) for v in d.verdicts] == [
        ("network", "connection_setup", "chat-mobile")], render(d)
    assert d.status == "degraded" and not d.verdicts[0].symptoms, render(d)
    assert "1.02 s to open" in d.verdicts[0].summary, d.verdicts[0].summary
    # A far path's handshakes (TCP and TLS) at 250 ms RTT take 750 ms: the RTT's, not setup.
    far = with_probe(healthy(), "chat-mobile", ttft_p95=0.3, connect_p95=0.78,
                     tcp_rtt_mean=0.25)
    assert "connection_setup" not in {v.cause for v in diagnose(far).verdicts}
    # Loss on the carrier loses SYNs too: the late connections are the loss's evidence.
    lossy = with_path(obs, "mobile", lost=20)
    d = diagnose(lossy)
    assert [(v.layer, v.cause) for v in d.verdicts][:1] == [("network", "packet_loss")]
    assert "connection_setup" not in {v.cause for v in d.verdicts}, render(d)
    assert "llm_probe_phase_seconds" in {e.metric for e in d.verdicts[0].evidence}


def test_a_throttled_gpu_beside_long_prompts_names_both() -> None:
    # Both take over the slow prefill; neither drops the other (GPU first, in chain order).
    obs = all_probes(with_gpu(with_engine(healthy(), ttft_p95=2.0, prefill_seconds=180.0,
                                          prompt_tokens_mean=6000.0, **NO_BASELINE),
                              0, clock_events=("sw_thermal",)), **SLOW_ALL)
    d = diagnose(obs)
    assert [(v.layer, v.cause) for v in d.verdicts] == [
        ("gpu", "throttling"), ("application", "long_prompts")], render(d)
    valid(d)


def _all_failing(obs: Observations, **kw: Any) -> Observations:
    """Every probe's check failing (no request succeeded) and what its requests ended as."""
    obs = all_probes(obs, ttft_p95=None, tpot_p95=None, itl_p99=None, connect_p95=None, **kw)
    return replace(obs, failing_checks=tuple(f"probe/{p.probe}" for p in obs.probes))


def test_probes_that_all_time_out_are_never_healthy() -> None:
    # Each probe cut by its own 200 ms total timeout while the engine answers within its
    # SLO: every run of every probe check fails, and the failures are the window's symptom.
    d = diagnose(_all_failing(healthy(), outcomes={"timeout_total": 20}, timeout_total=0.2))
    assert d.status == "failing", render(d)
    v = d.verdicts[0]
    assert (v.layer, v.cause) == ("application", "client_timeouts"), render(d)
    assert v.symptoms == ("failures",)
    assert "timeout 200 ms" in v.summary


def test_an_engine_that_refuses_explains_its_failing_probes() -> None:
    d = diagnose(_all_failing(with_engine(healthy(), up=False, ttft_p95=None, itl_p95=None),
                              outcomes={"connect_error": 20}))
    assert d.status == "failing", render(d)
    v = d.verdicts[0]
    assert (v.layer, v.cause, v.symptoms) == ("engine", "down", ("failures",)), render(d)


def test_long_prompts_take_over_the_time_their_tokenizing_costs_the_api_server() -> None:
    # A real vLLM tokenizing 7,000-token prompts: most of the first token is spent before
    # the engine queues them; the prompts are the cause, the frontend their evidence.
    obs = CASES["long_prompts"][0]
    d = diagnose(with_engine(obs, frontend_mean=1.4, process_cpu=0.9))
    assert [(v.layer, v.cause) for v in d.verdicts][:1] == [("application", "long_prompts")], \
        render(d)
    assert any(e.metric.startswith("(llm_engine_e2e") for e in d.verdicts[0].evidence)


def test_a_starved_host_takes_over_the_engine_split_and_the_idle_gpu() -> None:
    obs = with_gpu(with_host(all_probes(with_engine(healthy(), **SLOW_DECODE), tpot_p95=0.22),
                             cpu=0.85), 0, utilization=0.2)
    d = diagnose(obs)
    assert [(v.layer, v.cause) for v in d.verdicts] == [("host", "cpu_saturated")], render(d)
    v = d.verdicts[0]
    assert v.symptoms == ("tpot",), render(d)
    assert "waiting for a CPU 85% of the window (line 30%)" in v.summary, v.summary
    metrics = {e.metric for e in v.evidence}
    # The engine's split and the idle GPU stay as its evidence.
    assert "llm_engine_inter_token_latency_seconds" in " ".join(metrics), metrics
    assert {s.step: s.result for s in d.steps}["host"] == "implicated"


def test_memory_pressure_takes_over_the_io_its_refaults_cause() -> None:
    slow = all_probes(with_engine(healthy(), ttft_p95=2.0), **SLOW_ALL)
    d = diagnose(with_host(slow, memory=0.3, io=0.45))
    assert [(v.layer, v.cause) for v in d.verdicts] == [("host", "memory_pressure")], render(d)
    resources = {e.labels.get("resource") for e in d.verdicts[0].evidence}
    assert {"memory", "io"} <= resources, d.verdicts[0].evidence
    # IO waits without memory's are IO's own.
    d = diagnose(with_host(slow, memory=0.02, io=0.45))
    assert [(v.layer, v.cause) for v in d.verdicts] == [("host", "io_pressure")], render(d)


def test_the_host_of_a_probe_only_vantage_point_is_not_the_engines() -> None:
    obs = healthy()
    obs = replace(obs, hosts=(replace(obs.hosts[0], vantage="sh-telecom",
                                      pressure={("host", "cpu"): 0.9}),))
    d = diagnose(obs)
    assert d.status == "healthy" and not d.verdicts, render(d)


def test_a_host_under_its_lines_rules_the_layer_out_and_the_engine_keeps_its_cause() -> None:
    d = diagnose(all_probes(with_engine(healthy(), **SLOW_DECODE), tpot_p95=0.22))
    assert [(v.layer, v.cause) for v in d.verdicts] == [("engine", "slow_decode")], render(d)
    host = {s.step: s for s in d.steps}["host"]
    assert host.result == "ruled_out"
    assert {(e.labels["scope"], e.labels["resource"]) for e in host.evidence} == {
        ("engine", "cpu"), ("engine", "memory"), ("engine", "io")}


def test_an_idle_gpu_says_which_host_resource_its_engine_waited_for_most() -> None:
    slow = with_gpu(with_gpu(all_probes(with_engine(healthy(), ttft_p95=2.0), **SLOW_ALL), 0,
                             utilization=0.2), 1, utilization=0.25)
    # Under every line (a resource over its line is the host step's own verdict).
    d = diagnose(with_host(slow, memory=0.06))
    (v, *_) = d.verdicts
    assert (v.layer, v.cause) == ("gpu", "underutilized"), render(d)
    assert "the engine's cgroup waited most for memory, 6% of the window (under its 10% " \
           "line)" in v.summary, v.summary
    # The host not measured: the verdict says what would tell.
    unmeasured = replace(slow, hosts=(replace(slow.hosts[0], pressure={("host", "cpu"): 0.5}),))
    (v, *_) = diagnose(unmeasured).verdicts
    assert (v.layer, v.cause) == ("gpu", "underutilized")
    assert "the host under it is not measured (host.engine_cgroup" in v.summary, v.summary


def test_the_whole_hosts_pressure_is_never_a_verdict() -> None:
    obs = healthy()
    obs = replace(obs, hosts=(replace(obs.hosts[0], pressure={("host", "cpu"): 0.9}),))
    d = diagnose(obs)
    assert d.status == "healthy" and not d.verdicts, render(d)
    assert {s.step: s.result for s in d.steps}["host"] == "not_configured"


def test_a_degraded_link_under_a_fast_engine_is_no_verdict_and_clears_the_gpu() -> None:
    d = diagnose(with_gpu(healthy(), 1, nvlink_down=2, nvlink_errors=40))
    assert d.status == "healthy" and not d.verdicts, render(d)
    gpu = {s.step: s for s in d.steps}["gpu"]
    assert {e.metric for e in gpu.evidence} >= {"count(llm_gpu_nvlink_up == 0)",
                                                "llm_gpu_pcie_link_width"}


def test_nvlink_errors_climbing_under_a_slow_prefill_name_the_link() -> None:
    d = diagnose(with_gpu(all_probes(with_engine(healthy(), ttft_p95=2.0), **SLOW_ALL), 1,
                          nvlink_down=1, nvlink_errors=40))
    assert [(v.layer, v.cause) for v in d.verdicts] == [("gpu", "interconnect")], render(d)
    assert "1 NVLink(s) down; 40 NVLink errors" in d.verdicts[0].summary, render(d)
    assert d.verdicts[0].scope["gpu"] == "1"
