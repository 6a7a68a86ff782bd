"""What the server-split tests share (the simulator's in test_probe_server_timing.py and the
real vLLM's in test_vllm_real.py): a probe check built from config, one run that must
succeed, and each run's split read back from the published histograms."""

from __future__ import annotations

from typing import Any

import yaml

from exporter import metrics
from exporter.checks.probe import check as probe
from exporter.checks.probe.check import ProbeCheck, ProbeFailed
from exporter.config.load import parse_config
from exporter.probing.server_timing import tolerance
from tests.support.samples import published

#: The parts that add up to the client's TTFT.
TTFT_PARTS = (metrics.ServerPart.NETWORK_FRONTEND.value, metrics.ServerPart.QUEUE.value,
              metrics.ServerPart.PREFILL.value)


def make_probe(url: str, model: str, **over: Any) -> ProbeCheck:
    entry = {"name": "p", "url": url, "model": model, "max_tokens": 8, "min_spacing": "1ms",
             **over}
    [check] = probe.build(parse_config(yaml.safe_dump({"probes": [entry]})))
    assert isinstance(check, ProbeCheck)
    return check


def value(check: ProbeCheck, name: str, **labels: str) -> float:
    """The check's published sample with its labels and ``labels``; 0 when absent."""
    key = (name, tuple(sorted({**check.series_labels, **labels}.items())))
    return published(check).get(key, 0.0)


async def run(check: ProbeCheck) -> None:
    try:
        await check.run()
    except ProbeFailed as exc:
        raise AssertionError(str(exc)) from None


class Parts:
    """The split of each run: differences of the published histogram sums, as /metrics
    has them."""

    def __init__(self, check: ProbeCheck) -> None:
        self.check = check
        self.last = self._sums()

    def _sums(self) -> dict[str, float]:
        out = {part.value: value(self.check, f"{metrics.PROBE_SERVER_TIMING.name}_sum",
                                 part=part.value)
               for part in metrics.ServerPart}
        out["ttft"] = value(self.check, f"{metrics.PROBE_TTFT.name}_sum")
        return out

    def run_delta(self) -> dict[str, float]:
        now = self._sums()
        delta = {k: now[k] - self.last[k] for k in now}
        self.last = now
        return delta


def assert_sums_to_ttft(d: dict[str, float]) -> None:
    """Issue 22's acceptance: network + frontend + queue + prefill equals the client TTFT
    within max(5 ms, 5%)."""
    parts = sum(d[p] for p in TTFT_PARTS)
    assert d["ttft"] > 0
    assert abs(parts - d["ttft"]) <= tolerance(d["ttft"]), (parts, d)
