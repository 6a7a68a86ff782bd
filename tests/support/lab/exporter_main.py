"""The real exporter (app, checks, server) with the fake NVML library in place of the driver,
its GPUs set from a JSON file the lab writes and rewrites when a scenario applies:

    python -m tests.support.lab.exporter_main CONFIG GPU_JSON [PEAK_END_UNIX_TIME]

``GPU_JSON`` is ``{"count": 1, "throttle": ["sw_thermal"], "utilization": 0.9,
"dram_bw": 0.6, "memory_used": 0.8, "xids": [[0, 79]], "pcie_width": 8, "nvlink_down": 1,
"nvlink_replays": 5}`` (the links' knobs on GPU 0 only). A watcher thread re-reads it when
it changes and updates the fake GPUs in place, so the GPU check sees the change at its next
sample; each ``xids`` entry ([GPU index, XID]) beyond those already seen is one XID event.
The GPU count is fixed at start (NVML enumerates once).

With ``PEAK_END_UNIX_TIME`` the peak-window clock runs so that the config's first peak
window ends at that moment: the run is in the peak until then, off-peak after (the fleet
test needs both kinds of gated series in a short run).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from exporter.checks.gpu.nvml import CLOCK_EVENT_REASONS
from exporter.config.load import load_config
from exporter.config.models import Config
from exporter.runtime.app import App
from exporter.runtime.logs import setup_logging
from tests.support.fake_nvml import FakeGpu, FakeNvml, h200

BITS = {reason: bit for bit, reason in CLOCK_EVENT_REASONS}


def apply(gpus: list[FakeGpu], spec: dict[str, Any]) -> None:
    throttle = 0
    for reason in spec.get("throttle", []):
        throttle |= BITS[reason]
    for gpu in gpus:
        gpu.util_gpu = round(100 * spec.get("utilization", 0.85))
        gpu.memory_used = int(gpu.memory_total * spec.get("memory_used", 0.8))
        gpu.clock_event_reasons = throttle
        # Thermal throttling shows as heat and lower clocks too, as on a real card.
        hot = throttle & (BITS["sw_thermal"] | BITS["hw_thermal"])
        gpu.temperature_c = 89 if hot else 61
        gpu.sm_clock_mhz = 1200 if throttle else 1980
        assert gpu.gpm is not None
        gpu.gpm[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL] = 100 * spec.get("dram_bw", 0.5)
    if not gpus:
        return  # a vantage point's exporter
    first = gpus[0]
    first.pcie_width = spec.get("pcie_width", first.pcie_width_max)
    if first.nvlink is not None:  # the last links down: link 0 stays up to count replays
        up = len(first.nvlink) - spec.get("nvlink_down", 0)
        first.nvlink = [i < up for i in range(len(first.nvlink))]


def raise_xids(fake: FakeNvml, spec: dict[str, Any], seen: int) -> int:
    xids = spec.get("xids", [])
    for index, code in xids[seen:]:
        fake.xid(index, code)
    return max(seen, len(xids))


def watch(path: Path, gpus: list[FakeGpu], fake: FakeNvml, xids: int) -> None:
    """Re-applies the file when it changes; GPU 0's link 0 replays at the file's
    ``nvlink_replays`` per second from then on."""
    seen = path.stat().st_mtime_ns
    rate = json.loads(path.read_text()).get("nvlink_replays", 0)
    key = (0, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)
    base, since = gpus[0].nvlink_errors.get(key, 0), time.monotonic()
    while True:
        time.sleep(0.2)
        try:
            mtime = path.stat().st_mtime_ns
            if mtime != seen:
                seen = mtime
                spec = json.loads(path.read_text())
                apply(gpus, spec)
                xids = raise_xids(fake, spec, xids)
                rate = spec.get("nvlink_replays", 0)
                base, since = gpus[0].nvlink_errors.get(key, 0), time.monotonic()
        except (OSError, ValueError):
            continue  # a rewrite in progress; the next poll reads it whole
        gpus[0].nvlink_errors[key] = base + int(rate * (time.monotonic() - since))


def peak_clock(config: Config, peak_end: float) -> Callable[[], float]:
    """A clock that reaches the first peak window's end at ``peak_end``."""
    pw = config.peak_windows
    window = next(iter(pw.windows.values()))
    today = dt.datetime.fromtimestamp(peak_end, pw.zone).date()
    end = dt.datetime.combine(today, window.end, tzinfo=pw.zone).timestamp()
    offset = end - peak_end
    return lambda: time.time() + offset


def main(argv: list[str]) -> int:
    config_path, gpu_path = argv[0], Path(argv[1])
    config = load_config(config_path)
    spec = json.loads(gpu_path.read_text())
    gpus = [h200(uuid=f"GPU-lab-{i:04d}") for i in range(spec.get("count", 1))]
    apply(gpus, spec)
    fake = FakeNvml(gpus, clock=time.monotonic)
    xids = raise_xids(fake, spec, 0)
    pynvml.nvmlLib = fake
    threading.Thread(target=watch, args=(gpu_path, gpus, fake, xids), daemon=True).start()
    clock = peak_clock(config, float(argv[2])) if len(argv) > 2 else time.time
    setup_logging(config.server.log_format, config.server.log_level)
    asyncio.run(App(config, config_path, clock=clock).serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
