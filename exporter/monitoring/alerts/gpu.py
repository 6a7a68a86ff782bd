"""GPU alerts: memory nearly full, clocks held down by a fault or heat, XID errors."""

from __future__ import annotations

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics.names import alternation
from exporter.monitoring.promql import (
    GPU_TEXT,
    VALUE_NUMBER,
    VALUE_PERCENT,
    lbl,
    num,
    pct,
)
from exporter.monitoring.rule import Alert


def gpu_alerts(config: Config) -> list[Alert]:
    memory = config.alerting.gpu_memory_ratio
    reasons, share = config.alerting.throttle_reasons, config.alerting.throttle_share
    events = metrics.GPU_CLOCK_EVENT.name
    xid = metrics.GPU_XID_ERRORS.name
    return [
        Alert(
            "LLMGPUMemoryNearFull",
            f"{metrics.GPU_MEMORY_USED.name} / {metrics.GPU_MEMORY_TOTAL.name} > {num(memory)}",
            "warning",
            "GPU memory is nearly full.",
            f"{GPU_TEXT} has {VALUE_PERCENT} of its memory in use (threshold {pct(memory)}).",
            "10m",
        ),
        Alert(
            "LLMGPUThrottled",
            f'avg_over_time({events}{{reason=~"{alternation(reasons)}"}}[10m])'
            f" > {num(share)}",
            "warning",
            "A GPU's clocks are held down by a slowdown or thermal event.",
            f"{GPU_TEXT} clocks were held down by {lbl('reason')} {VALUE_PERCENT} of the "
            f"last 10m (threshold {pct(share)}).",
            "5m",
        ),
        Alert(
            "LLMGPUXidError",
            # A series appears with its first XID at 1, which increase() cannot see (no
            # earlier sample): a series that did not exist 10m ago counts as new errors.
            f"increase({xid}[10m]) > 0\nor\n({xid} unless {xid} offset 10m)",
            "critical",
            "A GPU reported an XID error.",
            f"{GPU_TEXT} reported XID {lbl('xid')} ({VALUE_NUMBER} in the last 10m).",
        ),
    ]
