"""One decision, two renderings (exporter/monitoring/findings.py, with the cause table's
alert columns): every generated alert has its chain finding, both read one threshold, and a
layer over an alert's line is a verdict before any SLO breaks; what the lab's one-to-one
check (tests/support/lab/runner.py) reads."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pydantic
import pytest
import yaml

from exporter.config.models import Config
from exporter.diagnosis import causes
from exporter.diagnosis.causes import CAUSES, Cause
from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.text import render
from exporter.diagnosis.thresholds import resolve
from exporter.monitoring import findings
from exporter.monitoring.alerts import alert_groups
from tests.support.generated import ALERTS, example
from tests.support.lab.runner import one_answer
from tests.support.observations import (
    all_probes,
    healthy,
    with_engine,
    with_gpu,
    with_host,
    with_path,
    with_probe,
)


def _firing() -> dict[str, list[set[str]]]:
    """alertname -> the label names of each alert the promtool cases expect firing."""
    out: dict[str, list[set[str]]] = {}
    for path in sorted((ALERTS / "tests").glob("*.yaml")):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                for alert in check.get("exp_alerts") or []:
                    out.setdefault(check["alertname"], []).append(
                        set(alert.get("exp_labels") or {}))
    return out


FIRING = _firing()


def _alerts(config: Config) -> list[dict[str, Any]]:
    return [r for g in alert_groups(config) for r in g["rules"]]


def test_every_generated_alert_has_a_decision_and_every_decision_an_alert() -> None:
    names = {r["alert"] for r in _alerts(example())}
    assert names == set(findings.BY_ALERT), (names ^ set(findings.BY_ALERT))


def _value(config: Config, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("d", findings.DECISIONS, ids=lambda d: d.alert)
def test_each_decision_names_real_causes_fields_and_labels(d: findings.Decision) -> None:
    # A cause alert stands for causes of the table; a symptom or the verdict for none.
    assert bool(findings.CAUSES_OF[d.alert]) == (d.role == "cause"), d.alert
    for key in d.source:
        _value(example(), key)  # every field exists
    # The scope labels are what the alert's firing series carry (the promtool cases of
    # alerts/tests/ say which): each is on some case, and each case has one.
    fired = FIRING[d.alert]
    assert fired, d.alert
    wanted = {label for label, _ in d.scope} or ({"layer", "cause"} if d.role == "verdict"
                                                 else set())
    for label in wanted:
        assert any(label in case for case in fired), (d.alert, label, fired)
    if d.role == "verdict":
        assert all(wanted <= case for case in fired), fired
    elif wanted:
        # A failing GPU check has no carrier: its alert names the check, its verdict none.
        assert all(wanted & case or "check" in case for case in fired), (d.alert, fired)


#: Threshold keys the chain reads through an observation, not as a threshold: NVML flips
#: clock reasons per sample, so a reason counts once held for the share of the window.
OBSERVED = {"alerting.throttle_share"}
THRESHOLD_KEYS = [(c, key) for c in CAUSES for key in c.thresholds]


def _moved(value: Any) -> Any:
    """A valid value away from ``value``: the key's default."""
    if isinstance(value, list):
        return list(reversed(value)) if len(value) > 2 else value[:1]
    if isinstance(value, int) and not isinstance(value, bool):
        return value + 2
    return 0.37 if value is None else value * 0.8


@pytest.mark.parametrize(("cause", "key"), THRESHOLD_KEYS,
                         ids=[f"{c}:{k}" for c, k in THRESHOLD_KEYS])
def test_each_threshold_key_moves_the_chain_and_the_alerts_that_page(cause: Cause,
                                                                     key: str) -> None:
    """The cause table's keys are the lines: moving one moves what the chain compares
    against, and, for an slo: or alerting: key, the rule of an alert that pages for it."""
    section, field = key.split(".")
    base = Config.model_validate({})
    value = _moved(_value(base, key))
    try:
        moved = Config.model_validate({section: {field: value}})
    except pydantic.ValidationError:  # a duration is written with its unit
        moved = Config.model_validate({section: {field: f"{value:g}s"}})
    assert resolve(moved) != resolve(base) or key in OBSERVED, key
    if section != "diagnosis" and cause.pages:
        before, after = ({r["alert"] + r["expr"] for r in _alerts(c) if r["alert"] in cause.pages}
                         for c in (base, moved))
        assert before != after, (key, cause.pages)


