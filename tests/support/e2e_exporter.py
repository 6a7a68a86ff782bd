"""The exporter as the end-to-end test runs it: the real app and checks, with a scripted
NVML library (no GPU here) and a peak-window clock that enters the config's first window
at a chosen moment, so one short run sees both off-peak and peak time.

    python -m tests.support.e2e_exporter CONFIG PEAK_AT_UNIX_TIME

:func:`loopback_config` is the config the tests against a real Prometheus give it (or the
plain ``run`` command): the simulator as engine ``sim``, the ``chat`` probe on carrier
``lab`` and a TCP path to the simulator, all on loopback; :func:`loopback_clients` adds the
clients check on the simulator's port.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pynvml
import yaml

from exporter.config.load import load_config
from exporter.runtime.app import App
from exporter.runtime.logs import setup_logging
from tests.support.fake_nvml import FakeNvml, h200


def loopback_config(exporter: int, sim: int, *, peak: tuple[str, str] = ("20:00", "23:00"),
                    gpu: bool = True, probe: Mapping[str, Any] | None = None,
                    more_probes: Sequence[Mapping[str, Any]] = (), **sections: Any) -> str:
    """The exporter on 127.0.0.1:``exporter`` watching the simulator on port ``sim``: its
    engine, the ``chat`` probe (with ``probe`` merged in), ``more_probes`` on the same
    endpoint and carrier, a TCP path to it, the fake GPU unless ``gpu`` is false, the peak
    window ``peak`` (UTC) and further top-level ``sections`` (``diagnosis={...}``)."""
    url = f"http://127.0.0.1:{sim}/v1/chat/completions"
    common = {"url": url, "model": "simulated-model", "min_spacing": "100ms",
              "carrier": "lab", "engine": "sim"}
    doc: dict[str, Any] = {
        "server": {"listen_address": f"127.0.0.1:{exporter}", "log_level": "warning"},
        "peak_windows": {"timezone": "UTC",
                         "windows": {"evening": {"start": peak[0], "end": peak[1]}}},
        "slo": {"ttft_p95_seconds": 0.5, "tpot_p95_seconds": 0.05},
        "engines": [{"name": "sim", "url": f"http://127.0.0.1:{sim}/metrics", "type": "vllm",
                     "interval": "1s", "timeout": "900ms"}],
        "probes": [{"name": "chat", **common, "interval": "1s", "max_tokens": 16,
                    **(probe or {})},
                   *({**common, **extra} for extra in more_probes)],
        "paths": {"interval": "2s", "burst": 5, "spacing": "100ms", "timeout": "500ms",
                  "route_interval": "5s",
                  "carriers": {"lab": [{"name": "lo", "host": "127.0.0.1", "region": "local",
                                        "protocol": "tcp", "port": sim}]}},
        **({"gpu": {"enabled": True, "interval": "1s"}} if gpu else {}),
        **sections,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def loopback_clients(sim: int, directory: Path) -> dict[str, Any]:
    """A ``clients`` section watching the simulator's port, every loopback address carrier
    ``lab``'s (its CIDR file written into ``directory``, beside the config): the probes' and
    any load's connections to the simulator are then the lab carrier's real users."""
    (directory / "lab.txt").write_text("127.0.0.0/8\n::1/128\n")
    return {"interval": "1s", "ports": [sim], "carriers": {"lab": "lab.txt"}}


def main(argv: list[str]) -> int:
    path, peak_at = argv[0], float(argv[1])
    config = load_config(path)
    pw = config.peak_windows
    window = next(iter(pw.windows.values()))
    today = dt.datetime.fromtimestamp(peak_at, pw.zone).date()
    start = dt.datetime.combine(today, window.start, tzinfo=pw.zone).timestamp()
    offset = start - peak_at

    fake = FakeNvml([h200()], clock=time.monotonic)
    fake.xid(0, 79)  # one XID at start, so the XID panels have a series
    pynvml.nvmlLib = fake

    setup_logging(config.server.log_format, config.server.log_level)
    asyncio.run(App(config, path, clock=lambda: time.time() + offset).serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
