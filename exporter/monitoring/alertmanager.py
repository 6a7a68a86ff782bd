"""The Alertmanager template: routes by severity, inhibitions, quiet hours, placeholder
receivers. Receiver names come from ``alerting.receivers``."""

from __future__ import annotations

from typing import Any

from exporter.config.models import Config
from exporter.config.values import PeakWindow

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
    a = config.alerting
    receivers = a.receivers
    routes: list[dict[str, Any]] = []
    for severity, receiver in receivers.model_dump().items():
        route: dict[str, Any] = {"receiver": receiver, "matchers": [f'severity="{severity}"']}
        if severity == "critical":
            # A page that is resolved, or joined by a new alert, is news within a minute.
            route["group_interval"] = "1m"
            route["repeat_interval"] = "1h"
        if severity == "warning" and a.quiet_hours is not None:
            route["mute_time_intervals"] = [QUIET_HOURS]
        routes.append(route)
    am: dict[str, Any] = {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": a.default_receiver,
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
    if a.quiet_hours is not None:
        am["time_intervals"] = [
            {
                "name": QUIET_HOURS,
                "time_intervals": [
                    {"times": _time_ranges(a.quiet_hours), "location": config.peak_windows.timezone}
                ],
            }
        ]
    am["receivers"] = [
        {"name": name, "webhook_configs": [{"url": WEBHOOK.format(name), "send_resolved": True}]}
        for name in (a.default_receiver, receivers.critical, receivers.warning)
    ] + [{"name": receivers.info}]  # no configs: info alerts are for dashboards only
    for receiver in am["receivers"]:
        if receiver["name"] == receivers.warning:
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
