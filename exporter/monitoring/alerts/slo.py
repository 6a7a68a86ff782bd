"""Error-budget burn: multiwindow multi-burn-rate alerts on probe goodput, one rule per
pair of ``alerting.burn_windows``."""

from __future__ import annotations

import math

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import names
from exporter.metrics.names import PROBE, prom_duration
from exporter.monitoring.promql import PROBE_TEXT, VALUE_PERCENT, num, pct
from exporter.monitoring.rule import Alert


def slo_alerts(config: Config) -> list[Alert]:
    objective = config.slo.objective
    budget = 1 - objective
    alerts = []
    for window in config.alerting.burn_windows:
        long, short = prom_duration(window.long), prom_duration(window.short)
        limit = num(window.factor * budget)
        # One request alone never burns the budget: the long window must hold enough that
        # a single bad one stays under the line (a fresh exporter's first dozen requests,
        # a probe that times out: the SRE workbook's low-traffic case).
        least = math.ceil(1 / (window.factor * budget))
        requests = metrics.PROBE_REQUESTS.name
        alerts.append(
            Alert(
                "LLMProbeErrorBudgetBurn",
                f"1 - {names.probe_goodput(long)} > {limit}\n"
                f"and\n1 - {names.probe_goodput(short)} > {limit}\n"
                f"and\nsum by ({PROBE.by}) (increase({requests}[{long}])) >= {least}",
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
