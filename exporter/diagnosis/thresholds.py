"""The decision chain's thresholds, resolved once from a ``Config``.

``diagnosis:`` leaves a threshold unset when it should follow ``slo:`` or ``alerting:``, so one
SLO drives the alerts and the verdicts; this module is where "unset" becomes a number. The
chain itself never sees a ``Config``: a flat, frozen record keeps it pure and cheap to test.
Per-probe SLO overrides are not here: they arrive on ``ProbeWindow.slo_ttft`` / ``slo_tpot``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the chain takes a Config only here, and only its values
    from exporter.config.models import Config


@dataclass(frozen=True)
class Thresholds:
    """Every number the chain compares against. Defaults equal those of an empty config."""

    window: float = 600.0
    min_requests: int = 3
    drift_ratio: float = 1.5
    # slo: (the fleet-wide SLO; a probe's own SLO wins where the probe carries one)
    slo_ttft: float = 1.0
    slo_tpot: float = 0.1
    failure_ratio: float = 0.05
    loss_ratio: float = 0.02
    jitter_seconds: float = 0.03
    # network
    rtt_round_trips: int = 3
    rtt_budget_share: float = 0.5
    connection_setup_share: float = 0.5
    client_network_share: float = 0.5
    peak_min_loss: float = 0.01
    #: Segments sent to a carrier's real users in the window under which their
    #: retransmission ratio is not judged.
    clients_min_segments: int = 1000
    route_class_order: tuple[str, ...] = (
        "cn2_gia", "ctgnet", "cu_9929", "cmin2", "cn2_gt", "cmi", "cu_4837",
        "chinanet_163", "cmnet", "other",
    )
    # engine
    queue_share: float = 0.25
    kv_cache_usage: float = 0.95
    stall_seconds: float = 2.0
    imbalance_ratio: float = 2.0
    imbalance_min_waiting: float = 5.0
    imbalance_kv_gap: float = 0.3
    # gpu
    gpu_memory_ratio: float = 0.97
    throttle_reasons: tuple[str, ...] = ("hw_slowdown", "sw_thermal", "hw_thermal",
                                         "hw_power_brake")
    gpu_underutilized: float = 0.6
    dram_bandwidth: float = 0.9
    # host: PSI "some" shares of the window, per resource
    host_cpu_pressure: float = 0.3
    host_memory_pressure: float = 0.1
    host_io_pressure: float = 0.3
    # application
    prompt_growth: float = 1.5
    request_rate_growth: float = 1.5
    prompt_budget_share: float = 0.5
    long_prompt_tokens: int = 1024
    # engine: the budget beyond queue and prefill
    frontend_share: float = 0.5
    kv_transfer_share: float = 0.5
    prefix_hit_min: float = 0.2
    spec_acceptance_min: float = 0.2

    def route_rank(self, route_class: str) -> int:
        """Position in the configured order, best first; unknown classes rank last."""
        try:
            return self.route_class_order.index(route_class)
        except ValueError:
            return len(self.route_class_order)


def resolve(config: Config) -> Thresholds:
    """The thresholds of ``config``: ``diagnosis:`` values where set, else the ``slo:`` and
    ``alerting:`` keys the generated alerts compare against (each cause's row in
    ``causes.py`` names its keys; tests/test_findings.py moves each and sees both move)."""
    d, al, slo = config.diagnosis, config.alerting, config.slo

    def pick(value: float | None, default: float) -> float:
        return default if value is None else value

    return Thresholds(
        window=d.window,
        min_requests=d.min_requests,
        drift_ratio=d.drift_ratio,
        slo_ttft=slo.ttft_p95_seconds,
        slo_tpot=slo.tpot_p95_seconds,
        failure_ratio=pick(d.failure_ratio, slo.probe_failure_ratio),
        loss_ratio=pick(d.loss_ratio, slo.loss_ratio),
        jitter_seconds=pick(d.jitter_seconds, slo.jitter_seconds),
        rtt_round_trips=d.rtt_round_trips,
        rtt_budget_share=d.rtt_budget_share,
        connection_setup_share=d.connection_setup_share,
        client_network_share=d.client_network_share,
        peak_min_loss=al.peak_drift_min_loss_ratio,
        clients_min_segments=al.clients_min_segments,
        route_class_order=tuple(al.route_class_order),
        queue_share=pick(d.queue_share, al.queue_share_ratio),
        kv_cache_usage=pick(d.kv_cache_usage, al.kv_cache_usage_ratio),
        stall_seconds=al.stall_seconds,
        imbalance_ratio=al.imbalance_ratio,
        imbalance_min_waiting=al.imbalance_min_waiting,
        imbalance_kv_gap=al.imbalance_kv_gap,
        gpu_memory_ratio=pick(d.gpu_memory_ratio, al.gpu_memory_ratio),
        throttle_reasons=tuple(al.throttle_reasons),
        gpu_underutilized=d.gpu_underutilized,
        dram_bandwidth=d.dram_bandwidth,
        host_cpu_pressure=al.host_cpu_pressure_ratio,
        host_memory_pressure=al.host_memory_pressure_ratio,
        host_io_pressure=al.host_io_pressure_ratio,
        prompt_growth=d.prompt_growth,
        request_rate_growth=d.request_rate_growth,
        prompt_budget_share=d.prompt_budget_share,
        long_prompt_tokens=d.long_prompt_tokens,
        frontend_share=pick(d.frontend_share, al.frontend_share_ratio),
        kv_transfer_share=pick(d.kv_transfer_share, al.kv_transfer_share_ratio),
        prefix_hit_min=d.prefix_hit_min,
        spec_acceptance_min=d.spec_acceptance_min,
    )
