"""The exporter as the end-to-end test runs it: the real app and checks, with a scripted
NVML library (no GPU here) and a peak-window clock that enters the config's first window
at a chosen moment, so one short run sees both off-peak and peak time.

    python -m tests.support.e2e_exporter CONFIG PEAK_AT_UNIX_TIME
"""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
import time

import pynvml

from exporter.config.load import load_config
from exporter.runtime.app import App
from exporter.runtime.logs import setup_logging
from tests.support.fake_nvml import FakeNvml, h200


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
