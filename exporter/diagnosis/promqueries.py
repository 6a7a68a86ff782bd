"""The PromQL the Prometheus source runs: one instant query per statistic, each aggregated
to the key of the window it fills (probe, path, route, engine, GPU), all evaluated at the
end of the diagnosis window.

Names come from :mod:`exporter.metrics` (raw families) and :mod:`exporter.monitoring.names`
(recorded series); none is typed here. A recorded ``*_rate5m`` series is read when the
diagnosis window is the recording window, since then it is the same statistic and already
computed; for any other window the quantile is computed the way the rule computes it, over
the diagnosis window, because a 5m P95 read at the end of a 10m window would ignore half of
it. Baselines are always recorded series where the rules record one.

Every key keeps the fleet's external labels (``site``, ``vantage``, docs/scaling.md) and
drops ``job`` / ``instance``, so one probe name seen from two vantage points stays two
windows while two replicas of a scrape job do not split one.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import Family, ProbeOutcome
from exporter.monitoring import names
from exporter.monitoring.names import FLEET, MODEL, RATE, SCRAPE, SOURCE, Quantiles
from exporter.monitoring.promql import offpeak_gate, prom_duration

PROBE_KEY = (*metrics.PROBE_LABELS, *FLEET)
PATH_KEY = (*metrics.PATH_LABELS, *FLEET)
ROUTE_KEY = (*metrics.ROUTE_LABELS, *FLEET)
ENGINE_KEY = (*metrics.ENGINE_TARGET_LABELS, *FLEET)
# GPU indexes repeat on every server, so the instance stays in the key; uuid tells GPUs
# apart when two servers report the same index.
GPU_KEY = ("instance", *metrics.GPU_LABELS, *FLEET)
CHECK_KEY = ("check", *FLEET)
#: Connection-setup phases of llm_probe_phase_seconds (exporter/probing/timing.py) on a new
#: connection: what a request pays before it can be written.
SETUP_PHASES = ("dns", "connect", "tls")
NEW_CONNECTION = "new"


def by(labels: tuple[str, ...]) -> str:
    return ", ".join(labels)


@dataclass(frozen=True)
class Window:
    """The window as PromQL writes it, and the spans the baselines reach back over."""

    range: str  # "10m"
    baseline: str  # alerting.baseline_window
    history: str  # diagnosis.history: the batch limit seen in practice
    lookback: str  # alerting.route_lookback
    step: str  # diagnosis.baseline_step: how finely a baseline's coverage is counted

    @classmethod
    def of(cls, seconds: float, config: Config) -> Window:
        return cls(prom_duration(seconds), prom_duration(config.alerting.baseline_window),
                   prom_duration(config.diagnosis.history),
                   prom_duration(config.alerting.route_lookback),
                   prom_duration(config.diagnosis.baseline_step))


def increase(key: tuple[str, ...], series: str, window: str, offset: str = "") -> str:
    shift = f" offset {offset}" if offset else ""
    return f"sum by ({by(key)}) (increase({series}[{window}]{shift}))"


def coverage(key: tuple[str, ...], series: str, w: Window, before: bool = True) -> str:
    """Steps of ``w.step`` in the baseline window in which ``series`` has data: how much
    history a baseline stands on (a new deployment's 12h baseline window holds minutes, and
    a rate over 12h of them is no rate). The window before this one (``before``) for the
    baselines computed here; up to now for the recorded ones, whose rules include it."""
    shift = f" offset {w.range}" if before else ""
    return (f"count_over_time((group by ({by(key)}) ({series}))"
            f"[{w.baseline}:{w.step}]{shift})")


def quantile(q: float, family: Family, level: tuple[str, ...], key: tuple[str, ...],
             w: Window, recorded: Quantiles | None = None, matcher: str = "") -> str:
    """The ``q`` quantile of ``family`` at ``level`` over the window, the worst of the
    level's series per key (the worst model of an engine, for instance)."""
    if recorded is not None and w.range == RATE and not matcher:
        name = dict(recorded.by_quantile())[q]
        return f"max by ({by(key)}) ({name})"
    inner = (f"histogram_quantile({q:g}, sum by (le, {by(level)}) "
             f"(rate({family.name}_bucket{matcher}[{w.range}])))")
    return f"max by ({by(key)}) ({inner})"


