"""The metric schema: every family the exporter serves, defined once, one module per section.

Checks, rule and dashboard generators and docs/metrics.md all read names from here
(``metrics.PROBE_TTFT``), so a name is never typed twice. Conventions (design.md): namespace
``llm_``, base units, counters end in ``_total``, absent-not-zero for anything a source does
not provide. A new family goes in its section's module.

The imports below are in the order ``SCHEMA`` lists the families, which is the order
/metrics and docs/metrics.md show them in: not alphabetical.
"""
# ruff: noqa: I001

from exporter.metrics.schema import *  # noqa: F403
from exporter.metrics.exporter import *  # noqa: F403
from exporter.metrics.gpu import *  # noqa: F403
from exporter.metrics.probe import *  # noqa: F403
from exporter.metrics.engine import *  # noqa: F403
from exporter.metrics.path import *  # noqa: F403
from exporter.metrics.clients import *  # noqa: F403
from exporter.metrics.host import *  # noqa: F403
from exporter.metrics.diagnosis import *  # noqa: F403
