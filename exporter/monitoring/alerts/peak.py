"""Peak-hour drift: in each peak window, probe TTFT and path loss against their off-peak
baseline over ``alerting.baseline_window``."""

from __future__ import annotations

from exporter.config.models import Config
from exporter.metrics import names
from exporter.metrics.names import PATH, PROBE, prom_duration
from exporter.monitoring.promql import (
    PATH_TEXT,
    PROBE_TEXT,
    VALUE_PERCENT,
    VALUE_TIMES,
    num,
    pct,
    window_text,
)
from exporter.monitoring.rule import Alert


def peak_alerts(config: Config) -> list[Alert]:
    pw, a = config.peak_windows, config.alerting
    span = prom_duration(a.baseline_window)
    ttft = names.PROBE_TTFT_PEAK
    alerts = []
    for name, window in pw.windows.items():
        when = window_text(name, window, pw.timezone)
        alerts.append(
            Alert(
                "LLMProbeTTFTPeakDrift",
                f'{ttft.peak}{{window="{name}"}}\n/ on ({PROBE.by})\n'
                f"{ttft.baseline}\n> {num(a.peak_drift_ratio)}",
                "warning",
                "Peak-hour P95 TTFT drifted above the off-peak baseline.",
                f"{PROBE_TEXT} P95 TTFT in the {when} is {VALUE_TIMES} its off-peak P95 "
                f"over the last {span} (threshold {a.peak_drift_ratio:g}x).",
                "15m",
                {"window": name},
            )
        )
        peak_loss = f'{names.PATH_LOSS_PEAK}{{window="{name}"}}'
        alerts.append(
            Alert(
                "LLMPathLossPeakDrift",
                f"{peak_loss}\n> on ({PATH.by})\n"
                f"({num(a.peak_drift_ratio)} * {names.PATH_LOSS_BASELINE})\n"
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
