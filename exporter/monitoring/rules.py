"""Prometheus recording rules, alerts and an Alertmanager template, built from one Config.

Every metric name comes from :mod:`exporter.metrics` and every recorded name from the
helpers below, which :mod:`exporter.monitoring.dashboards` uses too, so no name is typed
twice. Thresholds come from the config's ``slo`` and ``alerting`` sections.
Day-vs-evening rules are gated on
``llm_exporter_peak_window``: the exporter knows the local timezone and Prometheus does
not, so no rule does UTC hour arithmetic.

Names follow ``level:metric:operations``. A level is the label set a rule aggregates to;
every level keeps ``job`` and ``instance`` (dashboards filter on instance).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from exporter import metrics
from exporter.checks.gpu.nvml import CLOCK_EVENT_REASONS
from exporter.config.models import Config, PeakWindow, ProbeConfig
from exporter.config.values import parse_duration
from exporter.metrics import Family
from exporter.probing.stream import Outcome

#: Window of every ``*_rate5m`` series. With 15 s probes a 5m window holds ~20 requests.
RATE = "5m"
QUANTILES = (0.5, 0.95, 0.99)
#: Multiwindow multi-burn-rate pairs of the SRE workbook for a 30-day objective:
#: (long, short, burn factor, for, severity). 2% of the budget in 1h, 5% in 6h.
BURN_WINDOWS = (("1h", "5m", 14.4, "2m", "critical"), ("6h", "30m", 6.0, "15m", "critical"))
#: The jitter estimator alerts read: RFC 3550's, kept across bursts (see metrics.py).
JITTER_METHOD = "rfc3550"
#: A route class worse than the best one seen this far back counts as degraded.
ROUTE_LOOKBACK = "6h"
#: GPU clock-event reasons that mean a fault or cooling problem. power_cap is left out: a
#: GPU at full load sits on its power limit by design (docs/runbooks.md explains).
THROTTLE_REASONS = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")
#: Share of the last 10 minutes a throttle reason must hold to alert (NVML flips per sample).
THROTTLE_SHARE = 0.5
#: Checks whose failures already have their own alert (LLMProbeFailureRatioHigh,
#: LLMEngineDown); LLMExporterCheckFailing covers the others.
CHECK_KINDS_ALERTED_ELSEWHERE = ("probe", "engine")

SEVERITIES = ("critical", "warning", "info")
RECORDING_FILE = "recording.yaml"
ALERTS_FILE = "alerts.yaml"

assert set(THROTTLE_REASONS) <= {reason for _, reason in CLOCK_EVENT_REASONS}


# --- levels and recorded names -----------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """An aggregation level: the ``level`` part of a recorded name and the labels kept."""

    name: str
    labels: tuple[str, ...]

    @property
    def by(self) -> str:
        return ", ".join(self.labels)


SCRAPE = ("job", "instance")
PROBE = Level("probe", (*SCRAPE, *metrics.PROBE_LABELS))
# Data-parallel ranks of one model are one service to a user: summed.
MODEL = Level("model", (*SCRAPE, *(x for x in metrics.ENGINE_SERIES_LABELS if x != "dp_rank")))
PATH = Level("path", (*SCRAPE, *metrics.PATH_LABELS))
ROUTE = Level("route", (*SCRAPE, *metrics.ROUTE_LABELS))
#: Labels the peak-window gauge shares with every other series of the same exporter.
PEAK_JOIN = ", ".join(SCRAPE)


def recorded(level: Level, metric: str, operation: str) -> str:
    return f"{level.name}:{metric}:{operation}"


def quantile(level: Level, family: Family, q: float, suffix: str = "") -> str:
    """``probe:llm_probe_time_to_first_token_seconds:p95_rate5m`` (+ ``_peak`` ...)."""
    return recorded(level, family.name, f"p{q * 100:g}_rate{RATE}{suffix}")


def offpeak_buckets(level: Level, family: Family) -> str:
    return recorded(Level(f"{level.name}_le", level.labels), f"{family.name}_bucket",
                    f"rate{RATE}_offpeak")


def baseline(level: Level, family: Family) -> str:
    """True P95 of the off-peak time in ``alerting.baseline_window``."""
    return recorded(level, family.name, "p95_offpeak_baseline")


def share(family: Family) -> str:
    """Share of engine end-to-end time spent in ``family``'s phase."""
    return recorded(MODEL, family.name, f"share_rate{RATE}")


