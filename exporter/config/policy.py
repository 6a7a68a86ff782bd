"""Policy sections of the config: how the generated alerts page (``alerting``, like the
mixin's ``_config``) and how the decision chain judges (``diagnosis``)."""

from __future__ import annotations

import datetime as dt
import math
from typing import Annotated, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from exporter.config.values import (
    Duration,
    HttpUrl,
    Name,
    PeakWindow,
    Ratio,
    Seconds,
    StrictModel,
    format_duration,
    require_unique,
)


class AlertingConfig(StrictModel):
    """Alerting policy: the thresholds, windows and receivers the generated rules, the
    Alertmanager template and the dashboards share (kubernetes-mixin's ``_config``)."""

    class BurnWindow(StrictModel):
        """A multiwindow burn-rate pair: alert while the error ratio over both windows is
        above ``factor`` times the error budget, for ``hold``."""

        long: Duration
        short: Duration
        factor: Annotated[float, Field(gt=0)]
        hold: Duration
        severity: Literal["critical", "warning", "info"] = "critical"

        @field_validator("long", "short")
        @classmethod
        def _whole_minutes(cls, value: float) -> float:
            # Both become range selectors and recorded names (ratio_rate1h): whole units.
            if value % 60:
                raise PydanticCustomError(
                    "duration", "expected whole minutes, got {v}", {"v": format_duration(value)}
                )
            return value

        @field_validator("hold")
        @classmethod
        def _whole_seconds(cls, value: float) -> float:
            if value % 1:
                raise PydanticCustomError(
                    "duration", "expected whole seconds, got {v}", {"v": format_duration(value)}
                )
            return value

        @model_validator(mode="after")
        def _short_under_long(self) -> AlertingConfig.BurnWindow:
            # The short window only confirms the long one is still burning (SRE workbook).
            if self.short >= self.long:
                raise PydanticCustomError(
                    "window", "short ({s}) must be shorter than long ({l})",
                    {"s": format_duration(self.short), "l": format_duration(self.long)},
                )
            return self

    class Receivers(StrictModel):
        """Alertmanager receiver of each severity. The info one gets no configs: info alerts
        are for dashboards only."""

        critical: Name = "pager"
        warning: Name = "tickets"
        info: Name = "blackhole"

    runbook_base_url: HttpUrl = (
        "https://github.com/llm-latency-exporter/llm-latency-exporter/blob/main/docs/runbooks.md"
    )
    # Evening P95 over the same day's off-peak baseline above this ratio pages as drift.
    peak_drift_ratio: Annotated[float, Field(gt=1)] = 1.5
    # The off-peak baseline is the true P95 (or loss) of the off-peak time inside this
    # window before now: 12h seen from the evening reaches back over the same day.
    baseline_window: Duration = 12 * 3600.0
    # A loss ratio of tiny numbers is noise: loss drift needs at least this much peak loss.
    peak_drift_min_loss_ratio: Ratio = 0.01
    # Engine time spent queued above this share is capacity-bound; prefill + decode above
    # 1 - this while engine latency is over the SLO is compute-bound.
    queue_share_ratio: Annotated[float, Field(gt=0, lt=1)] = 0.25
    kv_cache_usage_ratio: Ratio = 0.95
    # Per request, time in the engine's API server before it queues the request, or waiting
    # for its KV from a prefill instance (P/D), above this share of the TTFT SLO.
    frontend_share_ratio: Ratio = 0.5
    kv_transfer_share_ratio: Ratio = 0.5
    # One data-parallel rank far above its peers (engine/imbalance): its mean waiting queue
    # over the window at least imbalance_ratio times the mean of the model's other ranks'
    # and at least imbalance_min_waiting requests (2 against 1 is noise), or its mean
    # KV-cache usage at least imbalance_kv_gap (a ratio) above theirs.
    imbalance_ratio: Annotated[float, Field(gt=1)] = 2.0
    imbalance_min_waiting: Annotated[float, Field(gt=0)] = 5.0
    imbalance_kv_gap: Annotated[float, Field(gt=0, lt=1)] = 0.3
    gpu_memory_ratio: Ratio = 0.97
    # The share of the time at least one of the engine's tasks (in its cgroup, as the host
    # section names it) waited for a CPU, for memory (reclaim, swap-in, refaults) or for
    # IO: the kernel's PSI "some". Over it, the host slows the engine whatever its GPU does.
    host_cpu_pressure_ratio: Ratio = 0.3
    host_memory_pressure_ratio: Ratio = 0.1
    host_io_pressure_ratio: Ratio = 0.3
    # Real users' retransmissions (LLMClientsRetransmissionHigh, network/packet_loss of a
    # carrier) are judged over at least this many segments sent in the window: 2 of 10 is
    # one unlucky connection, not a carrier's loss.
    clients_min_segments: Annotated[int, Field(ge=1)] = 1000
    # A gap between tokens this long is a stall a user notices.
    stall_seconds: Duration = 2.0
    # Route classes best first; a target whose class moves down this list alerts.
    route_class_order: list[Name] = Field(
        default_factory=lambda: [
            "cn2_gia", "ctgnet", "cu_9929", "cmin2", "cn2_gt", "cmi", "cu_4837",
            "chinanet_163", "cmnet", "other",
        ]
    )
    # A class is degraded when it is worse than the best one taken within this span.
    route_lookback: Duration = 6 * 3600.0
    # Multiwindow multi-burn-rate pairs of the SRE workbook for a 30-day objective: 2% of
    # the budget in 1h, 5% in 6h. The first pair is the one the overview dashboard shows.
    burn_windows: list[AlertingConfig.BurnWindow] = Field(
        default_factory=lambda: [
            AlertingConfig.BurnWindow(long="1h", short="5m", factor=14.4, hold="2m"),
            AlertingConfig.BurnWindow(long="6h", short="30m", factor=6, hold="15m"),
        ],
        min_length=1,
    )
    # GPU clock-event reasons that mean a fault or cooling problem. power_cap is left out:
    # a GPU at full load sits on its power limit by design (docs/runbooks.md explains).
    throttle_reasons: list[str] = Field(
        default_factory=lambda: ["hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"],
        min_length=1,
    )
    # Share of the last 10 minutes a throttle reason must hold to alert: NVML flips per
    # sample, so one sample is no throttle.
    throttle_share: Ratio = 0.5
    # Warnings are held back in these local hours (peak_windows.timezone); pages are not.
    quiet_hours: PeakWindow | None = PeakWindow(start=dt.time(0), end=dt.time(8))
    receivers: AlertingConfig.Receivers = Receivers()
    # Gets what no severity route matches (an alert without a severity label).
    default_receiver: Name = "default"

    @field_validator("baseline_window")
    @classmethod
    def _whole_minutes(cls, value: float) -> float:
        # Prometheus range selectors take whole units; a baseline under an hour is no baseline.
        if value % 60 or not 3600 <= value <= 7 * 86400:
            raise PydanticCustomError(
                "duration", "expected whole minutes from 1h to 7d, got {v}",
                {"v": format_duration(value)},
            )
        return value

    @field_validator("route_class_order")
    @classmethod
    def _unique_classes(cls, value: list[str]) -> list[str]:
        require_unique(value, "route class")
        return value

    @field_validator("route_lookback")
    @classmethod
    def _lookback_minutes(cls, value: float) -> float:
        if value % 60:
            raise PydanticCustomError(
                "duration", "expected whole minutes, got {v}", {"v": format_duration(value)}
            )
        return value

    @field_validator("throttle_reasons")
    @classmethod
    def _known_reasons(cls, value: list[str]) -> list[str]:
        # The schema is the one list of reasons the exporter publishes; a reason outside it
        # would make the alert silently match nothing. Imported where used: this is the
        # config's one tie to the metric schema.
        from exporter.metrics import GPU_CLOCK_EVENT_REASONS

        unknown = [r for r in value if r not in GPU_CLOCK_EVENT_REASONS]
        if unknown:
            raise PydanticCustomError(
                "name", "unknown clock-event reason {v} (known: {known})",
                {"v": ", ".join(map(repr, unknown)), "known": ", ".join(GPU_CLOCK_EVENT_REASONS)},
            )
        require_unique(value, "throttle reason")
        return value

    @model_validator(mode="after")
    def _distinct_receivers(self) -> AlertingConfig:
        # Alertmanager refuses a config that defines one receiver name twice.
        require_unique([*self.receivers.model_dump().values(), self.default_receiver], "receiver")
        return self


