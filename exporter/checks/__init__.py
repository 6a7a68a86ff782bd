"""The check registry: config section name -> factory (node_exporter's factory map).

Every package here is a check whose ``check`` module declares itself with one
``REGISTRATION = Registration(section, build)`` (``base.py``): the ``Config`` field it reads
and the factory that builds its checks. The registry finds them, so a new check is a new
package and nothing in this file changes. The declaration is one typed object rather than
loose module attributes, so a package that forgets or misspells it fails at import, named,
instead of handing the registry an untyped value. Checks run in the order of their sections
among ``Config``'s fields, not in the order the packages happen to be listed on disk.
"""

from __future__ import annotations

import importlib
import pkgutil

from exporter.checks.base import Check, Factory, Registration
from exporter.config.models import Config


def _discover() -> dict[str, Factory]:
    found: dict[str, Factory] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.ispkg:
            module = importlib.import_module(f"{__name__}.{info.name}.check")
            declared = getattr(module, "REGISTRATION", None)
            assert isinstance(declared, Registration), (
                f"{info.name}: its check module declares no REGISTRATION = Registration(...)"
            )
            section = declared.section
            assert section in Config.model_fields, f"{info.name}: no config section {section}"
            assert section not in found, f"{info.name}: section {section} registered twice"
            found[section] = declared.build
    order = list(Config.model_fields)
    return dict(sorted(found.items(), key=lambda item: order.index(item[0])))


FACTORIES: dict[str, Factory] = _discover()


def build_checks(config: Config) -> list[Check]:
    checks: list[Check] = []
    for factory in FACTORIES.values():
        checks.extend(factory(config))
    return checks


__all__ = ["FACTORIES", "Check", "Registration", "build_checks"]
