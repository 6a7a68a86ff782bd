"""The scenario lab: the real exporter, the engine simulator, background load, per-carrier
impaired paths in network namespaces and the fake NVML, driven by scenario files
(``tests/scenarios/*.yaml``) and judged by the diagnosis the exporter (or Prometheus) gives.

    python -m tests.support.lab run tests/scenarios/loss-mobile.yaml [--source prometheus] [--json]

Modules: ``scenario`` (the file format and loader), ``topology`` (namespaces, routers, delay
proxies, nftables drops), ``runner`` (one run, start to cleanup, and the comparison),
``exporter_main`` (the exporter with the fake NVML), ``load`` (background requests) and
``delay_proxy`` (the TCP delay proxy; standalone on purpose); ``fleet`` builds the fleet of
docs/scaling.md on the same carrier paths (tests/test_fleet.py); ``generate`` composes seeded
scenarios whose expected verdicts ``expect`` derives from their knobs and thresholds
(benchmarks/diagnosis_matrix.py). Needs root, ``ip``, ``nft``
(and ``prometheus`` for that source). docs/dev/diagnosis.md, "Scenario lab", has the commands.
"""

from __future__ import annotations

from pathlib import Path

from tests.support import ROOT

SCENARIOS: Path = ROOT / "tests" / "scenarios"
