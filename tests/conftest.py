"""Fixtures only; the helpers they use live in tests/support/."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.netlab import Lab, require_lab
from tests.support.procs import Proc
from tests.support.simulator import Simulator, StartSimulator, start_simulator


@pytest.fixture
def spawn() -> Iterator[Callable[..., Proc]]:
    """Start processes that are stopped (by PID) when the test ends, pass or fail."""
    started: list[Proc] = []

    def _spawn(args: list[str], **kw: object) -> Proc:
        proc = Proc(args, **kw)  # type: ignore[arg-type]
        started.append(proc)
        return proc

    yield _spawn
    for proc in reversed(started):
        proc.stop()
        proc.stderr_path.unlink(missing_ok=True)


@pytest.fixture
def simulator() -> Iterator[StartSimulator]:
    """Start engine simulators (``simulator(fmt=..., fast=True, **flags)``, see
    tests/support/simulator.py), each on a free loopback port and ready when returned;
    every one is stopped by PID when the test ends, pass or fail."""
    started: list[Simulator] = []

    def _start(*flags: str, **kw: Any) -> Simulator:
        sim = start_simulator(*flags, **kw)
        started.append(sim)
        return sim

    yield _start
    for sim in reversed(started):
        sim.stop()


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    """A network-namespace lab (tests/support/netlab.py) for the test, torn down after it,
    pass or fail; skipped without root, ip or nft, except under CI=true, where it fails."""
    require_lab()
    netlab = Lab(tmp_path)
    try:
        yield netlab
    finally:
        netlab.close()