def test_one_threshold_moves_the_alert_and_the_chain() -> None:
    cfg = Config.model_validate({
        "slo": {"loss_ratio": 0.07, "jitter_seconds": 0.05},
        "alerting": {"queue_share_ratio": 0.4, "kv_cache_usage_ratio": 0.9,
                     "gpu_memory_ratio": 0.93},
    })
    th = resolve(cfg)
    rules = {r["alert"]: r["expr"] for r in _alerts(cfg)}
    for alert, value in (("LLMPathPacketLoss", th.loss_ratio),
                         ("LLMClientsRetransmissionHigh", th.loss_ratio),
                         ("LLMPathJitterHigh", th.jitter_seconds),
                         ("LLMEngineCapacityBound", th.queue_share),
                         ("LLMEngineKVCacheSaturated", th.kv_cache_usage),
                         ("LLMGPUMemoryNearFull", th.gpu_memory_ratio)):
        assert f"> {value:g}" in rules[alert], (alert, rules[alert])


#: cause -> observations whose own numbers cross the alert's line while every probe is
#: inside its SLO.
QUIET_BUT_OVER: dict[tuple[str, str], Any] = {
    ("network", "packet_loss"): with_path(healthy(), "mobile", lost=14),
    ("network", "jitter"): with_path(healthy(), "mobile", jitter=0.09),
    # Premium backbone to 163 (LLMPathRouteDegraded: worse than a class taken recently).
    ("network", "route_change"): with_path(healthy(), "telecom", route_class="chinanet_163"),
    # New connections a second late (a dropped SYN) with a fast first token.
    ("network", "connection_setup"): with_probe(healthy(), "chat-mobile", connect_p95=1.02,
                                                tcp_rtt_mean=0.03),
    ("engine", "queueing"): with_engine(healthy(), queue_seconds=900.0, waiting=3.0),
    ("engine", "kv_cache_pressure"): with_engine(healthy(), kv_cache_usage=0.99,
                                                 preemptions=4.0),
    ("gpu", "throttling"): with_gpu(healthy(), 0, clock_events=("hw_thermal", "sw_thermal"),
                                    utilization=0.98),
    ("gpu", "memory_full"): with_gpu(healthy(), 1, memory_used_ratio=0.995),
    # The API server holds each request 0.8 s, over half the 1 s SLO, the TTFT still inside.
    ("engine", "frontend"): with_engine(healthy(), frontend_mean=0.8),
    ("engine", "kv_transfer"): with_engine(healthy(), kv_transfer_mean=0.7, deferred=2.0),
    # The cache hit 80% off-peak and hits 10% now; prefill per request 3x, TTFT still inside.
    ("engine", "prefix_cache_miss"): with_engine(
        healthy(), prefix_hit_ratio=0.1, prefix_hit_ratio_baseline=0.8, prefill_mean=0.3,
        prefill_mean_baseline=0.1),
    # Drafts accepted 70% of the time off-peak, 20% now; TPOT still inside.
    ("engine", "spec_decode"): with_engine(healthy(), spec_acceptance=0.2,
                                           spec_acceptance_baseline=0.7),
    # One rank's queue, small for the engine (its queue share is the healthy one's).
    ("engine", "imbalance"): with_engine(healthy(), waiting=9.0,
                                         waiting_by_rank={("ds", "0"): 1.0, ("ds", "1"): 8.0}),
    # The engine's cgroup waits for each resource over its line; the probes feel nothing yet.
    ("host", "cpu_saturated"): with_host(healthy(), cpu=0.5),
    ("host", "memory_pressure"): with_host(healthy(), memory=0.2),
    ("host", "io_pressure"): with_host(healthy(), io=0.5),
}


