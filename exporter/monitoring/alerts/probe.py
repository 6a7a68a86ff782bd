"""Probe alerts: what a user would feel (latency over the SLO, failures, stalls), and
probes that stopped reporting."""

from __future__ import annotations

from exporter import metrics
from exporter.config.models import Config, ProbeConfig
from exporter.diagnosis.observations import NEW_CONNECTION, SETUP_PHASES, SETUP_ROUND_TRIPS
from exporter.metrics import names
from exporter.metrics.names import PROBE, RATE, alternation, prom_duration
from exporter.monitoring.promql import (
    PROBE_TEXT,
    VALUE_PERCENT,
    VALUE_SECONDS,
    human_seconds,
    num,
    paren,
    pct,
    rate_sum,
    ratio,
    segments_share,
)
from exporter.monitoring.rule import Alert


def probe_thresholds(config: Config, key: str) -> list[tuple[float, str]]:
    """(threshold, probe matcher) per distinct SLO: overriding probes first, then the rest."""
    default: float = getattr(config.slo, key)
    overrides: dict[float, list[str]] = {}
    for probe in config.probes:
        value = getattr(probe.slo, key)
        if value is not None and value != default:
            overrides.setdefault(value, []).append(probe.name)
    out = [(value, f'{{probe=~"{alternation(probes)}"}}') for value, probes in overrides.items()]
    others = [name for probes in overrides.values() for name in probes]
    out.append((default, f'{{probe!~"{alternation(others)}"}}' if others else ""))
    return out


def _probe_labels(probe: ProbeConfig) -> dict[str, str]:
    """Labels an absent probe's alert carries from the config, as its series would."""
    labels = {"probe": probe.name}
    if probe.carrier:
        labels["carrier"] = probe.carrier
    if probe.engine:
        labels["engine_target"] = probe.engine
    return labels


def stale_after(config: Config) -> float:
    """Three intervals of the slowest probe, and never under 5 minutes."""
    return max([300.0, *(3 * p.interval for p in config.probes)])


def _stream_loss(config: Config) -> Alert:
    """The probe's own stream lost packets (TCP_INFO): retransmitted / sent, or out of
    order / received, over the loss SLO; the chain's network step decides the same."""
    loss = config.slo.loss_ratio

    def share(part: metrics.TcpSegments, whole: metrics.TcpSegments) -> str:
        return paren(segments_share(PROBE, part, whole))

    seg = metrics.TcpSegments
    return Alert(
        "LLMProbeStreamPacketLoss",
        f"{share(seg.RETRANSMITTED, seg.SENT)} > {num(loss)}\nor\n"
        f"{share(seg.OUT_OF_ORDER, seg.RECEIVED)} > {num(loss)}",
        "warning",
        "A probe's TCP stream loses packets.",
        f"{PROBE_TEXT}: {VALUE_PERCENT} of its connection's segments were retransmitted or "
        f"arrived out of order over {RATE} (kernel TCP_INFO; threshold {pct(loss)}), "
        "whatever ICMP to its carrier shows.",
        "10m",
    )


