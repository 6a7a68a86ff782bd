"""Grafana dashboards, built with grafana-foundation-sdk from one Config: one module per
dashboard on the panel kit in :mod:`.kit`.

Metric names come from :mod:`exporter.metrics`, recorded names from
:mod:`exporter.metrics.names`; SLO lines, drift windows and route-class names come from
the config.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from exporter.config.models import Config
from exporter.monitoring.dashboards.day_evening import day_evening
from exporter.monitoring.dashboards.engine import engine
from exporter.monitoring.dashboards.gpu import gpu
from exporter.monitoring.dashboards.overview import overview
from exporter.monitoring.dashboards.paths import paths

#: File stem (``llm-<name>.json``) -> builder.
DASHBOARDS: dict[str, Callable[[Config], db.Dashboard]] = {
    "overview": overview,
    "engine": engine,
    "gpu": gpu,
    "paths": paths,
    "day-evening": day_evening,
}


def to_json(dashboard: db.Dashboard) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True, indent=2).encode(
        dashboard.build()))
    return data


def render(config: Config) -> dict[str, str]:
    """Relative path -> JSON text of every dashboard."""
    return {
        f"llm-{name}.json": json.dumps(to_json(build(config)), indent=2, sort_keys=True) + "\n"
        for name, build in DASHBOARDS.items()
    }