def _counter_ratio(level: Level, numerator: str, denominator: str, window: str) -> str:
    return recorded(level, f"{numerator}_per_{denominator}", f"ratio_rate{window}")


_REQUESTS = metrics.PROBE_REQUESTS.base.rsplit("_", 1)[-1]
SUCCESS_RATIO = _counter_ratio(PROBE, f"{metrics.PROBE_REQUESTS.base}_{Outcome.OK.value}",
                               _REQUESTS, RATE)
GOODPUT_WINDOWS = tuple(sorted({w for pair in BURN_WINDOWS for w in pair[:2]}, key=parse_duration))


def goodput(window: str) -> str:
    return _counter_ratio(PROBE, metrics.PROBE_SLO_GOOD.base, _REQUESTS, window)


# Derived, not typed: llm_path_packets_sent -> llm_path_packets + sent, for ..._lost_per_sent.
_PACKETS = metrics.PATH_PACKETS_SENT.base.removesuffix("_sent")
_SENT = metrics.PATH_PACKETS_SENT.base.removeprefix(f"{_PACKETS}_")
LOSS = _counter_ratio(PATH, f"{_PACKETS}_lost", _SENT, RATE)
LOSS_PEAK = f"{LOSS}_peak"
LOSS_OFFPEAK = f"{LOSS}_offpeak"
LOSS_BASELINE = recorded(PATH, f"{_PACKETS}_lost_per_{_SENT}", "ratio_offpeak_baseline")
INFERENCE_SHARE = recorded(
    MODEL, metrics.ENGINE_PREFILL_TIME.name.replace("prefill", "inference"), f"share_rate{RATE}"
)
ROUTE_RANK = recorded(ROUTE, metrics.PATH_ROUTE_INFO.name, "rank")


def offpeak_rate(family: Family) -> str:
    return recorded(PATH, family.base, f"rate{RATE}_offpeak")


#: Histograms with day-vs-evening series: P95 per peak window, off-peak, and the baseline.
PEAK_HISTOGRAMS: tuple[tuple[Level, Family], ...] = (
    (PROBE, metrics.PROBE_TTFT),
    (PROBE, metrics.PROBE_TPOT),
    (PATH, metrics.PATH_RTT),
)


# --- PromQL and text helpers -------------------------------------------------------------


def num(value: float) -> str:
    """A threshold as PromQL reads it: 14.4 * (1 - 0.99) is 0.144, not 0.14400000000000013."""
    return f"{round(value, 9):g}"


def prom_duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def human_seconds(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def pct(ratio: float) -> str:
    return f"{round(ratio * 100, 6):g}%"


def alternation(names: Iterable[str]) -> str:
    """A regex matching exactly ``names``, escaped for a PromQL double-quoted string."""
    return "|".join(re.escape(n).replace("\\", "\\\\") for n in names)


def lbl(name: str) -> str:
    return "{{ $labels." + name + " }}"


VALUE_SECONDS = "{{ $value | humanizeDuration }}"
VALUE_PERCENT = "{{ $value | humanizePercentage }}"
VALUE_TIMES = '{{ printf "%.2f" $value }}x'
VALUE_NUMBER = '{{ printf "%.0f" $value }}'
PROBE_TEXT = f"Probe {lbl('probe')} ({lbl('target')}, profile {lbl('profile')})"
MODEL_TEXT = f"Engine {lbl('target')} model {lbl('model')}"
PATH_TEXT = f"Carrier {lbl('carrier')} path to {lbl('target')} ({lbl('region')})"
GPU_TEXT = f"GPU {lbl('gpu')} ({lbl('name')}) on {lbl('instance')}"


def hist_quantile(q: float, level: Level, family: Family, window: str = RATE) -> str:
    return (
        f"histogram_quantile({q:g}, sum by (le, {level.by}) "
        f"(rate({family.name}_bucket[{window}])))"
    )


def rate_sum(level: Level, series: str, window: str = RATE) -> str:
    return f"sum by ({level.by}) (rate({series}[{window}]))"


def paren(*lines: str) -> str:
    """Lines wrapped in parentheses, indented: long rules stay readable in the YAML."""
    return "(\n" + textwrap.indent("\n".join(lines), "  ") + "\n)"


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n/\n{denominator}"


def loss(received: str, sent: str) -> str:
    return "1 - " + paren(ratio(received, sent))


def window_text(name: str, window: PeakWindow, timezone: str) -> str:
    return f"{name} window ({window.start:%H:%M}-{window.end:%H:%M} {timezone})"


def peak_gate(window: str) -> str:
    name = metrics.EXPORTER_PEAK_WINDOW.name
    return f'and on ({PEAK_JOIN}) ({name}{{window="{window}"}} == 1)'


def offpeak_gate() -> str:
    name = metrics.EXPORTER_PEAK_WINDOW.name
    return f"and on ({PEAK_JOIN}) (max by ({PEAK_JOIN}) ({name}) == 0)"


# --- rule objects ------------------------------------------------------------------------

Rule = dict[str, Any]


def record(name: str, expr: str, labels: dict[str, str] | None = None) -> Rule:
    rule: Rule = {"record": name, "expr": expr}
    if labels:
        rule["labels"] = labels
    return rule


@dataclass(frozen=True)
class Alert:
    """One alerting rule. Several rules may share a name (one per threshold or window)."""

    name: str
    expr: str
    severity: str
    summary: str
    description: str
    for_: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    def rule(self, runbook_base_url: str) -> Rule:
        assert self.severity in SEVERITIES, self.severity
        assert self.summary.endswith("."), f"{self.name}: a summary is a sentence"
        rule: Rule = {"alert": self.name, "expr": self.expr}
        if self.for_:
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity, **self.labels}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": runbook_url(runbook_base_url, self.name),
        }
        return rule