def probe_queries(w: Window) -> dict[str, str]:
    k = PROBE_KEY
    requests = metrics.PROBE_REQUESTS.name
    ok = f'{requests}{{outcome="{ProbeOutcome.OK.value}"}}'
    prompt = metrics.PROBE_PROMPT_TOKENS.name
    phases = "|".join(SETUP_PHASES)
    setup = (f"histogram_quantile(0.95, sum by (le, phase, {by(k)}) "
             f"(rate({metrics.PROBE_PHASE.name}_bucket"
             f'{{connection="{NEW_CONNECTION}", phase=~"{phases}"}}[{w.range}])))')
    return {
        "probe_outcomes": f"sum by (outcome, {by(k)}) (increase({requests}[{w.range}]))",
        "probe_ttft_p95": quantile(0.95, metrics.PROBE_TTFT, k, k, w, names.PROBE_TTFT),
        "probe_tpot_p95": quantile(0.95, metrics.PROBE_TPOT, k, k, w, names.PROBE_TPOT),
        "probe_itl_p99": quantile(0.99, metrics.PROBE_ITL, k, k, w),
        "probe_stall_buckets": f"sum by (le, {by(k)}) "
                               f"(increase({metrics.PROBE_STALL.name}_bucket[{w.range}]))",
        # The sum of the phases' P95s: an upper bound of the P95 of their sum, which no
        # histogram records; setup dominating TTFT shows either way.
        "probe_connect_p95": f"sum by ({by(k)}) ({setup})",
        "probe_prompt_tokens": increase(k, prompt, w.range),
        # The baseline window before this one: what prompts looked like until now.
        "probe_prompt_tokens_before": increase(k, prompt, w.baseline, w.range),
        "probe_ok_before": increase(k, ok, w.baseline, w.range),
        "probe_baseline_steps": coverage(k, requests, w, before=False),
        "probe_ttft_baseline": f"max by ({by(k)}) ({names.PROBE_TTFT_PEAK.baseline})",
        "probe_tpot_baseline": f"max by ({by(k)}) ({names.PROBE_TPOT_PEAK.baseline})",
    }


def _offpeak_sum(key: tuple[str, ...], series: str, w: Window) -> str:
    """The off-peak part of ``series``' rate summed over the baseline window: proportional
    to the off-peak increase, as the recorded off-peak baselines are built."""
    gated = f"rate({series}[{RATE}]) {offpeak_gate()}"
    # The server's own evaluation interval as the step, as the recorded baselines have.
    return f"sum by ({by(key)}) (sum_over_time(({gated})[{w.baseline}:]))"


def path_queries(w: Window) -> dict[str, str]:
    k, r = PATH_KEY, ROUTE_KEY
    rtt = metrics.PATH_RTT.name
    peak = metrics.EXPORTER_PEAK_WINDOW.name
    instance = by(SOURCE)
    sent = metrics.PATH_PACKETS_SENT.name
    return {
        "path_sent": increase(k, sent, w.range),
        "path_received": increase(k, metrics.PATH_PACKETS_RECEIVED.name, w.range),
        "path_rtt_mean": f"{increase(k, f'{rtt}_sum', w.range)}\n/\n"
                         f"{increase(k, f'{rtt}_count', w.range)}",
        "path_jitter": f"avg by ({by(k)}) (avg_over_time({metrics.PATH_JITTER.name}"
                       f'{{method="{metrics.PATH_JITTER_RFC3550}"}}[{w.range}]))',
        "path_baseline_steps": coverage(k, sent, w, before=False),
        "path_loss_baseline": f"max by ({by(k)}) ({names.PATH_LOSS_BASELINE})",
        # No rule records an off-peak mean RTT (only its P95): computed the same way.
        "path_rtt_baseline": f"{_offpeak_sum(k, f'{rtt}_sum', w)}\n/\n"
                             f"{_offpeak_sum(k, f'{rtt}_count', w)}",
        # Each path takes the peak-window state of the exporter that measures it.
        "path_in_peak": f"max by ({by(k)}) (group by ({instance}, {by(k)}) ({sent})\n"
                        f"* on ({instance}) group_left\nmax by ({instance}) ({peak}))",
        "route_class": f"max by (route_class, {by(r)}) ({metrics.PATH_ROUTE_INFO.name})",
        "route_best_rank": f"min by ({by(r)}) "
                           f"(min_over_time({names.ROUTE_RANK}[{w.lookback}]))",
        "route_changes": increase(r, metrics.PATH_ROUTE_CHANGES.name, w.range),
    }


