"""What ``up`` records for ``down``: the ports, and each started process with its PID and
kernel start time, kept as JSON in the state file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = Path(".stack") / "state.json"


@dataclass(frozen=True)
class Ports:
    # Away from the demo's 8800/9400 (`make run`) and the compose stack's 9090/9093, so
    # the native stack can run beside either.
    simulator: int = 18800
    exporter: int = 19400
    prometheus: int = 19090
    alertmanager: int = 19093
    sink: int = 19095


@dataclass
class Service:
    name: str
    pid: int
    #: Kernel start time of the process (clock ticks after boot): a PID reused by another
    #: process after ours exited has a different one, so `down` leaves it alone.
    started: int
    url: str
    log: str


@dataclass
class Stack:
    directory: str
    ports: Ports
    services: list[Service] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Stack:
        data = json.loads(text)
        return cls(
            directory=data["directory"],
            ports=Ports(**data["ports"]),
            services=[Service(**s) for s in data["services"]],
        )
