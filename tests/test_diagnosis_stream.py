"""The chain on the probes' two direct sources (issue 22): the engine's exact split of each
probe's TTFT, preferred to subtracting distributions and named as such, and the probe
stream's own TCP loss as network evidence for its carrier where ICMP looks clean."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.result import Diagnosis, Evidence
from exporter.diagnosis.text import render
from exporter.monitoring import findings
from tests.support.observations import healthy, with_engine, with_path, with_probe

SEGMENTS = metrics.PROBE_TCP_SEGMENTS.name
SPLIT = metrics.PROBE_SERVER_TIMING.name


def step_evidence(d: Diagnosis, step: str) -> list[Evidence]:
    return list(next(s for s in d.steps if s.step == step).evidence)


def test_a_retransmitting_stream_is_loss_on_its_carrier_though_icmp_is_clean() -> None:
    obs = with_probe(healthy(), "chat-mobile", ttft_p95=1.8, tcp_retransmit_ratio=0.06,
                     tcp_out_of_order_ratio=0.01)
    d = diagnose(obs)
    v = d.verdicts[0]
    assert (v.layer, v.cause) == ("network", "packet_loss"), render(d)
    assert v.scope["carrier"] == "mobile" and v.scope["probe"] == "chat-mobile"
    assert "TCP stream on mobile loses packets: retransmitted/sent 6%" in v.summary
    assert [e.labels["segments"] for e in v.evidence if e.metric == SEGMENTS] == [
        "retransmitted/sent"]
    # Beside it, the carrier's clean ICMP loss the stream contradicts.
    [icmp] = [e for e in v.evidence if e.metric == metrics.PATH_LOSS.name]
    assert icmp.labels["carrier"] == "mobile" and icmp.value == 0


def test_out_of_order_segments_of_the_servers_stream_count_too() -> None:
    obs = with_probe(healthy(), "chat-mobile", ttft_p95=1.8, tcp_retransmit_ratio=0.0,
                     tcp_out_of_order_ratio=0.08)
    v = diagnose(obs).verdicts[0]
    assert (v.layer, v.cause) == ("network", "packet_loss")
    assert "out_of_order/received 8%" in v.summary


def test_stream_loss_joins_the_paths_loss_finding() -> None:
    """ICMP sees the loss too: one verdict, the path's, with the stream's evidence in it."""
    obs = with_probe(with_path(healthy(), "mobile", lost=12), "chat-mobile", ttft_p95=1.8,
                     tcp_retransmit_ratio=0.05)
    d = diagnose(obs)
    assert [(v.layer, v.cause) for v in d.verdicts] == [("network", "packet_loss")], render(d)
    v = d.verdicts[0]
    assert v.scope.get("target") == "gpu-sh" and "probe" not in v.scope
    assert {e.metric for e in v.evidence} >= {metrics.PATH_LOSS.name, SEGMENTS}


def test_a_stall_on_a_lossy_stream_is_the_loss_s() -> None:
    """A stall of 240 ms on a stream that loses 7% of its segments is a retransmission
    waiting out its timeout: one verdict, the loss's, with the stall in its evidence. The
    same stall on a clean stream stays a stall on the way, and so does one on another
    carrier's probe."""
    stalled = dict(ttft_p95=0.4, tpot_p95=0.3, stalls=1, itl_p99=0.24)
    d = diagnose(with_probe(healthy(), "chat-mobile", tcp_out_of_order_ratio=0.07, **stalled))
    assert [(v.layer, v.cause) for v in d.verdicts] == [("network", "packet_loss")], render(d)
    v = d.verdicts[0]
    assert "tpot" in v.symptoms and v.scope["probe"] == "chat-mobile"
    assert metrics.PROBE_ITL.name in {e.metric for e in v.evidence}
    d = diagnose(with_probe(healthy(), "chat-mobile", tcp_out_of_order_ratio=0.0, **stalled))
    assert [v.cause for v in d.verdicts] == ["stream_stalls"], render(d)
    d = diagnose(with_probe(with_probe(healthy(), "chat-mobile", **stalled), "chat-unicom",
                            tcp_out_of_order_ratio=0.07))
    assert sorted(v.cause for v in d.verdicts) == ["packet_loss", "stream_stalls"], render(d)


def test_a_clean_stream_clears_the_network_for_its_probe() -> None:
    obs = with_probe(healthy(), "chat-mobile", ttft_p95=1.8, tcp_retransmit_ratio=0.001,
                     tcp_out_of_order_ratio=0.0)
    d = diagnose(obs)
    assert all(v.cause != "packet_loss" for v in d.verdicts), render(d)
    assert sum(e.metric == SEGMENTS for e in step_evidence(d, "network")) == 2


