"""The check registry: config section name -> factory (node_exporter's factory map).

Every package here whose ``check`` module defines ``SECTION`` (the config key it reads) and
``build`` (its Factory) is a check. The registry finds them, so a new check is a new package
and nothing in this file changes; checks run in the order of their sections in ``Config``.
"""

from __future__ import annotations

import importlib
import pkgutil

from exporter.checks.base import Check, Factory
from exporter.config.models import Config


def _discover() -> dict[str, Factory]:
    found: dict[str, Factory] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            module = importlib.import_module(f"{__name__}.{info.name}.check")
            section: str = module.SECTION
            assert section in Config.model_fields, f"{info.name}: no config section {section}"
            found[section] = module.build
    order = list(Config.model_fields)
    return dict(sorted(found.items(), key=lambda item: order.index(item[0])))


FACTORIES: dict[str, Factory] = _discover()


def build_checks(config: Config) -> list[Check]:
    checks: list[Check] = []
    for factory in FACTORIES.values():
        checks.extend(factory(config))
    return checks


__all__ = ["FACTORIES", "Check", "build_checks"]
