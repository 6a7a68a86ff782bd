"""The real exporter with a decision chain that only echoes what it was given: every number
of every ``ProbeWindow`` / ``EngineWindow`` becomes one evidence row of the symptom step, so
a test reads the embedded source's Observations through /api/v1/diagnosis.

    python -m tests.support.observing_exporter CONFIG
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys

from exporter.config.load import load_config
from exporter.config.values import format_duration
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.result import Diagnosis, Evidence, Step, StepResult
from exporter.runtime.app import App
from exporter.runtime.logs import setup_logging


def echo(obs: Observations) -> Diagnosis:
    rows = []
    for kind, items in (("probe", obs.probes), ("engine", obs.engines)):
        for item in items:
            fields = dataclasses.asdict(item)
            labels = {k: str(v) for k, v in fields.items() if isinstance(v, str)}
            for name, v in fields.items():
                if not isinstance(v, int | float):  # bools are ints: up reads 1 or 0
                    continue
                rows.append(Evidence(metric=f"{kind}.{name}", value=float(v), labels=labels))
            for outcome, n in fields.get("outcomes", {}).items():
                rows.append(Evidence(metric=f"{kind}.outcomes.{outcome}", value=float(n),
                                     labels=labels))
    return Diagnosis(
        at=obs.at, window=format_duration(obs.window), source=obs.source, status="healthy",
        verdicts=(), steps=(Step("symptom", StepResult.RULED_OUT, tuple(rows)),),
    )


def main(argv: list[str]) -> int:
    config = load_config(argv[0])
    setup_logging(config.server.log_format, config.server.log_level)
    asyncio.run(App(config, argv[0], evaluate=echo).serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
