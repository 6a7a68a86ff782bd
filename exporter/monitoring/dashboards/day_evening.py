"""Day vs evening: peak windows against off-peak and the off-peak baseline, and now
against a week (or a day) ago."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db

from exporter.config.models import Config
from exporter.metrics import names
from exporter.metrics.names import prom_duration
from exporter.monitoring.dashboards.kit import (
    COMPARE,
    Panel,
    Section,
    build_dashboard,
    compare_variable,
    sel,
    ts,
)
from exporter.monitoring.promql import window_text


def day_evening(config: Config) -> db.Dashboard:
    pw = config.peak_windows
    ps = sel("instance", "probe", "carrier")
    cs = sel("instance", "carrier")
    span = prom_duration(config.alerting.baseline_window)
    windows = "; ".join(window_text(n, w, pw.timezone) for n, w in pw.windows.items())
    peak_note = f"Only while a peak window is on: {windows}."

    def off_note(what: str) -> str:
        return (
            f"Only while no peak window is on. The dashed baseline is the true {what} of the "
            f"off-peak time in the last {span}, the one peak-hour drift alerts compare with."
        )

    sections: list[Section] = []
    if pw.windows:
        pairs: list[Panel] = []
        for series, what, matchers, legend in (
            (names.PROBE_TTFT_PEAK, "P95 TTFT", ps, "{{probe}}"),
            (names.PROBE_TPOT_PEAK, "P95 TPOT", ps, "{{probe}}"),
            (names.PATH_RTT_PEAK, "P95 RTT", cs, "{{carrier}}/{{target}}"),
            (names.CLIENTS_RTT_PEAK, "Real users' P95 RTT", cs, "{{carrier}}"),
        ):
            base = f"{legend} baseline"
            pairs += [
                ts(f"{what}: peak windows", peak_note, "s",
                   [(f"{series.peak}{matchers}",
                     f"{legend} {{{{window}}}}")]),
                ts(f"{what}: off-peak", off_note("P95"), "s",
                   [(f"{series.offpeak}{matchers}", legend),
                    (f"{series.baseline}{matchers}", base)],
                   lines=(base,)),
            ]
        t = "{{carrier}}/{{target}}"
        pairs += [
            ts("Packet loss: peak windows", peak_note, "percentunit",
               [(f"{names.PATH_LOSS_PEAK}{cs}", f"{t} {{{{window}}}}")]),
            ts("Packet loss: off-peak", off_note("loss"), "percentunit",
               [(f"{names.PATH_LOSS_OFFPEAK}{cs}", t),
                (f"{names.PATH_LOSS_BASELINE}{cs}", f"{t} baseline")],
               lines=(f"{t} baseline",)),
        ]
        for who, whose, peak, offpeak in (
            ("Real users", "to the carrier's real users (sock_diag)",
             names.CLIENTS_RETRANSMISSION_PEAK, names.CLIENTS_RETRANSMISSION_OFFPEAK),
            ("Probe streams", "by the carrier's probes on their own connections (TCP_INFO)",
             names.PROBE_STREAM_RETRANSMISSION_PEAK, names.PROBE_STREAM_RETRANSMISSION_OFFPEAK),
        ):
            pairs += [
                ts(f"{who}' retransmission: peak windows", peak_note, "percentunit",
                   [(f"{peak}{cs}", "{{carrier}} {{window}}")]),
                ts(f"{who}' retransmission: off-peak",
                   f"Only while no peak window is on: segments retransmitted over sent {whose}.",
                   "percentunit", [(f"{offpeak}{cs}", "{{carrier}}")]),
            ]
        sections.append(Section("Peak windows vs off-peak, side by side", pairs))
    ago = f"${COMPARE} ago"
    offset = f"offset ${COMPARE}"
    week = [
        (names.PROBE_TTFT.p95, ps, "{{probe}}", "P95 TTFT", "s"),
        (names.PATH_RTT.p95, cs, "{{carrier}}/{{target}}", "P95 RTT", "s"),
        (names.PATH_LOSS, cs, "{{carrier}}/{{target}}", "Packet loss", "percentunit"),
        (names.CLIENTS_RETRANSMISSION, cs, "{{carrier}}", "Real users' retransmission",
         "percentunit"),
        (names.PROBE_STREAM_RETRANSMISSION, cs, "{{carrier}}", "Probe stream retransmission",
         "percentunit"),
    ]
    sections.append(Section("Now against a week (or a day) ago", [
        ts(f"{what}: now vs ${COMPARE} ago",
           f"{what} now (solid) and the same time ${COMPARE} ago (dashed), from the "
           "recorded series.", unit,
           [(f"{name}{matchers}", legend), (f"{name}{matchers} {offset}", f"{legend} {ago}")],
           span=8, lines=(f"{legend} {ago}",))
        for name, matchers, legend, what, unit in week
    ]))
    return build_dashboard(
        "llm-day-evening", "LLM latency: day vs evening",
        f"Peak windows ({pw.timezone}) against off-peak and against last week.",
        ("instance", "probe", "carrier"), sections, [compare_variable()],
    )
