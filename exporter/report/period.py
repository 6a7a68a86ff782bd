"""The report's period cut into segments of one class each: ``daytime`` (outside every peak
window) or the name of the peak window it falls in.

Peak windows are local wall-clock times of ``peak_windows`` in the config, judged by the
same function as the exporter's ``llm_exporter_peak_window`` gauge, so the report splits a
period where the rules' peak gate does. Windows are whole minutes, so a class can change
only on a minute boundary: walking the minutes finds every edge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.config.models import PeakWindowsConfig
from exporter.runtime.peak import active_windows

#: The class of time outside every peak window.
DAYTIME = "daytime"
#: The longest period: 31 days of minutes is a cheap walk, and its queries stay bounded.
MAX_PERIOD = 31 * 86400.0
#: A segment shorter than this holds at most one scrape: no increase, no rate.
MIN_SEGMENT = 1.0


@dataclass(frozen=True)
class Segment:
    cls: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def range_at(self) -> str:
        """``[<length>] @ <end>``: a PromQL range selector's suffix covering the segment."""
        return f"[{round(self.seconds * 1000)}ms] @ {self.end:.3f}"


def classes(cfg: PeakWindowsConfig) -> list[str]:
    return [DAYTIME, *cfg.windows]


def class_at(cfg: PeakWindowsConfig, unix_time: float) -> str:
    active = active_windows(cfg, unix_time)
    return next((name for name, on in active.items() if on), DAYTIME)


def segments(cfg: PeakWindowsConfig, start: float, end: float) -> list[Segment]:
    """Consecutive segments covering ``start``..``end``, each of one class; segments too
    short to hold a rate are left out."""
    out: list[Segment] = []
    current, since = class_at(cfg, start), start
    minute = (math.floor(start / 60) + 1) * 60.0
    while minute < end:
        cls = class_at(cfg, minute)
        if cls != current:
            out.append(Segment(current, since, minute))
            current, since = cls, minute
        minute += 60.0
    out.append(Segment(current, since, end))
    return [s for s in out if s.seconds >= MIN_SEGMENT]
