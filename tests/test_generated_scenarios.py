"""Generated scenarios (tests/support/lab/generate.py): the generator's own contract, and a
small fixed-seed sample of its scenarios through the lab, from both sources, against the
verdicts the generator derived from the knobs (benchmarks/diagnosis_matrix.py runs many).

The lab part needs root, ip, nft and Prometheus: without them it skips, except under
CI=true, where it fails (tests/support/netlab.py, require_lab).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.lab.expect import Ambiguous, expected
from tests.support.lab.generate import generate, lab_of, write
from tests.support.lab.runner import LabRun, misses
from tests.support.lab.scenario import Scenario, load_scenario

#: The CI sample: (seed, how many to generate, which of them to run): engine/queueing, a
#: double where the engine's queue is the primary (it explains three probes' TTFT, unicom's
#: RTT floor one), a healthy run (a delay under its line), and a route change with a GPU
#: throttled under a fast engine (a verdict over its alert's line that no probe feels).
SAMPLE_SEED, SAMPLE_N = 1, 12
SAMPLE = (2, 3, 4, 7)


def _scenario(**spec: object) -> Scenario:
    return Scenario.model_validate({"description": "t", "settle": "70s", "expect": [], **spec})


def _expected(**spec: object) -> list[tuple[str, str]]:
    return [(str(e["layer"]), str(e["cause"])) for e in expected(lab_of(_scenario(**spec)))]


@pytest.mark.timeout(300)
def test_the_same_seed_gives_the_same_scenarios_and_files_round_trip(tmp_path: Path) -> None:
    first, again = generate(5, 4), generate(5, 4)
    assert first == again
    assert generate(6, 4) != first
    for path, scenario in zip(write(first, tmp_path), first, strict=True):
        assert load_scenario(path) == scenario
    shapes = {len(s.expect) for s in first}
    assert shapes == {0, 1, 2}, "healthy, single and double scenarios"


@pytest.mark.timeout(300)
def test_every_kept_scenario_is_decided_by_its_knobs() -> None:
    for s in generate(7, 6):
        got = expected(lab_of(s))
        assert got == [e.model_dump() for e in s.expect], s.description


def test_expectations_follow_the_thresholds_not_the_chain() -> None:
    # 5% loss on mobile under an engine slow enough to make every probe feel it: over the
    # default 2% loss ratio both are named, the engine first (it explains the other three
    # probes' TTFT, the loss only mobile's). (A minute's window: enough packets and
    # requests for the drawn shares to be decided.)
    assert _expected(simulator={"faults": {"slow_first_token": 0.8}},
                     paths={"mobile": {"loss": 0.05}},
                     exporter={"slo": {"ttft_p95_seconds": 0.4},
                               "diagnosis": {"window": "60s"}}) == [
        ("engine", "slow_prefill"), ("network", "packet_loss")]
    # The same 3 s stall on unicom is a stall over the default 2 s line, and nothing under
    # a line raised to 8 s.
    stalled = {"paths": {"unicom": {"stall": "3s", "stall_after": 5}}}
    tpot = {"ttft_p95_seconds": 1.0, "tpot_p95_seconds": 0.5}
    assert _expected(**stalled, exporter={"slo": tpot}) == [("network", "stream_stalls")]
    assert _expected(**stalled, exporter={"slo": tpot, "alerting": {"stall_seconds": "8s"}}
                     ) == []
    # A delay over the TTFT SLO is an RTT floor; the same delay under a loose SLO is healthy.
    assert _expected(paths={"telecom": {"delay": "300ms"}},
                     exporter={"slo": {"ttft_p95_seconds": 0.2}}) == [("network", "rtt_floor")]
    assert _expected(paths={"telecom": {"delay": "300ms"}}) == []
    # A throttled GPU pages under a fast engine too; under a slow one it is also why.
    hot = {"gpu": {"throttle": ["sw_thermal"]}}
    assert _expected(**hot) == [("gpu", "throttling")]
    assert _expected(**hot, simulator={"faults": {"slow_first_token": 2.0}}) == [
        ("gpu", "throttling")]


def test_a_knob_at_its_threshold_is_ambiguous() -> None:
    # 2% loss against the 2% loss ratio: the measured share falls either side.
    with pytest.raises(Ambiguous):
        expected(lab_of(_scenario(paths={"mobile": {"loss": 0.02}},
                                  simulator={"faults": {"slow_first_token": 1.5}})))


@functools.cache
def sampled() -> list[Scenario]:
    return generate(SAMPLE_SEED, SAMPLE_N)  # at run time, not when the suite is collected


@pytest.mark.timeout(400)
@pytest.mark.parametrize("index", SAMPLE, ids=[f"gen-{SAMPLE_SEED}-{i}" for i in SAMPLE])
def test_generated_scenario_gives_its_expected_diagnosis(
        index: int, scenario_lab: Callable[..., LabRun]) -> None:
    scenario = sampled()[index]
    with scenario_lab(scenario, tuple(scenario.sources)) as run:
        results = run.outcome()
    why = misses(scenario.description, results)
    assert not why, why


def test_stream_loss_with_icmp_clean_names_the_carriers_probe() -> None:
    # Stream-only loss over the loss line (LLMProbeStreamPacketLoss's) with clean echoes: a
    # packet_loss of the probe and its carrier, not of the path (whose ICMP is clean); under
    # the line, nothing. Both knobs at once (a minute's window: enough requests to decide
    # the lost SYNs): the path's finding, which the stream joins.
    def scoped(**spec: object) -> list[tuple[str, str, dict[str, str]]]:
        return [(str(e["layer"]), str(e["cause"]), dict(e["scope"]))  # type: ignore[call-overload]
                for e in expected(lab_of(_scenario(**spec)))]
    assert scoped(paths={"mobile": {"stream_loss": 0.08}}) == [
        ("network", "packet_loss", {"carrier": "mobile", "probe": "mobile"})]
    assert scoped(paths={"mobile": {"stream_loss": 0.005}}) == []
    assert scoped(paths={"mobile": {"stream_loss": 0.04, "loss": 0.06}},
                  exporter={"diagnosis": {"window": "60s"}}) == [
        ("network", "packet_loss", {"carrier": "mobile", "target": "site"})]