@pytest.mark.parametrize("cause", sorted(QUIET_BUT_OVER), ids="/".join)
def test_a_layer_over_its_alert_line_is_degraded_before_users_feel_it(
        cause: tuple[str, str]) -> None:
    d = diagnose(QUIET_BUT_OVER[cause])
    assert d.status == "degraded", render(d)
    assert [(v.layer, v.cause) for v in d.verdicts] == [cause], render(d)
    assert "no probe is past its SLO over the last " in d.verdicts[0].summary


def test_the_imbalance_lines_move_the_alert_and_the_chain() -> None:
    cfg = Config.model_validate({"alerting": {"imbalance_ratio": 3.0,
                                              "imbalance_min_waiting": 7.0,
                                              "imbalance_kv_gap": 0.2}})
    th = resolve(cfg)
    assert (th.imbalance_ratio, th.imbalance_min_waiting, th.imbalance_kv_gap) == (3.0, 7.0, 0.2)
    exprs = [r["expr"] for r in _alerts(cfg) if r["alert"] == "LLMEngineImbalance"]
    assert len(exprs) == 2
    assert ">= 7\nand" in exprs[0] and ">= 3 * (" in exprs[0], exprs[0]
    assert ">= 0.2 + (" in exprs[1], exprs[1]
    ranks = {("ds", "0"): 2.5, ("ds", "1"): 7.0}  # 2.8x and over 5: the default's imbalance
    assert [v.cause for v in diagnose(with_engine(healthy(), waiting_by_rank=ranks)).verdicts
            ] == ["imbalance"]
    assert not diagnose(with_engine(healthy(), waiting_by_rank=ranks), th).verdicts
    kv = {("ds", "0"): 0.4, ("ds", "1"): 0.65}  # 25 points: over 0.2, under the default 0.3
    assert not diagnose(with_engine(healthy(), kv_by_rank=kv)).verdicts
    d = diagnose(with_engine(healthy(), kv_by_rank=kv), th)
    assert [(v.cause, dict(v.scope)) for v in d.verdicts] == [
        ("imbalance", {"engine": "main", "dp_rank": "1"})], render(d)


def test_every_paging_cause_has_a_quiet_case() -> None:
    rest = findings.PAGING - {causes.DOWN, causes.XID_ERRORS, causes.SLOW_PREFILL,
                              causes.SLOW_DECODE}
    assert {(c.layer, c.name) for c in rest} <= set(QUIET_BUT_OVER)


def test_degraded_findings_follow_in_chain_order_network_first() -> None:
    obs = with_gpu(with_path(healthy(), "mobile", lost=14), 0, clock_events=("hw_thermal",))
    d = diagnose(obs)
    assert [v.layer for v in d.verdicts] == ["network", "gpu"], render(d)


def test_engine_metrics_failing_while_it_serves_is_no_data_for_the_engine() -> None:
    obs = replace(with_engine(healthy(), up=False, ttft_p95=None, itl_p95=None),
                  failing_checks=("engine/main",))
    d = diagnose(obs)
    assert d.status != "healthy", render(d)
    assert [(v.layer, v.cause, dict(v.scope)) for v in d.verdicts] == [
        ("exporter", "no_data", {"engine": "main"})], render(d)
    assert "while its API serves" in d.verdicts[0].summary


def test_slow_probes_of_an_unobservable_engine_are_one_verdict() -> None:
    obs = replace(all_probes(with_engine(healthy(), up=False, ttft_p95=None, itl_p95=None),
                             tpot_p95=0.2), failing_checks=("engine/main",))
    d = diagnose(obs)
    assert [(v.cause, dict(v.scope)) for v in d.verdicts] == [
        ("no_data", {"engine": "main"})], render(d)
    assert d.verdicts[0].symptoms == ("tpot",)
    assert {e.labels.get("probe") for e in d.verdicts[0].evidence} >= {
        "chat", "chat-mobile", "chat-unicom", "chat-telecom"}


