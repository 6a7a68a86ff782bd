"""Exporter alerts: a check that keeps failing, where no other alert covers it."""

from __future__ import annotations

from exporter import metrics
from exporter.metrics.names import SOURCE
from exporter.monitoring.promql import VALUE_NUMBER, lbl, paren
from exporter.monitoring.rule import Alert

#: Checks whose failures already have their own alert (LLMProbeFailureRatioHigh,
#: LLMEngineDown); LLMExporterCheckFailing covers the others.
CHECK_KINDS_ALERTED_ELSEWHERE = ("probe", "engine")


def exporter_alerts() -> list[Alert]:
    runs = metrics.EXPORTER_CHECK_RUNS.name
    by = ", ".join((*SOURCE, "check"))
    skip = f'check!~"({"|".join(CHECK_KINDS_ALERTED_ELSEWHERE)})/.*"'
    # Any outcome but success counts: a run skipped because the last one still hangs is no
    # better than an error.
    ok = metrics.CHECK_SUCCESS
    failed = f'sum by ({by}) (increase({runs}{{outcome!="{ok}", {skip}}}[15m])) > 0'
    succeeded = f'sum by ({by}) (increase({runs}{{outcome="{ok}"}}[15m])) > 0'
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