def runbook_url(base: str, alert: str) -> str:
    # GitHub renders "## LLMProbeTTFTHigh" with the anchor #llmprobettfthigh.
    return f"{base}#{alert.lower()}"


def group(name: str, rules: Sequence[Rule]) -> dict[str, Any]:
    return {"name": name, "rules": list(rules)}


# --- recording rules ---------------------------------------------------------------------


def probe_recording() -> list[Rule]:
    rules = [
        record(quantile(PROBE, family, q), hist_quantile(q, PROBE, family))
        for family in (metrics.PROBE_TTFT, metrics.PROBE_TPOT, metrics.PROBE_E2E)
        for q in QUANTILES
    ]
    rules.append(
        record(quantile(PROBE, metrics.PROBE_STALL, 0.95),
               hist_quantile(0.95, PROBE, metrics.PROBE_STALL))
    )
    requests = metrics.PROBE_REQUESTS.name
    ok = f'{requests}{{outcome="{Outcome.OK.value}"}}'
    rules.append(record(SUCCESS_RATIO, f"{rate_sum(PROBE, ok)}\n/\n{rate_sum(PROBE, requests)}"))
    # Counters, not le buckets: a bucket bound at the SLO would have to match the exposed
    # le string exactly ("1" vs "1.0"), and the probe already judged each request.
    rules.extend(
        record(
            goodput(window),
            f"{rate_sum(PROBE, metrics.PROBE_SLO_GOOD.name, window)}\n/\n"
            f"{rate_sum(PROBE, requests, window)}",
        )
        for window in GOODPUT_WINDOWS
    )
    return rules


def engine_recording() -> list[Rule]:
    rules = [
        record(quantile(MODEL, family, q), hist_quantile(q, MODEL, family))
        for family in (metrics.ENGINE_TTFT, metrics.ENGINE_ITL)
        for q in QUANTILES
    ]
    e2e = rate_sum(MODEL, f"{metrics.ENGINE_E2E.name}_sum")
    triton_total = rate_sum(MODEL, metrics.ENGINE_REQUEST_DURATION.name)
    # Triton has cumulative duration counters instead of histograms: the same share.
    triton = {
        metrics.ENGINE_QUEUE_TIME: rate_sum(MODEL, metrics.ENGINE_QUEUE_DURATION.name),
    }
    for family in (metrics.ENGINE_QUEUE_TIME, metrics.ENGINE_PREFILL_TIME,
                   metrics.ENGINE_DECODE_TIME):
        expr = ratio(rate_sum(MODEL, f"{family.name}_sum"), e2e)
        if family in triton:
            expr = f"{paren(expr)}\nor\n{paren(ratio(triton[family], triton_total))}"
        rules.append(record(share(family), expr))
    prefill = rate_sum(MODEL, f"{metrics.ENGINE_PREFILL_TIME.name}_sum")
    decode = rate_sum(MODEL, f"{metrics.ENGINE_DECODE_TIME.name}_sum")
    compute = rate_sum(MODEL, metrics.ENGINE_COMPUTE_DURATION.name)
    rules.append(
        record(
            INFERENCE_SHARE,
            f"{paren(ratio(paren(prefill, '+', decode), e2e))}\n"
            f"or\n{paren(ratio(compute, triton_total))}",
        )
    )
    return rules