def test_server_side_429s_are_one_verdict_with_every_probe_as_evidence() -> None:
    d = diagnose(all_probes(healthy(), outcomes={"ok": 12, "rate_limited": 8}))
    limited = [v for v in d.verdicts if v.cause == "rate_limited"]
    assert len(limited) == 1, render(d)
    assert dict(limited[0].scope) == {"engine": "main"}
    assert {e.labels.get("probe") for e in limited[0].evidence} == {
        "chat", "chat-mobile", "chat-unicom", "chat-telecom"}


def test_a_failing_path_check_is_no_data_for_its_path() -> None:
    d = diagnose(replace(healthy(), failing_checks=("path/mobile/gpu-sh",)))
    assert [(v.cause, dict(v.scope)) for v in d.verdicts] == [
        ("no_data", {"carrier": "mobile", "target": "gpu-sh"})], render(d)


def _alert(name: str, **labels: str) -> dict[str, str]:
    return {"alertname": name, "alertstate": "firing", **labels}


def test_one_answer_maps_alerts_onto_verdicts_both_ways() -> None:
    both = all_probes(with_path(with_engine(healthy(), queue_seconds=900.0, waiting=25.0,
                                            ttft_p95=2.4), "mobile", lost=12), ttft_p95=2.6)
    doc = diagnose(both).to_json()
    loss = _alert("LLMPathPacketLoss", carrier="mobile", target="gpu-sh")
    queue = _alert("LLMEngineCapacityBound", target="main", model="m")
    ttft = [_alert("LLMProbeTTFTHigh", probe=p) for p in
            ("chat", "chat-mobile", "chat-unicom", "chat-telecom")]
    assert one_answer([loss, queue, *ttft], doc) == []
    # A verdict of a paging cause without its alert, an alert no verdict explains.
    assert one_answer([queue, *ttft], doc) == [
        "verdict network/packet_loss {'carrier': 'mobile', 'target': 'gpu-sh'} has no "
        "LLMPathPacketLoss or LLMProbeStreamPacketLoss or LLMClientsRetransmissionHigh pending "
        "or firing"]
    other = _alert("LLMPathPacketLoss", carrier="unicom", target="gpu-sh")
    assert one_answer([loss, queue, other, *ttft], doc) == [
        "alert LLMPathPacketLoss{'carrier': 'unicom', 'target': 'gpu-sh'} is explained by "
        "no verdict"]
    # A probe's other symptom alert is the same verdict's: its span is not the window's.
    tpot = _alert("LLMProbeTPOTHigh", probe="chat-mobile")
    assert one_answer([loss, queue, tpot, *ttft], doc) == []
    # The engine's cause answers every probe through that engine, seen in the window or not.
    late = _alert("LLMProbeTTFTHigh", probe="batch", engine_target="main")
    assert one_answer([loss, queue, late, *ttft], doc) == []
    assert one_answer([loss, queue, {**late, "engine_target": "other"}, *ttft], doc)
    # Felt over the alerts' 5m span only (the window's probes inside their SLO, or too few
    # requests in it): the engine's unfelt cause is still the answer for its probes.
    quiet = diagnose(QUIET_BUT_OVER[("engine", "queueing")]).to_json()
    assert not quiet["verdicts"][0]["symptoms"]
    assert one_answer([queue, {**late, "alertname": "LLMProbeErrorBudgetBurn"}], quiet) == []
    # A verdict that took over no probe explains no other probe's alert.
    lossy = diagnose(with_path(healthy(), "mobile", lost=12)).to_json()
    assert one_answer([loss, tpot], lossy) == [
        "alert LLMProbeTPOTHigh{'probe': 'chat-mobile'} is explained by no verdict"]
    # Healthy pages nobody, not even pending.
    calm = diagnose(healthy()).to_json()
    assert calm["status"] == "healthy"
    assert one_answer([], calm) == []
    assert one_answer([{**loss, "alertstate": "pending"}], calm)


