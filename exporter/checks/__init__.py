"""The check registry: config section name -> factory (node_exporter's factory map).

A new check is one module in this package plus one line in FACTORIES.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporter.checks.base import Check, Factory
from exporter.checks.engine import check as engine
from exporter.checks.gpu import check as gpu
from exporter.checks.path import check as path
from exporter.checks.probe import check as probe
from exporter.config.models import Config

FACTORIES: dict[str, Factory] = {}
FACTORIES["engines"] = engine.build
FACTORIES["probes"] = probe.build
FACTORIES["gpu"] = gpu.build
FACTORIES["paths"] = path.build


def build_checks(config: Config, registry: CollectorRegistry) -> list[Check]:
    checks: list[Check] = []
    for factory in FACTORIES.values():
        checks.extend(factory(config, registry))
    return checks


__all__ = ["FACTORIES", "Check", "build_checks"]