def path_recording(config: Config) -> list[Rule]:
    rules = [
        record(LOSS, loss(rate_sum(PATH, metrics.PATH_PACKETS_RECEIVED.name),
                          rate_sum(PATH, metrics.PATH_PACKETS_SENT.name)))
    ]
    rules.extend(
        record(quantile(PATH, metrics.PATH_RTT, q), hist_quantile(q, PATH, metrics.PATH_RTT))
        for q in QUANTILES
    )
    info = metrics.PATH_ROUTE_INFO.name
    # Rank 1 is the best class; classes outside the list (unknown) get no rank, so a trace
    # that saw no hop neither raises nor clears the alert.
    ranked = "\nor\n".join(
        f'({info}{{route_class="{cls}"}} * {rank})'
        for rank, cls in enumerate(config.alerting.route_class_order, start=1)
    )
    rules.append(record(ROUTE_RANK, f"max by ({ROUTE.by}) {paren(ranked)}"))
    return rules


def peak_recording(config: Config) -> list[Rule]:
    """Per peak window: P95s and loss while the window is on; off-peak: the same while no
    window is on, plus gated bucket rates whose sum over the baseline window gives a true
    off-peak P95 (an average of P95s is not a P95)."""
    windows = config.peak_windows.windows
    if not windows:
        return []
    span = prom_duration(config.alerting.baseline_window)
    rules: list[Rule] = []
    for level, family in PEAK_HISTOGRAMS:
        for name in windows:
            rules.append(
                record(quantile(level, family, 0.95, "_peak"),
                       f"{hist_quantile(0.95, level, family)}\n{peak_gate(name)}",
                       {"window": name})
            )
        buckets = offpeak_buckets(level, family)
        rules.append(
            record(buckets,
                   f"sum by (le, {level.by}) (rate({family.name}_bucket[{RATE}]))\n"
                   f"{offpeak_gate()}")
        )
        rules.append(
            record(quantile(level, family, 0.95, "_offpeak"),
                   f"histogram_quantile(0.95, {buckets})")
        )
        # Each rate sample stands for one evaluation interval of observations, so their sum
        # over the span is proportional to the counts: the quantile of the whole span.
        rules.append(
            record(baseline(level, family),
                   f"histogram_quantile(0.95, sum by (le, {level.by}) "
                   f"(sum_over_time({buckets}[{span}])))")
        )
    sent, received = metrics.PATH_PACKETS_SENT, metrics.PATH_PACKETS_RECEIVED
    # Not from LOSS: a series recorded by another group is seen one evaluation late.
    path_loss = loss(rate_sum(PATH, received.name), rate_sum(PATH, sent.name))
    for name in windows:
        rules.append(record(LOSS_PEAK, f"{path_loss}\n{peak_gate(name)}", {"window": name}))
    for family in (sent, received):
        rules.append(
            record(offpeak_rate(family), f"{rate_sum(PATH, family.name)}\n{offpeak_gate()}")
        )
    rules.append(
        record(LOSS_OFFPEAK, loss(offpeak_rate(received), offpeak_rate(sent)))
    )
    rules.append(
        record(
            LOSS_BASELINE,
            loss(f"sum_over_time({offpeak_rate(received)}[{span}])",
                 f"sum_over_time({offpeak_rate(sent)}[{span}])"),
        )
    )
    return rules


def recording_groups(config: Config) -> list[dict[str, Any]]:
    groups = [
        group("llm-probe.rules", probe_recording()),
        group("llm-engine.rules", engine_recording()),
        group("llm-path.rules", path_recording(config)),
    ]
    peak = peak_recording(config)
    if peak:
        groups.append(group("llm-peak.rules", peak))
    return groups


# --- alerts ------------------------------------------------------------------------------


