"""Error-budget burn: multiwindow multi-burn-rate alerts on probe goodput, one rule per
pair of ``alerting.burn_windows``."""

from __future__ import annotations

from exporter.config.models import Config
from exporter.monitoring import names
from exporter.monitoring.promql import PROBE_TEXT, VALUE_PERCENT, num, pct, prom_duration
from exporter.monitoring.rule import Alert


def slo_alerts(config: Config) -> list[Alert]:
    objective = config.slo.objective
    budget = 1 - objective
    alerts = []
    for window in config.alerting.burn_windows:
        long, short = prom_duration(window.long), prom_duration(window.short)
        limit = num(window.factor * budget)
        alerts.append(
            Alert(
                "LLMProbeErrorBudgetBurn",
                f"1 - {names.probe_goodput(long)} > {limit}\n"
                f"and\n1 - {names.probe_goodput(short)} > {limit}",
                window.severity,
                "Probe goodput is burning the error budget too fast.",
                f"{PROBE_TEXT}: {VALUE_PERCENT} of requests missed the SLO over {long} "
                f"(and over {short}), {window.factor:g}x the {pct(budget)} budget of the "
                f"{pct(objective)} objective (threshold {pct(window.factor * budget)}).",
                prom_duration(window.hold),
                {"long": long, "short": short},
            )
        )
    return alerts
