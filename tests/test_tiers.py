"""The test tiers (tests/support/tiers.py): a test carries the markers of the fixtures it
uses, and a test that starts a part without its marker fails before the part starts."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from tests.support import ROOT, tiers
from tests.support.prometheus import PromCli


def test_a_fixture_gives_the_test_its_markers(request: pytest.FixtureRequest,
                                              prom_cli: PromCli) -> None:
    assert request.node.get_closest_marker("prometheus") is not None
    assert request.node.get_closest_marker("netns") is None
    assert tiers.tier_of(request.node) == "parts"


def test_a_test_without_a_marker_is_fast(request: pytest.FixtureRequest) -> None:
    assert tiers.tier_of(request.node) == "fast"


def test_the_real_vllm_is_a_tier_of_its_own(request: pytest.FixtureRequest) -> None:
    # Marked while running, so this test itself stays in the fast tier.
    request.node.add_marker("slow")
    assert tiers.tier_of(request.node) == "parts"
    request.node.add_marker("vllm")
    assert tiers.tier_of(request.node) == "vllm"


def test_make_test_runs_every_tier_in_order() -> None:
    # The real vLLM last, once the labs are over (the machine quiet).
    target = ROOT.joinpath("Makefile").read_text().split("\npytest:", 1)[1].split("\n\n")[0]
    assert re.findall(r"\$\(call tier,(\w+),", target) == list(tiers.TIERS)


@pytest.mark.parametrize(("argv", "need"), [
    (["promtool", "check", "rules", "x.yaml"], "prometheus"),
    (["/usr/bin/prometheus-alertmanager", "--config.file=x"], "prometheus"),
    (["victoria-metrics", "-httpListenAddr=:8428"], "prometheus"),
    (["ip", "netns", "add", "x"], "netns"),
    (["ip", "-n", "x", "link", "set", "lo", "up"], "netns"),
    (["ip", "netns", "exec", "x", sys.executable, "-m", "exporter"], "netns"),
    (["ip", "netns", "exec", "x", "prometheus", "--config.file=y"], "prometheus"),
    ([str(tiers.VLLM_VENV / "bin" / "python"), "-m", "vllm.entrypoints.cli.main"], "vllm"),
    (["/venv/lib/python3.11/site-packages/playwright/driver/node", "cli.js", "run-driver"],
     "browser"),
    (["ip", "addr"], None),
    ([sys.executable, "-m", "exporter", "run"], None),
])
def test_programs_and_the_marker_they_need(argv: list[str], need: str | None) -> None:
    assert tiers._need_of(argv) == need


def test_starting_a_part_without_its_marker_fails_before_it_starts() -> None:
    with pytest.raises(RuntimeError, match="needs the `prometheus` marker"):
        subprocess.run(["promtool", "--version"], capture_output=True, check=False)
    with pytest.raises(RuntimeError, match="needs the `netns` marker"):
        subprocess.run(["ip", "netns", "add", "never-made"], capture_output=True, check=False)


def test_a_long_wait_needs_the_slow_marker() -> None:
    with pytest.raises(RuntimeError, match="not marked slow"):
        tiers.sleep_until(time.time() + 60)
    tiers.sleep_until(time.time() + 0.01)  # a short one is any test's


def test_needs_refuses_an_unknown_marker() -> None:
    with pytest.raises(ValueError, match="unknown tier markers"):
        tiers.needs("gpu")


@pytest.fixture(scope="module")
def shared() -> int:
    return 1


def test_tests_sharing_a_module_fixture_share_an_xdist_worker(
        request: pytest.FixtureRequest, shared: int) -> None:
    mark = request.node.get_closest_marker("xdist_group")
    assert mark is not None and mark.args == ("tests/test_tiers.py",)
    assert tiers.tier_of(request.node) == "fast"