def test_the_exact_split_is_preferred_and_named() -> None:
    """The engine's P95 is fine and far below the probe's, so the subtraction would put
    1.5 s between client and engine; the engine's own timing of the probe's requests says
    10% of their TTFT was outside it. The exact split decides, and says it is exact."""
    obs = with_probe(healthy(), "chat", ttft_p95=1.8, exact_splits=20,
                     network_frontend_share=0.1, queue_share=0.8)
    d = diagnose(obs)
    cleared = [e for e in step_evidence(d, "network") if e.labels.get("probe") == "chat"]
    split = [e for e in cleared if e.metric == SPLIT]
    assert len(split) == 1, cleared
    assert split[0].labels["split"] == "exact" and split[0].labels["part"] == "network_frontend"
    assert abs(split[0].value - 0.18) < 1e-9
    assert not any(e.labels.get("part") == "client_minus_engine" for e in cleared)
    assert all("between client and engine" not in v.summary for v in d.verdicts), render(d)


def test_an_exact_split_over_the_share_says_which_split_it_used() -> None:
    obs = with_engine(with_probe(healthy(), "chat", ttft_p95=1.8, exact_splits=20,
                                 network_frontend_share=0.8), ttft_p95=0.3)
    d = diagnose(obs)
    [v] = [v for v in d.verdicts if v.scope.get("probe") == "chat"]
    assert v.cause == "no_data", render(d)
    assert "1.44 s of its TTFT is spent between client and engine" in v.summary
    assert "(the engine's own timing of its requests)" in v.summary


def test_without_an_exact_split_the_subtraction_is_used_and_named() -> None:
    # The probe's and vLLM's bucket grids differ, so the means are subtracted.
    obs = with_engine(with_probe(healthy(), "chat", ttft_p95=1.8, ttft_mean=1.5),
                      ttft_mean=0.3)
    d = diagnose(obs)
    [v] = [v for v in d.verdicts if v.scope.get("probe") == "chat"]
    assert "(its mean TTFT less the engine's)" in v.summary, render(d)


def test_the_exact_queue_share_of_a_probes_ttft_decides_queueing() -> None:
    """The engine-wide share (6 s of 951 s) is low, but the slow probe's own requests spent
    70% of their first token queued, by the engine's own timing of them: queueing, and the
    evidence and headline say it was the exact split."""
    obs = with_probe(healthy(), "chat", ttft_p95=1.8, exact_splits=20,
                     network_frontend_share=0.05, queue_share=0.7)
    d = diagnose(obs)
    v = d.verdicts[0]
    assert (v.layer, v.cause) == ("engine", "queueing"), render(d)
    assert "70% of the linked probes' TTFT queued (the engine's own timing of them)" in v.summary
    [e] = [e for e in v.evidence if e.labels.get("split") == "exact"]
    assert e.labels["part"] == "queue" and e.labels["probe"] == "chat" and e.value == 0.7


def test_a_small_exact_queue_share_clears_queueing() -> None:
    obs = with_probe(healthy(), "chat", ttft_p95=1.8, exact_splits=20,
                     network_frontend_share=0.05, queue_share=0.02)
    d = diagnose(obs)
    assert all(v.cause != "queueing" for v in d.verdicts), render(d)
    engine_step = next(s for s in d.steps if s.step == "engine")
    assert engine_step.result == "ruled_out"
    assert [e.value for e in engine_step.evidence if e.labels.get("split") == "exact"] == [0.02]


def test_stream_loss_nobody_feels_yet_is_named_as_its_alert_would_page() -> None:
    """LLMProbeStreamPacketLoss's condition on a probe within its SLO: the chain reports the
    same cause (degraded), one answer with the alert."""
    obs = with_probe(healthy(), "chat-unicom", tcp_out_of_order_ratio=0.05)
    d = diagnose(obs)
    assert d.status == "degraded", render(d)
    [v] = d.verdicts
    assert (v.layer, v.cause) == ("network", "packet_loss")
    assert v.scope["carrier"] == "unicom" and v.scope["probe"] == "chat-unicom"
    alert = {"alertname": "LLMProbeStreamPacketLoss", "probe": "chat-unicom",
             "carrier": "unicom"}
    verdict = {"layer": v.layer, "cause": v.cause, "scope": dict(v.scope)}
    assert findings.unmatched([alert], [verdict]) == []
    # And a path's loss verdict on the same carrier explains the stream's alert too.
    path_verdict = {"layer": "network", "cause": "packet_loss",
                    "scope": {"carrier": "unicom", "target": "gpu-sh"}}
    assert findings.explains(path_verdict, alert)
