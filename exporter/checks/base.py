"""What every check is: a named thing the scheduler runs on an interval.

A check's ``run()`` measures, updates the state it keeps, returns nothing and raises on
failure; when a run ends, whatever its outcome, the scheduler takes the check's ``batch()``
(every series it owns now, ``exporter/checks/batch.py``) and records outcome and duration
(node_exporter's ``Update(ch)`` contract). Both are abstract: a batch replaces all the
check published, so a check that forgot ``batch()`` would not fail, it would silently
publish nothing; it cannot be built instead. A check that owns no series says so by
returning ``()``. A check never renders or registers metrics: the runtime does. Anything
that blocks runs in a worker thread, never on the event loop.

A check package declares itself to the registry (``exporter/checks/__init__.py``) with one
``Registration`` in its ``check`` module, typed, so the registry reads no untyped attribute.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from exporter.checks.batch import Batch
from exporter.config.models import Config


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

    @abstractmethod
    def batch(self) -> Batch:
        """Every series this check owns now, as one immutable batch; called when each run
        ends (whatever its outcome) and once before the first. A series belongs to one
        check only: several targets of one family each publish their own label sets."""

    async def close(self) -> None:
        """Release sessions, sockets, threads. Called once when the check is retired."""
        return None  # most checks hold nothing between runs


#: Builds a section's checks from the config; an absent section yields no checks.
Factory = Callable[[Config], list[Check]]


@dataclass(frozen=True, slots=True)
class Registration:
    """A check package's declaration, ``REGISTRATION`` in its ``check`` module: the
    ``Config`` field it reads (which also places its checks in the run order) and the
    factory that builds them."""

    section: str
    build: Factory
