"""Recording rules: quantiles, ratios and shares at each level, and the day-vs-evening
series. Every name comes from :mod:`exporter.metrics.names`."""

from __future__ import annotations

from typing import Any

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import ProbeOutcome, names
from exporter.metrics.names import (
    CARRIER,
    MODEL,
    PATH,
    PROBE,
    RATE,
    ROUTE,
    Quantiles,
    prom_duration,
)
from exporter.monitoring.promql import (
    hist_quantile,
    loss,
    offpeak_gate,
    paren,
    peak_gate,
    rate_sum,
    ratio,
    segments_share,
)
from exporter.monitoring.rule import Rule, group, record


def quantile_rules(series: Quantiles) -> list[Rule]:
    return [
        record(name, hist_quantile(q, series.level, series.family))
        for q, name in series.by_quantile()
    ]


def goodput_windows(config: Config) -> list[str]:
    """Every long and short window of the burn-rate pairs, shortest first."""
    seconds = {s for w in config.alerting.burn_windows for s in (w.long, w.short)}
    return [prom_duration(s) for s in sorted(seconds)]


def probe_recording(config: Config) -> list[Rule]:
    rules = [r for q in (names.PROBE_TTFT, names.PROBE_TPOT, names.PROBE_E2E)
             for r in quantile_rules(q)]
    rules.append(record(names.PROBE_STALL_P95, hist_quantile(0.95, PROBE, metrics.PROBE_STALL)))
    requests = metrics.PROBE_REQUESTS.name
    ok = f'{requests}{{outcome="{ProbeOutcome.OK.value}"}}'
    rules.append(
        record(names.PROBE_SUCCESS_RATIO, f"{rate_sum(PROBE, ok)}\n/\n{rate_sum(PROBE, requests)}")
    )
    # Counters, not le buckets: a bucket bound at the SLO would have to match the exposed
    # le string exactly ("1" vs "1.0"), and the probe already judged each request.
    rules.extend(
        record(
            names.probe_goodput(window),
            f"{rate_sum(PROBE, metrics.PROBE_SLO_GOOD.name, window)}\n/\n"
            f"{rate_sum(PROBE, requests, window)}",
        )
        for window in goodput_windows(config)
    )
    return rules


def engine_recording() -> list[Rule]:
    rules = [r for q in (names.ENGINE_TTFT, names.ENGINE_ITL) for r in quantile_rules(q)]
    e2e = rate_sum(MODEL, f"{metrics.ENGINE_E2E.name}_sum")
    triton_total = rate_sum(MODEL, metrics.ENGINE_REQUEST_DURATION.name)
    # Triton has cumulative duration counters instead of histograms: the same share.
    triton = {
        metrics.ENGINE_QUEUE_TIME: rate_sum(MODEL, metrics.ENGINE_QUEUE_DURATION.name),
    }
    for name, family in ((names.ENGINE_QUEUE_SHARE, metrics.ENGINE_QUEUE_TIME),
                         (names.ENGINE_PREFILL_SHARE, metrics.ENGINE_PREFILL_TIME),
                         (names.ENGINE_DECODE_SHARE, metrics.ENGINE_DECODE_TIME)):
        expr = ratio(rate_sum(MODEL, f"{family.name}_sum"), e2e)
        if family in triton:
            expr = f"{paren(expr)}\nor\n{paren(ratio(triton[family], triton_total))}"
        rules.append(record(name, expr))
    prefill = rate_sum(MODEL, f"{metrics.ENGINE_PREFILL_TIME.name}_sum")
    decode = rate_sum(MODEL, f"{metrics.ENGINE_DECODE_TIME.name}_sum")
    compute = rate_sum(MODEL, metrics.ENGINE_COMPUTE_DURATION.name)
    rules.append(
        record(
            names.ENGINE_INFERENCE_SHARE,
            f"{paren(ratio(paren(prefill, '+', decode), e2e))}\n"
            f"or\n{paren(ratio(compute, triton_total))}",
        )
    )
    return rules


def path_recording(config: Config) -> list[Rule]:
    rules = [
        record(names.PATH_LOSS, loss(rate_sum(PATH, metrics.PATH_PACKETS_RECEIVED.name),
                                     rate_sum(PATH, metrics.PATH_PACKETS_SENT.name))),
        *quantile_rules(names.PATH_RTT),
    ]
    info = metrics.PATH_ROUTE_INFO.name
    # Rank 1 is the best class; classes outside the list (unknown) get no rank, so a trace
    # that saw no hop neither raises nor clears the alert.
    ranked = "\nor\n".join(
        f'({info}{{route_class="{cls}"}} * {rank})'
        for rank, cls in enumerate(config.alerting.route_class_order, start=1)
    )
    rules.append(record(names.ROUTE_RANK, f"max by ({ROUTE.by}) {paren(ranked)}"))
    return rules


def clients_retransmission() -> str:
    """Retransmitted over sent segments of a carrier's real users over RATE."""
    return ratio(rate_sum(CARRIER, metrics.CLIENTS_SEGMENTS_RETRANSMITTED.name),
                 rate_sum(CARRIER, metrics.CLIENTS_SEGMENTS_SENT.name))


