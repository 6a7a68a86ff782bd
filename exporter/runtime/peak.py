"""``llm_exporter_peak_window{window}``: 1 inside a configured local-time window, else 0.

Computed at scrape time from a wall clock (injectable for tests), so the gauge flips at the
exact instant and rules never do UTC hour arithmetic. Times of day are compared in local
wall-clock time via zoneinfo, so DST changes move the window with the clock on the wall.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter import metrics
from exporter.config.models import PeakWindowsConfig
from exporter.config.values import PeakWindow


def in_window(window: PeakWindow, local: dt.time) -> bool:
    if window.start < window.end:
        return window.start <= local < window.end
    # Crosses midnight, e.g. 22:00-02:00.
    return local >= window.start or local < window.end


def active_windows(cfg: PeakWindowsConfig, unix_time: float) -> dict[str, bool]:
    local = dt.datetime.fromtimestamp(unix_time, cfg.zone).time()
    return {name: in_window(w, local) for name, w in cfg.windows.items()}


class PeakWindowCollector(Collector):
    def __init__(
        self,
        config: Callable[[], PeakWindowsConfig],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        family = metrics.EXPORTER_PEAK_WINDOW.gauge_family()
        for name, inside in active_windows(self._config(), self._clock()).items():
            family.add_metric([name], 1.0 if inside else 0.0)
        yield family
