"""Fixtures and the tier hooks only; the helpers they use live in tests/support/.

A fixture that starts a part the machine must have (namespaces, Prometheus and its kin,
Chromium, vLLM) or waits a long time says so with ``@needs`` (tests/support/tiers.py):
every test using it carries those markers, and ``make test-fast`` leaves it out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from exporter.stack.state import Ports
from tests.support import ROOT, tiers
from tests.support.browser import BrowserSession, browser_session
from tests.support.lab.runner import LabRun
from tests.support.netlab import Lab, require_lab
from tests.support.procs import Proc, free_port
from tests.support.prometheus import Prometheus, require, start_prometheus
from tests.support.simulator import Simulator, StartSimulator, start_simulator
from tests.support.tiers import needs

sys.addaudithook(tiers.audit)
T = TypeVar("T")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", choices=tiers.TIERS, default=None,
                     help="fast: only tests needing none of the tier markers; vllm: those "
                          "of the real vLLM; parts: the others (tests/support/tiers.py)")


# First: pytest-xdist's own hook reads the xdist_group markers this one adds.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.apply(items)
    tiers.longest_first(items)
    tier = config.getoption("--tier")
    if tier is not None:
        keep = [item for item in items if tiers.tier_of(item) == tier]
        dropped = [item for item in items if tiers.tier_of(item) != tier]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    if hasattr(config, "workerinput") and getattr(config.option, "loadgroup", False):
        tiers.write_groups(items)


# Optional: without pytest-xdist installed the suite runs in one process.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return tiers.scheduler(config, log) if config.getvalue("dist") == "loadgroup" else None


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        tiers.groups_file(os.getpid()).unlink(missing_ok=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    tiers.CURRENT.append(item)
    try:
        return (yield)
    finally:
        tiers.CURRENT.pop()


def each_stopped(start: Callable[..., T], stop: Callable[[T], object]
                 ) -> Iterator[Callable[..., T]]:
    """The body of a factory fixture: ``start`` each time the test calls it, then ``stop``
    every one started, last first, when the test ends, pass or fail."""
    started: list[T] = []

    def _start(*args: Any, **kw: Any) -> T:
        thing = start(*args, **kw)
        started.append(thing)
        return thing

    yield _start
    for thing in reversed(started):
        stop(thing)


def _stop(proc: Proc) -> None:
    proc.stop()
    proc.stderr_path.unlink(missing_ok=True)


@pytest.fixture
def spawn() -> Iterator[Callable[..., Proc]]:
    """Start processes that are stopped (by PID) when the test ends, pass or fail."""
    yield from each_stopped(Proc, _stop)


@pytest.fixture
def simulator() -> Iterator[StartSimulator]:
    """Start engine simulators (``simulator(fmt=..., fast=True, **flags)``, see
    tests/support/simulator.py), each on a free loopback port and ready when returned;
    every one is stopped by PID when the test ends, pass or fail."""
    yield from each_stopped(start_simulator, Simulator.stop)


@pytest.fixture
@needs("netns")
def lab(tmp_path: Path) -> Iterator[Lab]:
    """A network-namespace lab (tests/support/netlab.py) for the test, torn down after it,
    pass or fail; skipped without root, ip or nft, except under CI=true, where it fails."""
    require_lab()
    netlab = Lab(tmp_path)
    try:
        yield netlab
    finally:
        netlab.close()


@pytest.fixture
@needs("netns", "prometheus", "slow")
def scenario_lab(tmp_path: Path) -> Iterator[Callable[..., LabRun]]:
    """``scenario_lab(scenario, sources=("exporter",))``: the scenario lab
    (tests/support/lab/runner.py) for a scenario, to enter with ``with``; closed when the
    test ends whatever happened. Needs what ``lab`` needs, and Prometheus for that source."""
    require_lab()
    count = iter(range(1000))

    def _make(scenario: Any, sources: tuple[str, ...] = ("exporter",)) -> LabRun:
        if "prometheus" in sources:
            require("prometheus")
        workdir = tmp_path / f"run{next(count)}"
        workdir.mkdir()
        return LabRun(scenario, workdir, sources)

    yield from each_stopped(_make, LabRun.close)


@pytest.fixture
@needs("prometheus")
def prometheus(tmp_path: Path, spawn: Callable[..., Proc]) -> Callable[..., Prometheus]:
    """``prometheus(config_text, name="prometheus")``: a real Prometheus on a free loopback
    port with its data under tmp_path, ready when returned, stopped when the test ends."""
    require("prometheus")

    def _start(config: str, name: str = "prometheus") -> Prometheus:
        return start_prometheus(tmp_path, config, spawn, name)
    return _start


@pytest.fixture
@needs("prometheus")
def prom_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``prom_cli("promtool", "check", "rules", FILE, input=None)``: one run of a Prometheus
    tool (promtool, amtool), its output captured; fails under CI=true without it."""
    def _run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        require(args[0])
        return subprocess.run(list(args), cwd=ROOT, input=input, capture_output=True,
                              text=True, timeout=120)
    return _run


@pytest.fixture
@needs("prometheus")
def stack_ports() -> Ports:
    """Free loopback ports for a native stack (``exporter stack up``: Prometheus and
    Alertmanager besides the exporter, the simulator and the sink)."""
    for binary in ("prometheus", "prometheus-alertmanager"):
        require(binary)
    return Ports(simulator=free_port(), exporter=free_port(), prometheus=free_port(),
                 alertmanager=free_port(), sink=free_port())


@pytest.fixture
@needs("browser")
def browser() -> Iterator[BrowserSession]:
    """Headless Chromium (tests/support/browser.py) for the test; skipped without it,
    except under CI=true, where it fails."""
    with browser_session() as session:
        yield session
