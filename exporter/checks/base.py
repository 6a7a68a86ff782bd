"""What every check is: a named thing the scheduler runs on an interval.

A check's ``run()`` updates its own metrics, returns nothing, and raises on failure; the
scheduler records outcome and duration (node_exporter's ``Update`` contract). Anything that
blocks runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from exporter.config.models import Config
from exporter.metrics import Family

#: One series a check owns: its family in the schema, the prometheus_client object of that
#: family, and the series' label values.
Series = tuple[Family, MetricWrapperBase, tuple[str, ...]]


class RunSkipped(Exception):
    """Raised by a run that measured nothing by design (the endpoint said when to come back):
    recorded as ``skipped``, the check's failing or healthy state left as it was."""


class Check(ABC):
    #: The check family, e.g. "engine"; instances are named "<kind>/<target>".
    kind: str = ""

    def __init__(self, target: str, interval: float, timeout: float) -> None:
        self.target = target
        self.interval = interval
        self.timeout = timeout

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.target}"

    @abstractmethod
    async def run(self) -> None:
        """One measurement. Raise to report failure; the message is logged on state change."""

    def describe(self) -> str:
        """One line for check-config and the index page (no secrets)."""
        return ""

    def series(self) -> Iterable[Series]:
        """Every series of this check that exists now, where its families' series all
        belong to one check each (path checks: thousands of targets). The scheduler renders
        them to text when a run ends, so a scrape need not (runtime/exposition.py)."""
        return ()

    async def close(self) -> None:
        """Release sessions, sockets, threads. Called once when the check is retired."""
        return None  # most checks hold nothing between runs


#: Builds a section's checks from the config, creating their metric families on ``registry``
#: once (so several targets share one family). An absent section yields no checks.
Factory = Callable[[Config, CollectorRegistry], list[Check]]
