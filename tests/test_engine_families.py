"""The simulator's vLLM format against a real vLLM's recorded exposition: the same families,
with the same types and label names (tests/fixtures/engines/vllm-0.32.0-cpu-metrics.txt).

Runs without vLLM: the fixture was recorded from one (see tests/fixtures/engines/README.md);
tests/test_vllm_real.py holds a live server to the same fixture.
"""

from __future__ import annotations

from exporter.checks.engine.table import SOURCES
from exporter.checks.engine.unmapped import UNMAPPED
from tests.support.families import diff, family_set
from tests.support.procs import http_get
from tests.support.simulator import StartSimulator
from tests.support.vllm_server import FIXTURE


def test_recorded_vllm_families_are_mapped_or_listed() -> None:
    recorded = set(family_set(FIXTURE.read_text(), "vllm:"))
    # The recording ran without speculative decoding or a KV connector; the API server's
    # process families carry no prefix.
    mapped = {s.name for s in SOURCES if s.engine == "vllm" and not s.legacy
              and not s.feature and s.name.startswith("vllm:")}
    listed = {u.name for u in UNMAPPED if u.engine == "vllm" and not u.feature}
    assert len(recorded) == 39
    assert sorted(recorded - mapped - listed) == [], "neither mapped nor listed"
    assert sorted((mapped | listed) - recorded) == [], "mapped or listed, not served"


def test_simulator_vllm_format_has_the_recorded_family_set(simulator: StartSimulator) -> None:
    sim = simulator(fmt="vllm", fast=True)
    status, body = http_get(sim.metrics_url)
    assert status == 200
    problems = diff(family_set(body, "vllm:"), family_set(FIXTURE.read_text(), "vllm:"))
    assert problems == [], "\n".join(problems)