def probe_thresholds(config: Config, key: str) -> list[tuple[float, str]]:
    """(threshold, probe matcher) per distinct SLO: overriding probes first, then the rest."""
    default: float = getattr(config.slo, key)
    overrides: dict[float, list[str]] = {}
    for probe in config.probes:
        value = getattr(probe.slo, key)
        if value is not None and value != default:
            overrides.setdefault(value, []).append(probe.name)
    out = [(value, f'{{probe=~"{alternation(names)}"}}') for value, names in overrides.items()]
    others = [name for names in overrides.values() for name in names]
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


def probe_alerts(config: Config) -> list[Alert]:
    alerts: list[Alert] = []
    for alert, family, key, what in (
        ("LLMProbeTTFTHigh", metrics.PROBE_TTFT, "ttft_p95_seconds", "time to first token"),
        ("LLMProbeTPOTHigh", metrics.PROBE_TPOT, "tpot_p95_seconds", "time per output token"),
    ):
        for threshold, matcher in probe_thresholds(config, key):
            alerts.append(
                Alert(
                    alert,
                    f"{quantile(PROBE, family, 0.95)}{matcher} > {num(threshold)}",
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
            f"1 - {SUCCESS_RATIO} > {num(failure)}",
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
            f"{quantile(PROBE, metrics.PROBE_STALL, 0.95)} > {num(stall)}",
            "warning",
            "Streams pause for long between tokens.",
            f"{PROBE_TEXT}: the P95 of each request's longest gap between tokens is "
            f"{VALUE_SECONDS} over {RATE} (threshold {human_seconds(stall)}).",
            "10m",
        )
    )
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


def stale_after(config: Config) -> float:
    """Three intervals of the slowest probe, and never under 5 minutes."""
    return max([300.0, *(3 * p.interval for p in config.probes)])


def slo_alerts(config: Config) -> list[Alert]:
    objective = config.slo.objective
    budget = 1 - objective
    alerts = []
    for long, short, factor, for_, severity in BURN_WINDOWS:
        limit = num(factor * budget)
        alerts.append(
            Alert(
                "LLMProbeErrorBudgetBurn",
                f"1 - {goodput(long)} > {limit}\nand\n1 - {goodput(short)} > {limit}",
                severity,
                "Probe goodput is burning the error budget too fast.",
                f"{PROBE_TEXT}: {VALUE_PERCENT} of requests missed the SLO over {long} "
                f"(and over {short}), {factor:g}x the {pct(budget)} budget of the "
                f"{pct(objective)} objective (threshold {pct(factor * budget)}).",
                for_,
                {"long": long, "short": short},
            )
        )
    return alerts


def engine_alerts(config: Config) -> list[Alert]:
    up = metrics.ENGINE_UP.name
    # engine_target is the label probes carry for the engine they hit (see metrics.py), so
    # Alertmanager can mute those probes' failures while the engine is down.
    alerts = [
        Alert(
            "LLMEngineDown",
            f'label_replace({up} == 0, "engine_target", "$1", "target", "(.*)")',
            "critical",
            "An inference engine's metrics endpoint is down.",
            f"Engine {lbl('target')} on {lbl('instance')} has not answered its metrics scrape "
            f"for 2m; {metrics.ENGINE_SCRAPE_ERRORS.name} says why.",
            "2m",
        )
    ]
    for engine in config.engines:
        alerts.append(
            Alert(
                "LLMEngineDown",
                f'absent({up}{{target="{engine.name}"}})',
                "critical",
                "An inference engine's metrics endpoint is down.",
                f"Engine {engine.name} has no {up} series: the exporter is down, not "
                "scraped, or runs a config without this engine.",
                "10m",
                {"engine_target": engine.name},
            )
        )
    a = config.alerting
    slo = config.slo
    ttft_p95 = quantile(MODEL, metrics.ENGINE_TTFT, 0.95)
    itl_p95 = quantile(MODEL, metrics.ENGINE_ITL, 0.95)
    kv = metrics.ENGINE_KV_CACHE_USAGE.name
    alerts += [
        Alert(
            "LLMEngineCapacityBound",
            f"{share(metrics.ENGINE_QUEUE_TIME)} > {num(a.queue_share_ratio)}",
            "warning",
            "Requests wait in the engine queue: the engine is capacity-bound.",
            f"{MODEL_TEXT} spends {VALUE_PERCENT} of request time queued before "
            f"prefill over {RATE} (threshold {pct(a.queue_share_ratio)}).",
            "10m",
        ),
        Alert(
            "LLMEngineComputeBound",
            f"{INFERENCE_SHARE} > {num(1 - a.queue_share_ratio)}\nand on ({MODEL.by})\n"
            + paren(f"{ttft_p95} > {num(slo.ttft_p95_seconds)}", "or",
                    f"{itl_p95} > {num(slo.tpot_p95_seconds)}"),
            "warning",
            "Engine latency is over the SLO with little queueing: the engine is "
            "compute-bound.",
            f"{MODEL_TEXT} spends {VALUE_PERCENT} of request time in prefill and decode "
            f"(threshold {pct(1 - a.queue_share_ratio)}) while its P95 TTFT is over "
            f"{human_seconds(slo.ttft_p95_seconds)} or its P95 inter-token latency over "
            f"{human_seconds(slo.tpot_p95_seconds)}.",
            "10m",
        ),
        Alert(
            "LLMEngineKVCacheSaturated",
            f"max by ({MODEL.by}) ({kv}) > {num(a.kv_cache_usage_ratio)}\n"
            f"and on ({MODEL.by})\n"
            f"{rate_sum(MODEL, metrics.ENGINE_PREEMPTIONS.name)} > 0",
            "warning",
            "The engine's KV cache is full and requests are being preempted.",
            f"{MODEL_TEXT} KV cache is {VALUE_PERCENT} full (threshold "
            f"{pct(a.kv_cache_usage_ratio)}) and the scheduler is preempting requests.",
            "5m",
        ),
    ]
    return alerts