def clients_recording() -> list[Rule]:
    return [record(names.CLIENTS_RETRANSMISSION, clients_retransmission()),
            *quantile_rules(names.CLIENTS_RTT)]


#: Probes tagged with a carrier: an untagged probe rides no carrier's path.
TAGGED = 'carrier!=""'


def probe_stream_retransmission() -> str:
    """Retransmitted over sent segments of a carrier's probe streams over RATE."""
    seg = metrics.TcpSegments
    return segments_share(CARRIER, seg.RETRANSMITTED, seg.SENT, TAGGED)


def probe_stream_recording() -> list[Rule]:
    """Per carrier, its probes' own streams (TCP_INFO): retransmitted over sent and out of
    order over received segments, the two shares LLMProbeStreamPacketLoss compares with
    the loss SLO per probe, the kernel's smoothed RTT, and the engine's timing of each
    request part by part."""
    seg = metrics.TcpSegments
    return [
        record(names.PROBE_STREAM_RETRANSMISSION, probe_stream_retransmission()),
        record(names.PROBE_STREAM_OUT_OF_ORDER,
               segments_share(CARRIER, seg.OUT_OF_ORDER, seg.RECEIVED, TAGGED)),
        *(record(name, f"histogram_quantile({q:g}, sum by (le, {series.level.by}) "
                       f"(rate({series.family.name}_bucket{{{TAGGED}}}[{RATE}])))")
          for series in (names.PROBE_TCP_RTT, names.PROBE_SERVER_TIMING)
          for q, name in series.by_quantile()),
    ]


def peak_recording(config: Config) -> list[Rule]:
    """Per peak window: P95s and loss while the window is on; off-peak: the same while no
    window is on, plus gated bucket rates whose sum over the baseline window gives a true
    off-peak P95 (an average of P95s is not a P95)."""
    windows = config.peak_windows.windows
    if not windows:
        return []
    span = prom_duration(config.alerting.baseline_window)
    rules: list[Rule] = []
    for series in names.PEAK_HISTOGRAMS:
        level, family = series.level, series.family
        for name in windows:
            rules.append(
                record(series.peak, f"{hist_quantile(0.95, level, family)}\n{peak_gate(name)}",
                       {"window": name})
            )
        buckets = series.offpeak_buckets
        rules.append(
            record(buckets,
                   f"sum by (le, {level.by}) (rate({family.name}_bucket[{RATE}]))\n"
                   f"{offpeak_gate()}")
        )
        rules.append(record(series.offpeak, f"histogram_quantile(0.95, {buckets})"))
        # Each rate sample stands for one evaluation interval of observations, so their sum
        # over the span is proportional to the counts: the quantile of the whole span.
        rules.append(
            record(series.baseline,
                   f"histogram_quantile(0.95, sum by (le, {level.by}) "
                   f"(sum_over_time({buckets}[{span}])))")
        )
    sent, received = metrics.PATH_PACKETS_SENT, metrics.PATH_PACKETS_RECEIVED
    # Not from PATH_LOSS: a series recorded by another group is seen one evaluation late.
    path_loss = loss(rate_sum(PATH, received.name), rate_sum(PATH, sent.name))
    for name in windows:
        rules.append(
            record(names.PATH_LOSS_PEAK, f"{path_loss}\n{peak_gate(name)}", {"window": name})
        )
    for offpeak, family in ((names.PATH_SENT_OFFPEAK, sent),
                            (names.PATH_RECEIVED_OFFPEAK, received)):
        rules.append(record(offpeak, f"{rate_sum(PATH, family.name)}\n{offpeak_gate()}"))
    rules.append(
        record(names.PATH_LOSS_OFFPEAK,
               loss(names.PATH_RECEIVED_OFFPEAK, names.PATH_SENT_OFFPEAK))
    )
    # Not from CLIENTS_RETRANSMISSION or PROBE_STREAM_RETRANSMISSION, for the same reason.
    for retransmission, peak, offpeak in (
        (clients_retransmission(), names.CLIENTS_RETRANSMISSION_PEAK,
         names.CLIENTS_RETRANSMISSION_OFFPEAK),
        (probe_stream_retransmission(), names.PROBE_STREAM_RETRANSMISSION_PEAK,
         names.PROBE_STREAM_RETRANSMISSION_OFFPEAK),
    ):
        rules += [record(peak, f"{retransmission}\n{peak_gate(name)}", {"window": name})
                  for name in windows]
        rules.append(record(offpeak, f"{retransmission}\n{offpeak_gate()}"))
    rules.append(
        record(
            names.PATH_LOSS_BASELINE,
            loss(f"sum_over_time({names.PATH_RECEIVED_OFFPEAK}[{span}])",
                 f"sum_over_time({names.PATH_SENT_OFFPEAK}[{span}])"),
        )
    )
    return rules


def recording_groups(config: Config) -> list[dict[str, Any]]:
    groups = [
        group("llm-probe.rules", probe_recording(config)),
        group("llm-engine.rules", engine_recording()),
        group("llm-path.rules", path_recording(config)),
        group("llm-clients.rules", clients_recording()),
        group("llm-probe-stream.rules", probe_stream_recording()),
    ]
    peak = peak_recording(config)
    if peak:
        groups.append(group("llm-peak.rules", peak))
    return groups