class DiagnosisConfig(StrictModel):
    """The decision chain's windows and thresholds (docs/diagnosis.md). A threshold left
    unset is derived from ``slo`` (or ``alerting``), so one SLO drives alerts and verdicts."""

    # The chain reads this much of every layer; embedded windows keep ``history`` in memory.
    window: Duration = 600.0
    # The embedded source also reads this much, the last of the window: once the probes
    # feel nothing over it, what the window blamed for their symptoms is over and clears
    # (as a multi-window burn alert resets on its short window). Not under ``window``: off.
    short_window: Duration = 30.0
    interval: Duration = 5.0
    history: Duration = 6 * 3600.0
    # The Prometheus source's window ends this far before now: a store fed by remote write
    # receives each series on its own, so its newest seconds can hold a scrape's packets
    # sent without the same scrape's packets received (loss that never happened). Prometheus'
    # rule_query_offset, for the same reason. Unset: none (a Prometheus that scrapes the
    # exporter has each scrape's series at once).
    query_offset: Duration | None = None
    # A new primary verdict is shown, exported and alerted on once this many evaluations in
    # a row concluded it (exporter/diagnosis/stability.py); 1 shows every evaluation.
    confirm: Annotated[int, Field(ge=1, le=100)] = 2
    # A verdict needs at least this many finished probe requests (or packets) in the window.
    min_requests: Annotated[int, Field(ge=1)] = 3
    # A baseline (an off-peak statistic from before the window) needs this much off-peak
    # time behind it: a few minutes of data are not what "usual" looks like.
    min_baseline: Duration = 1800.0
    # A statistic this many times its off-peak baseline is drifting, SLO met or not.
    drift_ratio: Annotated[float, Field(gt=1)] = 1.5
    failure_ratio: Ratio | None = None  # default slo.probe_failure_ratio
    loss_ratio: Ratio | None = None  # default slo.loss_ratio
    jitter_seconds: Seconds | None = None  # default slo.jitter_seconds
    # Round trips a request needs before its first token (TCP, TLS, the request itself);
    # RTT x these above this share of the TTFT SLO is a network floor no engine can beat.
    rtt_round_trips: Annotated[int, Field(ge=1, le=10)] = 3
    rtt_budget_share: Ratio = 0.5
    # DNS + connect + TLS above this share of TTFT: connection setup dominates.
    connection_setup_share: Ratio = 0.5
    # Client TTFT minus the linked engine's TTFT above this share of the client TTFT is the
    # network and gateway's part.
    client_network_share: Ratio = 0.5
    queue_share: Ratio | None = None  # default alerting.queue_share_ratio
    kv_cache_usage: Ratio | None = None  # default alerting.kv_cache_usage_ratio
    gpu_memory_ratio: Ratio | None = None  # default alerting.gpu_memory_ratio
    # A slow engine on a GPU busy less than this: the bottleneck is elsewhere (CPU, I/O).
    gpu_underutilized: Ratio = 0.6
    dram_bandwidth: Ratio = 0.9
    # Prompt tokens per request, or request rate, this many times the baseline.
    prompt_growth: Annotated[float, Field(gt=1)] = 1.5
    request_rate_growth: Annotated[float, Field(gt=1)] = 1.5
    # The prompt alone, at the engine's prefill throughput measured in the window, over this
    # share of the TTFT SLO: the prompts are too long for the SLO, baseline or none.
    prompt_budget_share: Ratio = 0.5
    # Prompts shorter than this are never long on their own (without growth over a
    # baseline): a slow engine makes any prompt cost the budget, and a chat turn of a few
    # hundred tokens is not what an SRE trims.
    long_prompt_tokens: Annotated[int, Field(ge=1)] = 1024
    # The engine's first token, beyond queue and prefill: time in its API server before the
    # engine queues a request (tokenizing, templating), or a KV handover from a prefill
    # instance, per request over this share of the TTFT SLO: that part is the cause.
    frontend_share: Ratio | None = None  # default alerting.frontend_share_ratio
    kv_transfer_share: Ratio | None = None  # default alerting.kv_transfer_share_ratio
    # A prefix cache that hit at least this share of prompt tokens off-peak and now hits
    # drift_ratio times less, while prefill per request grew: the prompts stopped sharing.
    prefix_hit_min: Ratio = 0.2
    # Speculative drafts accepted at least this share of the time off-peak and now
    # drift_ratio times less: under it, drafts were mostly rejected already (sampled
    # traffic), so a fall to none says nothing.
    spec_acceptance_min: Ratio = 0.2

    @model_validator(mode="after")
    def _window_in_history(self) -> DiagnosisConfig:
        if not self.interval < self.window <= self.history:
            raise PydanticCustomError(
                "window",
                "expected interval < window <= history, got {i}, {w}, {h}",
                {"i": format_duration(self.interval), "w": format_duration(self.window),
                 "h": format_duration(self.history)},
            )
        # Checked when set: a default longer than a short history only means no baselines.
        if "min_baseline" in self.model_fields_set and \
                not self.interval < self.min_baseline <= self.history:
            raise PydanticCustomError(
                "window",
                "expected interval < min_baseline <= history, got {i}, {b}, {h}",
                {"i": format_duration(self.interval), "b": format_duration(self.min_baseline),
                 "h": format_duration(self.history)},
            )
        return self

    @property
    def recent(self) -> float | None:
        """The short window, where it is one: shorter than the window, longer than an
        evaluation."""
        return self.short_window if self.interval < self.short_window < self.window else None

    @property
    def baseline_step(self) -> float:
        """Resolution of the baselines: the embedded source's coarse snapshots and the
        Prometheus source's coverage steps. A minute, finer where ``min_baseline`` is short
        (ten steps in the shortest baseline), never finer than ``interval``; whole seconds,
        as PromQL subquery steps are."""
        return float(max(math.ceil(self.interval), min(60, math.ceil(self.min_baseline / 10))))