def path_alerts(config: Config) -> list[Alert]:
    slo = config.slo
    jitter = metrics.PATH_JITTER.name
    info = metrics.PATH_ROUTE_INFO.name
    return [
        Alert(
            "LLMPathPacketLoss",
            f"{LOSS} > {num(slo.loss_ratio)}",
            "warning",
            "Packet loss on a carrier path is over the SLO.",
            f"{PATH_TEXT} lost {VALUE_PERCENT} of probe packets over {RATE} (threshold "
            f"{pct(slo.loss_ratio)}).",
            "10m",
        ),
        Alert(
            "LLMPathJitterHigh",
            f'avg by ({PATH.by}) (avg_over_time({jitter}{{method="{JITTER_METHOD}"}}[{RATE}]))'
            f" > {num(slo.jitter_seconds)}",
            "warning",
            "Jitter on a carrier path is over the SLO.",
            f"{PATH_TEXT} RFC 3550 jitter averaged {VALUE_SECONDS} over {RATE} (threshold "
            f"{human_seconds(slo.jitter_seconds)}).",
            "10m",
        ),
        Alert(
            "LLMPathRouteDegraded",
            paren(ROUTE_RANK, ">", f"min_over_time({ROUTE_RANK}[{ROUTE_LOOKBACK}])")
            + f"\n* on ({ROUTE.by}) group_left (route_class)\n{info}",
            "warning",
            "A carrier path moved to a worse route class.",
            f"Carrier {lbl('carrier')} path to {lbl('target')} now takes route class "
            f"{lbl('route_class')} (rank {VALUE_NUMBER} in alerting.route_class_order), "
            f"worse than a class it took within {ROUTE_LOOKBACK}.",
        ),
    ]


def peak_alerts(config: Config) -> list[Alert]:
    pw, a = config.peak_windows, config.alerting
    span = prom_duration(a.baseline_window)
    ttft_peak = quantile(PROBE, metrics.PROBE_TTFT, 0.95, "_peak")
    alerts = []
    for name, window in pw.windows.items():
        when = window_text(name, window, pw.timezone)
        alerts.append(
            Alert(
                "LLMProbeTTFTPeakDrift",
                f'{ttft_peak}{{window="{name}"}}\n/ on ({PROBE.by})\n'
                f"{baseline(PROBE, metrics.PROBE_TTFT)}\n> {num(a.peak_drift_ratio)}",
                "warning",
                "Peak-hour P95 TTFT drifted above the off-peak baseline.",
                f"{PROBE_TEXT} P95 TTFT in the {when} is {VALUE_TIMES} its off-peak P95 "
                f"over the last {span} (threshold {a.peak_drift_ratio:g}x).",
                "15m",
                {"window": name},
            )
        )
        peak_loss = f'{LOSS_PEAK}{{window="{name}"}}'
        alerts.append(
            Alert(
                "LLMPathLossPeakDrift",
                f"{peak_loss}\n> on ({PATH.by})\n"
                f"({num(a.peak_drift_ratio)} * {LOSS_BASELINE})\n"
                f"and on ({PATH.by})\n{peak_loss} > {num(a.peak_drift_min_loss_ratio)}",
                "warning",
                "Peak-hour packet loss drifted above the off-peak baseline.",
                f"{PATH_TEXT} lost {VALUE_PERCENT} of packets in the {when}, more than its "
                f"off-peak loss over the last {span} allows (threshold "
                f"{a.peak_drift_ratio:g}x that, and at least {pct(a.peak_drift_min_loss_ratio)}).",
                "15m",
                {"window": name},
            )
        )
    return alerts


