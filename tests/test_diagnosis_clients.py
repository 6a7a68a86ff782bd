"""Real users per carrier in the decision chain: a carrier whose users' streams retransmit
over the loss line is ``network/packet_loss`` scoped to it, with or without a probe or a path
there; congestion only the evening has is ``peak_congestion``; a slow users' RTT is the RTT
floor; and too few segments are not judged."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from exporter import metrics
from exporter.config.load import parse_config
from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.observations import ClientWindow, Observations
from exporter.diagnosis.steps.users import CLIENT_RTT, RETRANSMISSION
from exporter.diagnosis.text import render
from exporter.diagnosis.thresholds import resolve
from exporter.monitoring import findings
from tests.support.observations import CARRIERS, healthy, with_path, with_probe


def client(carrier: str, **kw: Any) -> ClientWindow:
    base: dict[str, Any] = dict(
        carrier=carrier, connections=40.0, sent=20_000, retransmitted=20, rtt_p95=0.06,
        rtt_mean=0.04, retransmission_baseline=0.001, rtt_baseline=0.04)
    base.update(kw)
    return ClientWindow(**base)


def with_clients(obs: Observations, **by_carrier: dict[str, Any]) -> Observations:
    return replace(obs, clients=tuple(client(c, **by_carrier.get(c, {})) for c in CARRIERS))


def _without(obs: Observations, carrier: str) -> Observations:
    """No probe and no path on ``carrier``: only its real users see it."""
    return replace(obs, paths=tuple(p for p in obs.paths if p.carrier != carrier),
                   probes=tuple(p for p in obs.probes if p.carrier != carrier))


def test_healthy_users_clear_the_network() -> None:
    d = diagnose(with_clients(healthy()))
    assert d.status == "healthy", render(d)
    network = {s.step: s for s in d.steps}["network"]
    assert network.result == "ruled_out"
    assert {e.metric for e in network.evidence} >= {RETRANSMISSION, CLIENT_RTT}


def test_users_retransmitting_with_no_probe_or_path_there_is_packet_loss() -> None:
    obs = _without(with_clients(healthy(), unicom=dict(retransmitted=1000)), "unicom")
    d = diagnose(obs)
    assert d.status == "degraded", render(d)
    assert [(v.layer, v.cause, dict(v.scope)) for v in d.verdicts] == [
        ("network", "packet_loss", {"carrier": "unicom"})], render(d)
    v = d.verdicts[0]
    assert v.summary.startswith("Real users of unicom retransmit 5% of 20000 segments")
    assert "no probe is past its SLO over the last " in v.summary
    ratio = next(e for e in v.evidence if e.metric == RETRANSMISSION)
    assert ratio.value == 0.05 and ratio.threshold == 0.02 and ratio.baseline == 0.001
    sent = next(e for e in v.evidence if e.metric == metrics.CLIENTS_SEGMENTS_SENT.name)
    assert sent.value == 20_000 and sent.threshold == 1000
    # The alert that stands for it is the carrier's, and it is one answer with the verdict.
    alert = {"alertname": "LLMClientsRetransmissionHigh", "carrier": "unicom"}
    assert findings.explains(v.to_json(), alert)
    assert not findings.explains(v.to_json(), {**alert, "carrier": "mobile"})


def test_too_few_segments_are_not_judged() -> None:
    obs = _without(with_clients(healthy(), unicom=dict(sent=500, retransmitted=100)), "unicom")
    d = diagnose(obs)
    assert d.status == "healthy", render(d)
    # Just under the line, with segments enough: cleared.
    obs = with_clients(healthy(), unicom=dict(retransmitted=390))
    assert diagnose(obs).status == "healthy"


def test_a_probe_on_the_carrier_is_explained_while_icmp_looks_clean() -> None:
    # The ICMP path is clean (carriers deprioritize echoes), the users' streams are not.
    obs = with_probe(with_clients(healthy(), mobile=dict(retransmitted=1200)), "chat-mobile",
                     ttft_p95=1.8)
    d = diagnose(obs)
    v = d.verdicts[0]
    assert (v.layer, v.cause, dict(v.scope)) == ("network", "packet_loss",
                                                 {"carrier": "mobile"}), render(d)
    assert v.symptoms == ("ttft",)
    assert "the chat-mobile probe's" in v.summary


def test_a_path_and_its_users_losing_are_one_verdict() -> None:
    obs = with_path(with_clients(healthy(), mobile=dict(retransmitted=1200)), "mobile",
                    lost=12)
    d = diagnose(obs)
    losses = [v for v in d.verdicts if v.cause == "packet_loss"]
    assert len(losses) == 1, render(d)
    assert dict(losses[0].scope) == {"carrier": "mobile", "target": "gpu-sh"}
    assert {e.metric for e in losses[0].evidence} >= {metrics.PATH_LOSS.name, RETRANSMISSION}


def test_evening_only_retransmission_is_peak_congestion() -> None:
    obs = _without(with_clients(healthy(), telecom=dict(retransmitted=800, in_peak=True,
                                                        retransmission_baseline=0.002)),
                   "telecom")
    d = diagnose(obs)
    assert [(v.cause, dict(v.scope)) for v in d.verdicts] == [
        ("peak_congestion", {"carrier": "telecom"})], render(d)
    assert "off-peak 0.2%" in d.verdicts[0].summary


def test_evening_rtt_far_over_the_users_baseline_is_congestion_when_it_hurts() -> None:
    # No alert stands for an RTT drift: a verdict only while a probe is past its SLO.
    obs = with_clients(healthy(), mobile=dict(rtt_mean=0.09, in_peak=True))
    assert diagnose(obs).status == "healthy"
    d = diagnose(with_probe(obs, "chat-mobile", ttft_p95=1.4))
    assert (d.verdicts[0].cause, dict(d.verdicts[0].scope)) == (
        "peak_congestion", {"carrier": "mobile"}), render(d)
    assert "RTT 90 ms at peak (off-peak 40 ms)" in d.verdicts[0].summary


def test_users_far_away_are_the_rtt_floor() -> None:
    obs = with_probe(with_clients(healthy(), mobile=dict(rtt_mean=0.25, rtt_baseline=0.25)),
                     "chat-mobile", ttft_p95=1.3)
    d = diagnose(obs)
    assert (d.verdicts[0].cause, dict(d.verdicts[0].scope)) == (
        "rtt_floor", {"carrier": "mobile"}), render(d)


def test_the_lines_come_from_the_config() -> None:
    th = resolve(parse_config("slo: {loss_ratio: 0.05}\nalerting: {clients_min_segments: 50}\n"))
    assert (th.loss_ratio, th.clients_min_segments) == (0.05, 50)
    obs = _without(with_clients(healthy(), unicom=dict(sent=100, retransmitted=4)), "unicom")
    assert diagnose(obs, th).status == "healthy"
    obs = _without(with_clients(healthy(), unicom=dict(sent=100, retransmitted=6)), "unicom")
    assert diagnose(obs, th).verdicts[0].cause == "packet_loss"


def test_a_failing_clients_check_judges_no_carrier() -> None:
    obs = _without(with_clients(healthy(), unicom=dict(retransmitted=1000)), "unicom")
    d = diagnose(replace(obs, failing_checks=("clients/8000",)))
    assert "packet_loss" not in {v.cause for v in d.verdicts}, render(d)
