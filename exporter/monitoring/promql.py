"""PromQL fragments, and the text helpers of alert annotations and panel descriptions."""

from __future__ import annotations

import textwrap

from exporter import metrics
from exporter.config.values import PeakWindow
from exporter.metrics import Family
from exporter.metrics.names import RATE, SOURCE, Level

#: Labels the peak-window gauge shares with every other series of the same exporter.
PEAK_JOIN = ", ".join(SOURCE)

# --- numbers and durations as PromQL and people read them ---------------------------------


def num(value: float) -> str:
    """A threshold as PromQL reads it: 14.4 * (1 - 0.99) is 0.144, not 0.14400000000000013."""
    return f"{round(value, 9):g}"




def human_seconds(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def pct(ratio: float) -> str:
    return f"{round(ratio * 100, 6):g}%"




def window_text(name: str, window: PeakWindow, timezone: str) -> str:
    return f"{name} window ({window.start:%H:%M}-{window.end:%H:%M} {timezone})"


# --- alert annotation templates -----------------------------------------------------------


def lbl(name: str) -> str:
    return "{{ $labels." + name + " }}"


VALUE_SECONDS = "{{ $value | humanizeDuration }}"
VALUE_PERCENT = "{{ $value | humanizePercentage }}"
VALUE_TIMES = '{{ printf "%.2f" $value }}x'
VALUE_NUMBER = '{{ printf "%.0f" $value }}'
PROBE_TEXT = f"Probe {lbl('probe')} ({lbl('target')}, profile {lbl('profile')})"
MODEL_TEXT = f"Engine {lbl('target')} model {lbl('model')}"
PATH_TEXT = f"Carrier {lbl('carrier')} path to {lbl('target')} ({lbl('region')})"
GPU_TEXT = f"GPU {lbl('gpu')} ({lbl('name')}) on {lbl('instance')}"


# --- expressions ---------------------------------------------------------------------------


def hist_quantile(q: float, level: Level, family: Family, window: str = RATE) -> str:
    return (
        f"histogram_quantile({q:g}, sum by (le, {level.by}) "
        f"(rate({family.name}_bucket[{window}])))"
    )


def rate_sum(level: Level, series: str, window: str = RATE) -> str:
    return f"sum by ({level.by}) (rate({series}[{window}]))"


def paren(*lines: str) -> str:
    """Lines wrapped in parentheses, indented: long rules stay readable in the YAML."""
    return "(\n" + textwrap.indent("\n".join(lines), "  ") + "\n)"


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n/\n{denominator}"


def loss(received: str, sent: str) -> str:
    return "1 - " + paren(ratio(received, sent))


def segments_share(level: Level, part: metrics.TcpSegments, whole: metrics.TcpSegments,
                   match: str = "") -> str:
    """The probes' TCP segments of one kind over another (TCP_INFO), summed to ``level``:
    what LLMProbeStreamPacketLoss and the per-carrier stream series compare with the loss
    SLO. ``match`` adds label matchers."""
    family = metrics.PROBE_TCP_SEGMENTS
    label, extra = family.labels[-1], f", {match}" if match else ""

    def kind(k: metrics.TcpSegments) -> str:
        return rate_sum(level, f'{family.name}{{{label}="{k.value}"{extra}}}')

    return ratio(kind(part), kind(whole))


# Day-vs-evening rules are gated on the exporter's peak-window gauge: the exporter knows
# the local timezone and Prometheus does not, so no rule does UTC hour arithmetic.


def peak_gate(window: str) -> str:
    name = metrics.EXPORTER_PEAK_WINDOW.name
    return f'and on ({PEAK_JOIN}) ({name}{{window="{window}"}} == 1)'


def offpeak_gate() -> str:
    name = metrics.EXPORTER_PEAK_WINDOW.name
    return f"and on ({PEAK_JOIN}) (max by ({PEAK_JOIN}) ({name}) == 0)"