def engine_queries(w: Window) -> dict[str, str]:
    k = ENGINE_KEY
    model = tuple(x for x in MODEL.labels if x not in SCRAPE)

    def inc(family: Family, suffix: str = "", before: bool = False) -> str:
        if before:
            return increase(k, f"{family.name}{suffix}", w.baseline, w.range)
        return increase(k, f"{family.name}{suffix}", w.range)

    def per_target(fn: str, family: Family, agg: str = "sum", window: str = "") -> str:
        return f"{agg} by ({by(k)}) ({fn}({family.name}[{window or w.range}]))"

    # Triton has duration counters instead of histograms (exporter/monitoring/recording.py).
    finished = f"{inc(metrics.ENGINE_E2E, '_count')}\nor\n{inc(metrics.ENGINE_REQUESTS_SUCCEEDED)}"
    finished_before = (f"{inc(metrics.ENGINE_E2E, '_count', True)}\nor\n"
                       f"{inc(metrics.ENGINE_REQUESTS_SUCCEEDED, '', True)}")
    return {
        "engine_up": f"max by ({by(k)}) ({metrics.ENGINE_UP.name})",
        "engine_requests": finished,
        "engine_requests_before": finished_before,
        "engine_baseline_steps": coverage(k, metrics.ENGINE_UP.name, w),
        "engine_queue_seconds": f"{inc(metrics.ENGINE_QUEUE_TIME, '_sum')}\nor\n"
                                f"{inc(metrics.ENGINE_QUEUE_DURATION)}",
        "engine_prefill_seconds": inc(metrics.ENGINE_PREFILL_TIME, "_sum"),
        "engine_decode_seconds": inc(metrics.ENGINE_DECODE_TIME, "_sum"),
        "engine_ttft_p95": quantile(0.95, metrics.ENGINE_TTFT, model, k, w, names.ENGINE_TTFT),
        "engine_itl_p95": quantile(0.95, metrics.ENGINE_ITL, model, k, w, names.ENGINE_ITL),
        "engine_itl_buckets": f"sum by (le, {by(k)}) "
                              f"(increase({metrics.ENGINE_ITL.name}_bucket[{w.range}]))",
        "engine_running": per_target("avg_over_time", metrics.ENGINE_REQUESTS_RUNNING),
        "engine_waiting": per_target("avg_over_time", metrics.ENGINE_REQUESTS_WAITING),
        # Each data-parallel rank has its own batch limit: the sum of their maxima is the
        # engine's.
        "engine_running_max": per_target("max_over_time", metrics.ENGINE_REQUESTS_RUNNING,
                                         window=w.history),
        # The fullest rank at its fullest: a preempting cache frees blocks as it preempts.
        "engine_kv_cache_usage": per_target("max_over_time", metrics.ENGINE_KV_CACHE_USAGE,
                                            agg="max"),
        "engine_preemptions": inc(metrics.ENGINE_PREEMPTIONS),
        "engine_prompt_tokens": inc(metrics.ENGINE_PROMPT_TOKENS),
        "engine_prompt_tokens_before": inc(metrics.ENGINE_PROMPT_TOKENS, "", True),
        **prefill_rate_query(w),
    }


def prefill_rate_query(w: Window) -> dict[str, str]:
    """The fastest prefill over the history: prompt tokens per second of prefill time over
    spans of the window (EngineWindow.prefill_rate_max)."""
    k = ENGINE_KEY
    tokens = increase(k, metrics.ENGINE_PROMPT_TOKENS.name, w.range)
    seconds = increase(k, f"{metrics.ENGINE_PREFILL_TIME.name}_sum", w.range)
    return {"engine_prefill_rate_max":
            f"max_over_time(({tokens}\n/\n({seconds} > 0))[{w.history}:{w.step}])"}


def gpu_queries(w: Window, throttle_share: float) -> dict[str, str]:
    k = GPU_KEY
    xid = metrics.GPU_XID_ERRORS.name

    def avg(family: Family) -> str:
        return f"avg by ({by(k)}) (avg_over_time({family.name}[{w.range}]))"

    def peak(family: Family) -> str:
        return f"max by ({by(k)}) (max_over_time({family.name}[{w.range}]))"

    return {
        "gpu_utilization": avg(metrics.GPU_UTILIZATION),
        "gpu_memory_used_ratio": f"{peak(metrics.GPU_MEMORY_USED)}\n/\n"
                                 f"{peak(metrics.GPU_MEMORY_TOTAL)}",
        # A reason counts when it held the clocks down for this share of the window: NVML
        # flips per sample, so one sample is no throttle (as LLMGPUThrottled).
        "gpu_clock_events": f"avg by (reason, {by(k)}) (avg_over_time("
                            f"{metrics.GPU_CLOCK_EVENT.name}[{w.range}])) > {throttle_share:g}",
        # A series appears with its first XID, which increase() cannot see: a series that
        # did not exist at the window's start counts its value (as LLMGPUXidError).
        "gpu_xid_errors": f"sum by ({by(k)}) ((increase({xid}[{w.range}]) > 0)\nor\n"
                          f"({xid} unless {xid} offset {w.range}))",
        "gpu_dram_bandwidth": avg(metrics.GPU_DRAM_BANDWIDTH_UTILIZATION),
    }


def check_queries(w: Window) -> dict[str, str]:
    runs = metrics.EXPORTER_CHECK_RUNS.name
    ok = metrics.CHECK_SUCCESS
    k = by(CHECK_KEY)
    failed = f'sum by ({k}) (increase({runs}{{outcome!="{ok}"}}[{w.range}])) > 0'
    succeeded = f'sum by ({k}) (increase({runs}{{outcome="{ok}"}}[{w.range}])) > 0'
    return {"failing_checks": f"{failed}\nunless on ({k})\n{succeeded}"}


def all_queries(seconds: float, config: Config) -> dict[str, str]:
    w = Window.of(seconds, config)
    return {**probe_queries(w), **path_queries(w), **engine_queries(w),
            **gpu_queries(w, config.alerting.throttle_share), **check_queries(w)}