def gpu_alerts(config: Config) -> list[Alert]:
    ratio = config.alerting.gpu_memory_ratio
    events = metrics.GPU_CLOCK_EVENT.name
    xid = metrics.GPU_XID_ERRORS.name
    return [
        Alert(
            "LLMGPUMemoryNearFull",
            f"{metrics.GPU_MEMORY_USED.name} / {metrics.GPU_MEMORY_TOTAL.name} > {num(ratio)}",
            "warning",
            "GPU memory is nearly full.",
            f"{GPU_TEXT} has {VALUE_PERCENT} of its memory in use (threshold {pct(ratio)}).",
            "10m",
        ),
        Alert(
            "LLMGPUThrottled",
            f'avg_over_time({events}{{reason=~"{alternation(THROTTLE_REASONS)}"}}[10m])'
            f" > {num(THROTTLE_SHARE)}",
            "warning",
            "A GPU's clocks are held down by a slowdown or thermal event.",
            f"{GPU_TEXT} clocks were held down by {lbl('reason')} {VALUE_PERCENT} of the "
            f"last 10m (threshold {pct(THROTTLE_SHARE)}).",
            "5m",
        ),
        Alert(
            "LLMGPUXidError",
            # A series appears with its first XID at 1, which increase() cannot see (no
            # earlier sample): a series that did not exist 10m ago counts as new errors.
            f"increase({xid}[10m]) > 0\nor\n({xid} unless {xid} offset 10m)",
            "critical",
            "A GPU reported an XID error.",
            f"{GPU_TEXT} reported XID {lbl('xid')} ({VALUE_NUMBER} in the last 10m).",
        ),
    ]


def exporter_alerts() -> list[Alert]:
    runs = metrics.EXPORTER_CHECK_RUNS.name
    by = ", ".join((*SCRAPE, "check"))
    skip = f'check!~"({"|".join(CHECK_KINDS_ALERTED_ELSEWHERE)})/.*"'
    failed = f'sum by ({by}) (increase({runs}{{outcome!="success", {skip}}}[15m])) > 0'
    succeeded = f'sum by ({by}) (increase({runs}{{outcome="success"}}[15m])) > 0'
    # path/<carrier>/<target> and route/<carrier>/<target> get their carrier as a label, so
    # a loss alert on that carrier (the cause) mutes this one in Alertmanager.
    return [
        Alert(
            "LLMExporterCheckFailing",
            "label_replace"
            + paren(f"{failed}\nunless on ({by})\n{succeeded},",
                    '"carrier", "$1", "check", "(?:path|route)/([^/]+)/.*"'),
            "warning",
            "An exporter check has not succeeded for 15 minutes.",
            f"Check {lbl('check')} on {lbl('instance')} failed {VALUE_NUMBER} runs in the "
            "last 15m without one success; its log lines name the error.",
            "5m",
        )
    ]


def alert_groups(config: Config) -> list[dict[str, Any]]:
    base = config.alerting.runbook_base_url
    sections = [
        ("llm-probe.alerts", probe_alerts(config)),
        ("llm-slo.alerts", slo_alerts(config)),
        ("llm-engine.alerts", engine_alerts(config)),
        ("llm-path.alerts", path_alerts(config)),
        ("llm-peak.alerts", peak_alerts(config)),
        ("llm-gpu.alerts", gpu_alerts(config)),
        ("llm-exporter.alerts", exporter_alerts()),
    ]
    return [group(name, [a.rule(base) for a in alerts]) for name, alerts in sections if alerts]


def alert_names(config: Config) -> list[str]:
    return list(
        dict.fromkeys(r["alert"] for g in alert_groups(config) for r in g["rules"])
    )


# --- Alertmanager ------------------------------------------------------------------------