def test_an_engine_down_explains_its_probes_alerts_without_their_data() -> None:
    # The probes of a dead engine may have too little data in the window to show their
    # failures; their alerts still name the engine they hit (engine_target).
    obs = replace(with_engine(healthy(), up=False), probes=())
    doc = diagnose(obs).to_json()
    assert [(v["layer"], v["cause"]) for v in doc["verdicts"]] == [("engine", "down")]
    probe_alerts = [_alert(name, probe="chat", engine_target="main") for name in
                    ("LLMProbeFailureRatioHigh", "LLMProbeErrorBudgetBurn", "LLMProbeAbsent")]
    assert one_answer([_alert("LLMEngineDown", target="main", engine_target="main"),
                       *probe_alerts], doc) == []
    # Another engine's probes are not this one's.
    assert one_answer([_alert("LLMEngineDown", target="main"),
                       _alert("LLMProbeFailureRatioHigh", probe="x", engine_target="other")],
                      doc)


def test_the_fastest_prefill_over_the_history_is_per_window_span() -> None:
    """The declared ``prefill_rate_max`` over the embedded history: the best window-long
    span, at the subquery's steps (``diagnosis.baseline_step``, 10 s here)."""
    from array import array

    from exporter import metrics
    from exporter.config.load import parse_config
    from exporter.diagnosis import declare, observables
    from exporter.diagnosis.embedded import Evaluator
    from exporter.diagnosis.windows import Layout, OffPeak, Snapshot, Window

    config = parse_config("diagnosis: {window: 30s, interval: 10s, min_baseline: 100s}")
    (row,) = [o for o in observables.ENGINE_TABLE if o.field == "prefill_rate_max"]
    labels = (("target", "sim"),)
    keys = ((metrics.ENGINE_PROMPT_TOKENS.name, labels, None),
            (f"{metrics.ENGINE_PREFILL_TIME.name}_sum", labels, None))
    layout = Layout.of(keys)
    # Cumulative prompt tokens and prefill seconds, every 10 s: 10000 tokens/s for the
    # first 30 s, then prefill slows to 2500 tokens/s.
    points = [(0, 0.0, 0.0), (10, 1e5, 10.0), (20, 2e5, 20.0), (30, 3e5, 30.0),
              (40, 3.25e5, 40.0), (50, 3.5e5, 50.0), (60, 3.75e5, 60.0)]
    snaps = [Snapshot(float(t), False, layout, array("d", [n, s])) for t, n, s in points]

    def best(history: list[Snapshot]) -> dict[tuple[str, ...], float]:
        ev = Evaluator(Window(tuple(history[-2:]), 30.0), OffPeak(), None, config,
                       _everything=history)
        return declare.evaluate(row.expr, row.kind, ev.context())

    key = ("sim", *([""] * (len(declare.ENGINE.key) - 1)))
    assert best(snaps) == {key: 10000.0}
    assert best(snaps[3:]) == {key: 2500.0}
    assert best(snaps[:2]) == {}  # no span of a whole window yet


def test_an_alert_the_generated_inhibitions_mute_is_the_muting_verdicts() -> None:
    # Loss on mobile nobody feels in the window: its probe's TTFT over the alerts' 5m span is
    # muted by the loss alert in Alertmanager, so the user is paged once, with the loss.
    lossy = diagnose(with_path(healthy(), "mobile", lost=12)).to_json()
    loss = _alert("LLMPathPacketLoss", carrier="mobile", target="gpu-sh")
    ttft = _alert("LLMProbeTTFTHigh", probe="chat-mobile", carrier="mobile")
    assert one_answer([loss, ttft], lossy) == []
    # Loss on mobile mutes nothing of unicom's.
    assert one_answer([loss, {**ttft, "carrier": "unicom", "probe": "chat-unicom"}], lossy)
    # A down engine's capacity alert (its rates still hold its last minutes up) is muted by
    # the engine's own down alert.
    down = diagnose(replace(with_engine(healthy(), up=False), probes=())).to_json()
    queue = _alert("LLMEngineCapacityBound", target="main", model="m", instance="a")
    dead = _alert("LLMEngineDown", target="main", instance="a")
    assert one_answer([dead, queue], down) == []
    assert one_answer([dead, {**queue, "target": "b"}], down)
