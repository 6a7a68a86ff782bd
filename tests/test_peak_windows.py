"""llm_exporter_peak_window flips at the right instants, under a controlled clock."""

from __future__ import annotations

import datetime as dt

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.config.load import parse_config
from exporter.runtime.peak import PeakWindowCollector
from tests.support.samples import find

UTC = dt.UTC


def ts(year: int, month: int, day: int, hour: int, minute: int, second: int) -> float:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


def gauge(config_text: str, now: float) -> dict[str, float]:
    cfg = parse_config(config_text).peak_windows
    reg = CollectorRegistry()
    reg.register(PeakWindowCollector(lambda: cfg, clock=lambda: now))
    return {
        labels["window"]: v
        for labels, v in find(generate_latest(reg).decode(), "llm_exporter_peak_window")
    }


SHANGHAI = "peak_windows: {timezone: Asia/Shanghai}\n"  # default evening 20:00-23:00


@pytest.mark.parametrize(
    ("instant", "expected"),
    [
        (ts(2026, 11, 30, 11, 59, 59), 0.0),  # 19:59:59 in Shanghai (UTC+8, no DST)
        (ts(2026, 11, 30, 12, 0, 0), 1.0),  # 20:00:00
        (ts(2026, 11, 30, 14, 59, 59), 1.0),  # 22:59:59
        (ts(2026, 11, 30, 15, 0, 0), 0.0),  # 23:00:00: end is exclusive
    ],
)
def test_default_evening_in_shanghai(instant: float, expected: float) -> None:
    assert gauge(SHANGHAI, instant) == {"evening": expected}


BERLIN = (
    "peak_windows:\n  timezone: Europe/Berlin\n"
    "  windows: {evening: {start: '20:00', end: '23:00'}}\n"
)


@pytest.mark.parametrize(
    ("instant", "expected"),
    [
        # 2026-03-28: CET (UTC+1): 20:00 local is 19:00 UTC.
        (ts(2026, 3, 28, 18, 59, 59), 0.0),
        (ts(2026, 3, 28, 19, 0, 0), 1.0),
        # 2026-03-29: clocks went forward at 01:00 UTC; CEST (UTC+2): 20:00 local is 18:00 UTC.
        (ts(2026, 3, 29, 17, 59, 59), 0.0),
        (ts(2026, 3, 29, 18, 0, 0), 1.0),
        (ts(2026, 3, 29, 20, 59, 59), 1.0),
        (ts(2026, 3, 29, 21, 0, 0), 0.0),
        # 2026-10-25: back to CET: 20:00 local is 19:00 UTC again.
        (ts(2026, 10, 25, 18, 59, 59), 0.0),
        (ts(2026, 10, 25, 19, 0, 0), 1.0),
        (ts(2026, 10, 25, 22, 0, 0), 0.0),
    ],
)
def test_dst_observing_timezone(instant: float, expected: float) -> None:
    assert gauge(BERLIN, instant) == {"evening": expected}


NIGHT = (
    "peak_windows:\n  timezone: Asia/Shanghai\n"
    "  windows:\n    night: {start: '22:00', end: '02:00'}\n    evening: {start: '20:00', end: '22:00'}\n"
)


@pytest.mark.parametrize(
    ("instant", "expected"),
    [
        (ts(2026, 11, 30, 13, 59, 59), {"night": 0.0, "evening": 1.0}),  # 21:59:59
        (ts(2026, 11, 30, 14, 0, 0), {"night": 1.0, "evening": 0.0}),  # 22:00
        (ts(2026, 11, 30, 16, 0, 0), {"night": 1.0, "evening": 0.0}),  # 00:00 next day
        (ts(2026, 11, 30, 17, 59, 59), {"night": 1.0, "evening": 0.0}),  # 01:59:59
        (ts(2026, 11, 30, 18, 0, 0), {"night": 0.0, "evening": 0.0}),  # 02:00
    ],
)
def test_window_crossing_midnight(instant: float, expected: dict[str, float]) -> None:
    assert gauge(NIGHT, instant) == expected


def test_window_starting_in_a_dst_gap() -> None:
    # America/New_York 2026-03-08: 02:00 EST jumps to 03:00 EDT at 07:00 UTC, so 02:30 never
    # happens on the wall clock; the window opens when the wall clock first passes 02:30.
    text = (
        "peak_windows:\n  timezone: America/New_York\n"
        "  windows: {w: {start: '02:30', end: '03:30'}}\n"
    )
    assert gauge(text, ts(2026, 3, 8, 6, 59, 59)) == {"w": 0.0}  # 01:59:59 EST
    assert gauge(text, ts(2026, 3, 8, 7, 0, 0)) == {"w": 1.0}  # 03:00:00 EDT
    assert gauge(text, ts(2026, 3, 8, 7, 30, 0)) == {"w": 0.0}  # 03:30 EDT