#: Cause -> symptoms it mutes, and the label both must share. Loss on a carrier explains
#: slow first tokens of probes crossing it (and its path checks failing); a down engine
#: explains failures of probes served by it.
INHIBITIONS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("LLMPathPacketLoss",
     ("LLMProbeTTFTHigh", "LLMProbeTTFTPeakDrift", "LLMExporterCheckFailing"), "carrier"),
    ("LLMEngineDown",
     ("LLMProbeFailureRatioHigh", "LLMProbeErrorBudgetBurn", "LLMProbeAbsent"), "engine_target"),
)
QUIET_HOURS = "quiet-hours"
RECEIVERS = {"critical": "pager", "warning": "tickets", "info": "blackhole"}
DEFAULT_RECEIVER = "default"
#: Placeholders to replace: .invalid never resolves, so nothing is sent until someone does.
WEBHOOK = "https://alerts.example.invalid/llm-latency/{}"
#: Tickets also go by mail: an example of the second common receiver kind.
EMAIL = {
    "to": "llm-oncall@example.invalid",
    "from": "alertmanager@example.invalid",
    "smarthost": "smtp.example.invalid:587",
    "send_resolved": True,
}


def alertmanager_config(config: Config) -> dict[str, Any]:
    routes: list[dict[str, Any]] = []
    for severity, receiver in RECEIVERS.items():
        route: dict[str, Any] = {"receiver": receiver, "matchers": [f'severity="{severity}"']}
        if severity == "critical":
            # A page that is resolved, or joined by a new alert, is news within a minute.
            route["group_interval"] = "1m"
            route["repeat_interval"] = "1h"
        if severity == "warning" and config.alerting.quiet_hours is not None:
            route["mute_time_intervals"] = [QUIET_HOURS]
        routes.append(route)
    am: dict[str, Any] = {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": DEFAULT_RECEIVER,
            "group_by": ["alertname", "carrier"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": routes,
        },
        "inhibit_rules": [
            {
                "source_matchers": [f'alertname="{source}"'],
                "target_matchers": [f'alertname=~"{"|".join(targets)}"'],
                "equal": [label],
            }
            for source, targets, label in INHIBITIONS
        ],
    }
    quiet = config.alerting.quiet_hours
    if quiet is not None:
        am["time_intervals"] = [
            {
                "name": QUIET_HOURS,
                "time_intervals": [
                    {"times": _time_ranges(quiet), "location": config.peak_windows.timezone}
                ],
            }
        ]
    am["receivers"] = [
        {"name": name, "webhook_configs": [{"url": WEBHOOK.format(name), "send_resolved": True}]}
        for name in (DEFAULT_RECEIVER, *RECEIVERS.values())
        if name != RECEIVERS["info"]
    ] + [{"name": RECEIVERS["info"]}]  # no configs: info alerts are for dashboards only
    for receiver in am["receivers"]:
        if receiver["name"] == RECEIVERS["warning"]:
            receiver["email_configs"] = [dict(EMAIL)]
    return am


def _time_ranges(window: PeakWindow) -> list[dict[str, str]]:
    """Alertmanager ranges cannot cross midnight: 22:00-06:00 is two ranges."""
    start, end = f"{window.start:%H:%M}", f"{window.end:%H:%M}"
    if window.start < window.end:
        return [{"start_time": start, "end_time": end}]
    ranges = [{"start_time": start, "end_time": "24:00"}]
    if end != "00:00":
        ranges.append({"start_time": "00:00", "end_time": end})
    return ranges


# --- YAML --------------------------------------------------------------------------------

HEADER = (
    "# Generated by `llm-latency-exporter generate` from the config's slo, alerting and\n"
    "# peak_windows sections. Edit the config (or exporter/monitoring/) and regenerate.\n"
)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    if re.fullmatch(r"\d{1,2}:\d{2}", value):
        style = '"'  # a YAML 1.1 reader may take an unquoted 08:00 for a number
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(data: Any, header: str = HEADER) -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)
    return header + body


def render(config: Config) -> dict[str, str]:
    """Relative path -> text of every rules and Alertmanager file."""
    return {
        f"rules/{RECORDING_FILE}": dump_yaml({"groups": recording_groups(config)}),
        f"rules/{ALERTS_FILE}": dump_yaml({"groups": alert_groups(config)}),
        "alertmanager.yaml": dump_yaml(alertmanager_config(config)),
    }
