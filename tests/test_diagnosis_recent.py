"""The window and its last seconds as one answer (exporter/diagnosis/recent.py): a fixed
fault clears once the probes feel nothing over the short window, while what the short window
still names stays."""

from __future__ import annotations

from dataclasses import replace

from exporter.config.load import parse_config
from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.recent import combine
from exporter.diagnosis.text import render
from tests.support.observations import all_probes, healthy, with_engine, with_path

#: A slow prefill every probe feels, over the window.
FAULT = all_probes(with_engine(healthy(), ttft_p95=2.0, prefill_seconds=600.0), ttft_p95=2.6)


def test_felt_verdicts_clear_once_the_short_window_is_clean() -> None:
    window = diagnose(FAULT)
    assert window.status == "failing" and window.verdicts[0].symptoms, render(window)
    now = diagnose(replace(healthy(), window=30.0))
    shown = combine(window, now)
    assert (shown.status, shown.verdicts, shown.window) == ("healthy", (), "30s"), render(shown)


def test_what_the_short_window_still_names_stays_while_nobody_feels_it() -> None:
    # Loss on mobile over the window beside the cleared slow prefill: the mobile path still
    # loses packets now, though no probe feels it; the prefill is over.
    window = diagnose(with_path(FAULT, "mobile", lost=14))
    now = diagnose(with_path(replace(healthy(), window=30.0), "mobile", lost=3, sent=40))
    shown = combine(window, now)
    assert shown.status == "degraded", render(shown)
    assert [(v.layer, v.cause) for v in shown.verdicts] == [("network", "packet_loss")]
    assert shown.verdicts[0].evidence[0].window == "10m"  # the number's own window
    # Once the short window's packets arrive, the loss is over too.
    assert combine(window, diagnose(replace(healthy(), window=30.0))).status == "healthy"


def test_the_window_answers_while_the_short_window_feels_or_cannot_judge() -> None:
    window = diagnose(FAULT)
    still = diagnose(replace(FAULT, window=30.0))
    assert combine(window, still) is window
    too_few = diagnose(replace(all_probes(healthy(), requests=1, outcomes={"ok": 1}),
                               window=30.0))
    assert combine(window, too_few) is window


def test_the_short_window_is_shorter_than_the_window_or_off() -> None:
    assert parse_config("").diagnosis.recent == 30.0
    assert parse_config("diagnosis: {window: 30s, interval: 2s}").diagnosis.recent is None
    assert parse_config("diagnosis: {short_window: 1m}").diagnosis.recent == 60.0
