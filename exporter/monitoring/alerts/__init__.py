"""Alerting rules, one module per domain; each group is one file's alerts."""

from __future__ import annotations

from typing import Any

from exporter.config.models import Config
from exporter.monitoring.alerts.clients import clients_alerts
from exporter.monitoring.alerts.diagnosis import diagnosis_alerts
from exporter.monitoring.alerts.engine import engine_alerts
from exporter.monitoring.alerts.exporter import exporter_alerts
from exporter.monitoring.alerts.gpu import gpu_alerts
from exporter.monitoring.alerts.host import host_alerts
from exporter.monitoring.alerts.path import path_alerts
from exporter.monitoring.alerts.peak import peak_alerts
from exporter.monitoring.alerts.probe import probe_alerts
from exporter.monitoring.alerts.slo import slo_alerts
from exporter.monitoring.rule import group


def alert_groups(config: Config) -> list[dict[str, Any]]:
    """The alert groups in the order alerts.yaml lists them; a group without alerts is left
    out."""
    base = config.alerting.runbook_base_url
    sections = [
        ("llm-probe.alerts", probe_alerts(config)),
        ("llm-slo.alerts", slo_alerts(config)),
        ("llm-engine.alerts", engine_alerts(config)),
        ("llm-path.alerts", path_alerts(config)),
        ("llm-clients.alerts", clients_alerts(config)),
        ("llm-peak.alerts", peak_alerts(config)),
        ("llm-gpu.alerts", gpu_alerts(config)),
        ("llm-host.alerts", host_alerts(config)),
        ("llm-exporter.alerts", exporter_alerts()),
        ("llm-diagnosis.alerts", diagnosis_alerts()),
    ]
    return [group(name, [a.rule(base) for a in alerts]) for name, alerts in sections if alerts]