def _setup_slow(config: Config) -> list[Alert]:
    """A new connection's DNS, connect and TLS P95 (their P95s added up, as the chain reads
    them, a phase with nothing in the window left out) beyond SETUP_ROUND_TRIPS of the
    probe's own TCP RTT (none where the kernel gives no RTT), over
    ``connection_setup_share`` of the probe's TTFT SLO: the chain's network/connection_setup,
    on its line."""
    share = config.diagnosis.connection_setup_share
    rtt = metrics.PROBE_TCP_RTT.name
    alerts = []
    for threshold, matcher in probe_thresholds(config, "ttft_p95_seconds"):
        only = f", {matcher.strip('{}')}" if matcher else ""
        buckets = (f'{metrics.PROBE_PHASE.name}_bucket{{connection="{NEW_CONNECTION}", '
                   f'phase=~"{alternation(SETUP_PHASES)}"{only}}}')
        setup = (f"sum by ({PROBE.by}) (histogram_quantile(0.95, "
                 f"sum by (le, phase, {PROBE.by}) (rate({buckets}[{RATE}]))) >= 0)")
        trips = ratio(rate_sum(PROBE, f"{rtt}_sum"), rate_sum(PROBE, f"{rtt}_count"))
        alerts.append(Alert(
            "LLMProbeConnectionSetupSlow",
            paren(f"{setup}\n- {SETUP_ROUND_TRIPS} * {paren(trips)}", "or", setup)
            + f"\n> {num(share * threshold)}",
            "warning",
            "A probe's new connections take long to open.",
            f"{PROBE_TEXT}: DNS, connect and TLS of its new connections take {VALUE_SECONDS} "
            f"(P95) beyond {SETUP_ROUND_TRIPS} round trips over {RATE} (threshold "
            f"{human_seconds(share * threshold)}: {pct(share)} of the TTFT SLO); users who "
            "open a connection wait that before their first token.",
            "10m",
            {"slo": human_seconds(threshold)},
        ))
    return alerts


def probe_alerts(config: Config) -> list[Alert]:
    alerts: list[Alert] = []
    for alert, series, key, what in (
        ("LLMProbeTTFTHigh", names.PROBE_TTFT, "ttft_p95_seconds", "time to first token"),
        ("LLMProbeTPOTHigh", names.PROBE_TPOT, "tpot_p95_seconds", "time per output token"),
    ):
        for threshold, matcher in probe_thresholds(config, key):
            alerts.append(
                Alert(
                    alert,
                    f"{series.p95}{matcher} > {num(threshold)}",
                    "warning",
                    f"Probe P95 {what} is over its SLO.",
                    f"{PROBE_TEXT} P95 {what} over {RATE} is {VALUE_SECONDS}, over the "
                    f"{human_seconds(threshold)} SLO.",
                    "10m",
                    # Probes with their own SLO get a rule each; the label keeps them apart.
                    {"slo": human_seconds(threshold)},
                )
            )
    failure = config.slo.probe_failure_ratio
    alerts.append(
        Alert(
            "LLMProbeFailureRatioHigh",
            f"1 - {names.PROBE_SUCCESS_RATIO} > {num(failure)}",
            "warning",
            "Synthetic probes are failing.",
            f"{PROBE_TEXT} failed {VALUE_PERCENT} of its requests over {RATE} "
            f"(threshold {pct(failure)}); the outcome label of "
            f"{metrics.PROBE_REQUESTS.name} says how.",
            "10m",
        )
    )
    stall = config.alerting.stall_seconds
    alerts.append(
        Alert(
            "LLMProbeStreamStalls",
            f"{names.PROBE_STALL_P95} > {num(stall)}",
            "warning",
            "Streams pause for long between tokens.",
            f"{PROBE_TEXT}: the P95 of each request's longest gap between tokens is "
            f"{VALUE_SECONDS} over {RATE} (threshold {human_seconds(stall)}).",
            "10m",
        )
    )
    alerts.append(_stream_loss(config))
    alerts += _setup_slow(config)
    for probe in config.probes:
        alerts.append(
            Alert(
                "LLMProbeAbsent",
                f'absent({metrics.PROBE_REQUESTS.name}{{probe="{probe.name}"}})',
                "warning",
                "A probe has no fresh data in Prometheus.",
                f"Probe {probe.name} has no {metrics.PROBE_REQUESTS.name} series: the "
                "exporter is down, not scraped, or runs a config without this probe.",
                "10m",
                _probe_labels(probe),
            )
        )
    stale = stale_after(config)
    alerts.append(
        Alert(
            "LLMProbeAbsent",
            f"time() - max by ({PROBE.by}) ({metrics.PROBE_LAST_SUCCESS.name}) > {num(stale)}",
            "warning",
            "A probe has no fresh data in Prometheus.",
            f"{PROBE_TEXT} last succeeded {VALUE_SECONDS} ago (threshold "
            f"{prom_duration(stale)}): its latency panels show stale numbers.",
        )
    )
    return alerts
