"""Test tiers: what a test needs, as markers it gets from the fixtures it uses, and a guard
that fails a test which starts such a part without its marker (docs/architecture.md, "Tests").

    @pytest.fixture(scope="module")
    @needs("prometheus", "slow")
    def stack(...): ...          # every test using ``stack`` is marked prometheus and slow

A marker names a part the machine must have or a wait the test must sit through:

- ``netns``: network namespaces (root, ip, nft), the lab of tests/support/netlab.py;
- ``prometheus``: Prometheus, promtool, Alertmanager, amtool or VictoriaMetrics;
- ``browser``: headless Chromium through Playwright (tests/support/browser.py);
- ``vllm``: the real vLLM of ``make vllm-env`` (tests/support/vllm_server.py);
- ``slow``: wall-clock waits of many seconds (lab scenarios, the fleet, Prometheus fills).

``conftest.py`` applies them at collection (:func:`apply`), keeps the test being run in
:data:`CURRENT`, and installs :func:`audit` as an audit hook: a program of :data:`PROGRAMS`
started by the test process (a fixture, a helper or the test itself) while the running test
lacks the program's marker raises, so a tier cannot drift from what its tests really start.
Programs a child process starts (``exporter stack up`` starting Prometheus) are out of the
hook's sight: their tests use a fixture that says so. The fast tier (``make test-fast``) is
every test with none of these markers; the real vLLM's tests are a tier of their own
(:func:`tier_of`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support import ROOT

MARKERS = ("netns", "prometheus", "browser", "vllm", "slow")
#: Which marker a program needs, by the name it is started as.
PROGRAMS = {
    "prometheus": "prometheus", "promtool": "prometheus", "amtool": "prometheus",
    "prometheus-alertmanager": "prometheus", "alertmanager": "prometheus",
    "victoria-metrics": "prometheus", "prometheus-node-exporter": "prometheus",
    "chromium": "browser",
}
VLLM_VENV = ROOT / ".venv-vllm"
#: Playwright's driver, which starts Chromium on the test's behalf.
DRIVER_PART = os.sep + "playwright" + os.sep + "driver" + os.sep
#: Seconds of :func:`sleep_until` that make a test slow.
LONG_WAIT = 5.0

#: The test being set up, run or torn down (None outside a test: collection, session end).
CURRENT: list[pytest.Item] = []
F = TypeVar("F", bound=Callable[..., Any])


def needs(*markers: str) -> Callable[[F], F]:
    """Declare what a fixture starts or waits for; put it under ``@pytest.fixture``."""
    unknown = set(markers) - set(MARKERS)
    if unknown:
        raise ValueError(f"unknown tier markers {sorted(unknown)}; known: {MARKERS}")

    def mark(fn: F) -> F:
        fn.__tier_needs__ = markers  # type: ignore[attr-defined]
        return fn
    return mark


def fixture_needs(item: pytest.Item) -> tuple[set[str], bool]:
    """The markers the fixtures of ``item`` declare, and whether it uses a fixture of this
    tree wider than a test (one instance shared by the tests of its module)."""
    info = getattr(item, "_fixtureinfo", None)
    found: set[str] = set()
    shared = False
    if info is None:
        return found, shared
    for name in item.fixturenames:  # type: ignore[attr-defined]
        defs = info.name2fixturedefs.get(name)
        if not defs:
            continue
        fixturedef = defs[-1]  # the definition that applies to this test
        found.update(getattr(fixturedef.func, "__tier_needs__", ()))
        # baseid: where the fixture is defined; empty for pytest's and plugins' own.
        shared |= bool(fixturedef.baseid) and fixturedef.scope != "function"
    return found, shared


def apply(items: Iterable[pytest.Item]) -> None:
    """Give each test the markers its fixtures declare. The tests of a module that share a
    module-scoped fixture go to one xdist worker (``--dist loadgroup``), so it starts once;
    every test of the real vLLM goes to one group of its own."""
    for item in items:
        found, shared = fixture_needs(item)
        for name in sorted(found):
            item.add_marker(name)
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if "vllm" in found:
            # One real vLLM at a time: each takes both cores while it prefills, and a second
            # beside it turns the first's timing comparisons into flakes.
            item.add_marker(pytest.mark.xdist_group("vllm"))
        elif shared:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder whole modules, in place: those with a slow test first, the one allowing
    itself the longest timeout (the best guess of a test's length before it has run)
    first, so that over xdist workers the longest waits start at once and the short tests
    fill in behind them. Each module's tests keep their order and stay together, so a
    module-scoped fixture still starts once."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)

    def key(tests: list[pytest.Item]) -> float:
        slow = [t for t in tests if t.get_closest_marker("slow")]
        if not slow:
            return 0.0
        marks = [t.get_closest_marker("timeout") for t in slow]
        return -max((float(m.args[0]) for m in marks if m and m.args), default=1.0)

    items[:] = [item for tests in sorted(modules.values(), key=key) for item in tests]


#: The tiers in the order ``make test`` runs them.
TIERS = ("fast", "parts", "vllm")


def tier_of(item: pytest.Item) -> str:
    """``fast`` for a test needing none of the parts and no long wait; ``vllm`` for one of
    the real vLLM, which runs alone (on 2 cores beside the other labs its prefill took
    0.4-36 s by the load around it, and the scenarios' timings meant nothing); else
    ``parts``."""
    if item.get_closest_marker("vllm"):
        return "vllm"
    return "parts" if any(item.get_closest_marker(m) for m in MARKERS) else "fast"


def current_markers() -> set[str] | None:
    if not CURRENT:
        return None
    return {m.name for m in CURRENT[-1].iter_markers()}


def _need_of(argv: Sequence[str]) -> str | None:
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if program == "ip" and len(argv) > 1 and argv[1] in ("netns", "-n", "-netns"):
        if argv[1:3] == ["netns", "exec"] and len(argv) > 4:
            return _need_of(argv[4:]) or "netns"
        return "netns"
    if program in PROGRAMS:
        return PROGRAMS[program]
    path = str(argv[0])
    if DRIVER_PART in path:
        return "browser"
    if Path(path).is_absolute() and Path(path).is_relative_to(VLLM_VENV):
        return "vllm"
    return None


def audit(event: str, args: tuple[Any, ...]) -> None:
    """The audit hook: a guarded program started outside a test marked for it raises."""
    if event != "subprocess.Popen":
        return
    executable, argv = args[0], args[1]
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    names = [os.fsdecode(a) for a in argv]
    if executable is not None:
        names[:1] = [os.fsdecode(executable)]
    need = _need_of(names)
    if need is None:
        return
    have = current_markers()
    if have is not None and need in have:
        return
    where = "outside any test" if have is None else CURRENT[-1].nodeid
    raise RuntimeError(
        f"{' '.join(names[:3])} needs the `{need}` marker and {where} lacks it: start it "
        f"through a fixture declared @needs({need!r}) (tests/support/tiers.py)")


def sleep_until(moment: float) -> None:
    """Sleep until wall-clock ``moment`` (time.time()); a test waiting longer than
    :data:`LONG_WAIT` must be marked ``slow`` (from a fixture, or on the test itself)."""
    left = moment - time.time()
    have = current_markers()
    if left > LONG_WAIT and have is not None and "slow" not in have:
        raise RuntimeError(f"{CURRENT[-1].nodeid} waits {left:.0f}s and is not marked slow")
    while (left := moment - time.time()) > 0:
        time.sleep(min(left, 1.0))


def groups_file(controller_pid: int) -> Path:
    """Where the workers of the xdist controller ``controller_pid`` leave the groups."""
    return Path(tempfile.gettempdir()) / f"pytest-xdist-groups-{controller_pid}.json"


def write_groups(items: Iterable[pytest.Item]) -> None:
    """In an xdist worker: each grouped test's group, for :class:`GroupScheduling`.
    pytest 9.2 derives ``nodeid`` from the node itself, so xdist 3.8's ``--dist
    loadgroup`` can no longer add the group to it; the controller reads this file instead."""
    groups = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None and mark.args:
            groups[item.nodeid] = str(mark.args[0])
    path = groups_file(os.getppid())  # a popen worker is the controller's child
    tmp = path.with_suffix(f".{os.getpid()}")
    tmp.write_text(json.dumps(groups))
    tmp.replace(path)


def scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` that reads the groups from :func:`write_groups`'s file, keeps
    the collection's longest-first order (:func:`longest_first`) rather than xdist's
    most-tests-first, and hands a worker its next group only when it is down to its last
    test: the parts tier's groups run for minutes each, and xdist's usual two in hand
    queued one long group behind another on one worker while others went idle."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        _groups: dict[str, str] | None = None

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            # A worker runs a test once it holds the next one (pytest's nextitem): with one
            # pending it is waiting, so that is when the next group goes to it.
            if self._pending_of(self.assigned_work[node]) <= 1:
                self._assign_work_unit(node)

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                path = groups_file(os.getpid())
                self._groups = json.loads(path.read_text()) if path.exists() else {}
            return self._groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)
