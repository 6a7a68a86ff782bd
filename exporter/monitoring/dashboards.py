"""Grafana dashboards, built with grafana-foundation-sdk from one Config.

Metric names come from :mod:`exporter.metrics`, recorded names from
:mod:`exporter.monitoring.rules`; SLO lines, drift windows and
route-class names come from the config. Every panel and
query points at the ``${datasource}`` variable; uids are fixed so links and bookmarks
survive regeneration. The SDK is pinned to the Grafana 11.6 build (pyproject.toml), the
version of the image in docker-compose.yml.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import Family
from exporter.monitoring import rules
from exporter.monitoring.rules import MODEL, PATH, PROBE, quantile

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAG = "llm-latency-exporter"
# Grafana's $__rate_interval is at least four scrape intervals, so rate() always has data.
RI = "$__rate_interval"
COMPARE = "compare"
COMPARE_OFFSETS = ("1w", "1d")

Panel = cogbuilder.Builder[dm.Panel]
Target = tuple[str, str]  # (PromQL, legend)


# --- variables ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    """A query variable: the series label it filters and a family that carries it."""

    name: str
    title: str
    source: Family


VARS = {
    v.name: v
    for v in (
        Var("instance", "Exporter", metrics.EXPORTER_BUILD_INFO),
        Var("probe", "Probe", metrics.PROBE_REQUESTS),
        Var("carrier", "Carrier", metrics.PATH_PACKETS_SENT),
        Var("model", "Model", metrics.ENGINE_REQUESTS_RUNNING),
        Var("gpu", "GPU", metrics.GPU_UP),
    )
}


def sel(*names: str, extra: str = "") -> str:
    """A label matcher block filtering on the dashboard variables ``names``."""
    parts = [f'{n}=~"${n}"' for n in names]
    if extra:
        parts.append(extra)
    return "{" + ", ".join(parts) + "}"


def query_variable(var: Var) -> db.QueryVariable:
    scope = "" if var.name == "instance" else sel("instance")
    return (
        db.QueryVariable(var.name)
        .label(var.title)
        .query(f"label_values({var.source.name}{scope}, {var.name})")
        .datasource(DS)
        .current(dm.VariableOption(selected=True, text="All", value="$__all"))
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        # ".*" rather than a list of the values: it also matches series without the label,
        # such as probes that name no carrier.
        .all_value(".*")
    )


def compare_variable() -> db.CustomVariable:
    return (
        db.CustomVariable(COMPARE)
        .label("Compare with")
        .values(",".join(COMPARE_OFFSETS))
        .current(dm.VariableOption(selected=True, text=COMPARE_OFFSETS[0],
                                   value=COMPARE_OFFSETS[0]))
        .options([
            dm.VariableOption(selected=i == 0, text=o, value=o)
            for i, o in enumerate(COMPARE_OFFSETS)
        ])
    )


# --- panels ------------------------------------------------------------------------------


def _query(expr: str, legend: str, ref: int) -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .expr(expr)
        .legend_format(legend)
        .ref_id(chr(ord("A") + ref))
        .datasource(DS)
    )


def _thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


def _legend() -> common_b.VizLegendOptions:
    return (
        common_b.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["mean", "max", "lastNotNull"])
    )


def ts(
    title: str,
    description: str,
    unit: str,
    targets: Sequence[Target],
    *,
    span: int = 12,
    stack: bool = False,
    threshold: float | None = None,
    lines: Sequence[str] = (),
) -> timeseries.Panel:
    """A time series panel. ``threshold`` draws a dashed red line (an SLO); ``lines`` are
    legends drawn as unstacked dashed lines over a stacked panel."""
    p = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .min(0)
        .span(span)
        .height(8)
        .legend(_legend())
        .fill_opacity(30 if stack else 10)
        .line_width(1)
    )
    for i, (expr, legend) in enumerate(targets):
        p = p.with_target(_query(expr, legend, i))
    if stack:
        p = p.stacking(common_b.StackingConfig().mode(common.StackingMode.NORMAL))
    if threshold is not None:
        p = p.thresholds(_thresholds((None, "green"), (threshold, "red"))).thresholds_style(
            common_b.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)
        )
    for legend in lines:
        p = p.override_by_name(
            legend,
            [
                dm.DynamicConfigValue(id_val="custom.stacking", value={"mode": "none"}),
                dm.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
                dm.DynamicConfigValue(id_val="custom.lineWidth", value=2),
                dm.DynamicConfigValue(id_val="custom.lineStyle",
                                      value={"fill": "dash", "dash": [10, 10]}),
            ],
        )
    return p


def stat_panel(
    title: str,
    description: str,
    unit: str,
    target: Target,
    steps: Sequence[tuple[float | None, str]],
    *,
    span: int = 5,
    mappings: dict[str, str] | None = None,
) -> stat.Panel:
    p = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .with_target(_query(*target, 0))
        .unit(unit)
        .decimals(3 if unit == "s" else 2)
        .thresholds(_thresholds(*steps))
        .color_mode(common.BigValueColorMode.BACKGROUND)
        .graph_mode(common.BigValueGraphMode.AREA)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .span(span)
        .height(5)
    )
    if mappings:
        p = p.mappings([_value_map(mappings)])
    return p


def _value_map(mapping: dict[str, str]) -> dm.ValueMap:
    return dm.ValueMap(
        options={
            value: dm.ValueMappingResult(text=text, index=i)
            for i, (value, text) in enumerate(mapping.items())
        }
    )


def timeline(
    title: str, description: str, unit: str, targets: Sequence[Target],
    mappings: dict[str, str], *, span: int = 12,
) -> statetimeline.Panel:
    p = (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .mappings([_value_map(mappings)])
        .span(span)
        .height(8)
    )
    for i, (expr, legend) in enumerate(targets):
        p = p.with_target(_query(expr, legend, i))
    return p


def heat(title: str, description: str, expr: str, unit: str, *, span: int = 12) -> heatmap.Panel:
    return (
        heatmap.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .with_target(_query(expr, "{{le}}", 0).format(PromQueryFormat.HEATMAP))
        .unit(unit)
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit(unit))
        .span(span)
        .height(8)
    )


def mean_of(family: Family, matchers: str, by: str = "") -> str:
    """Mean observation of a histogram over the rate interval (means add up, P95s do not)."""
    grouping = f" by ({by})" if by else ""
    return (
        f"sum{grouping} (rate({family.name}_sum{matchers}[{RI}]))\n/\n"
        f"sum{grouping} (rate({family.name}_count{matchers}[{RI}]))"
    )


def quantiles(level: rules.Level, series: Family, matchers: str, legend: str) -> list[Target]:
    return [
        (f"{quantile(level, series, q)}{matchers}", f"{legend} p{q * 100:g}")
        for q in rules.QUANTILES
    ]


# --- dashboards --------------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    title: str
    panels: Sequence[Panel]


def build_dashboard(
    uid: str, title: str, description: str, variables: Sequence[str],
    sections: Sequence[Section], extra_variables: Sequence[cogbuilder.Builder[dm.VariableModel]]
    = (),
) -> db.Dashboard:
    d = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG, "generated"])
        .readonly()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .refresh("1m")
        .time("now-6h", "now")
        .link(
            db.DashboardLink("LLM latency dashboards")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .with_variable(
            db.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
    )
    for name in variables:
        d = d.with_variable(query_variable(VARS[name]))
    for variable in extra_variables:
        d = d.with_variable(variable)
    for section in sections:
        d = d.with_row(db.Row(section.title))
        for panel in section.panels:
            d = d.with_panel(panel)
    return d


def overview(config: Config) -> db.Dashboard:
    slo = config.slo
    ps = sel("instance", "probe", "carrier")
    es = sel("instance", "model")
    overrides = ", ".join(
        f"{p.name} {rules.human_seconds(p.slo.ttft_p95_seconds)}"
        for p in config.probes
        if p.slo.ttft_p95_seconds is not None
    )
    override_text = f" Probes with their own TTFT SLO: {overrides}." if overrides else ""
    budget = 1 - slo.objective
    fast, slow = rules.BURN_WINDOWS[0][2], rules.BURN_WINDOWS[1][2]
    slo_row = Section("Service level (synthetic probes)", [
        stat_panel(
            "P95 TTFT",
            f"P95 time to first token per probe over {rules.RATE}; red above the "
            f"{rules.human_seconds(slo.ttft_p95_seconds)} SLO.{override_text}",
            "s",
            (f"max by (probe) ({quantile(PROBE, metrics.PROBE_TTFT, 0.95)}{ps})", "{{probe}}"),
            [(None, "green"), (slo.ttft_p95_seconds, "red")],
        ),
        stat_panel(
            "P95 TPOT",
            f"P95 time per output token per probe over {rules.RATE}; red above the "
            f"{rules.human_seconds(slo.tpot_p95_seconds)} SLO.",
            "s",
            (f"max by (probe) ({quantile(PROBE, metrics.PROBE_TPOT, 0.95)}{ps})", "{{probe}}"),
            [(None, "green"), (slo.tpot_p95_seconds, "red")],
        ),
        stat_panel(
            "Probe success",
            f"Share of probe requests that ended ok over {rules.RATE}; red below "
            f"{rules.pct(1 - slo.probe_failure_ratio)}.",
            "percentunit",
            (f"min by (probe) ({rules.SUCCESS_RATIO}{ps})", "{{probe}}"),
            [(None, "red"), (1 - slo.probe_failure_ratio, "green")],
        ),
        stat_panel(
            "Goodput (1h)",
            "Share of probe requests over the last hour that were ok and met their TTFT "
            f"and TPOT SLO; red below the {rules.pct(slo.objective)} objective.",
            "percentunit",
            (f"min by (probe) ({rules.goodput('1h')}{ps})", "{{probe}}"),
            [(None, "red"), (slo.objective, "green")],
        ),
        stat_panel(
            "Error budget burn (1h)",
            f"How many times faster than sustainable the last hour spent the "
            f"{rules.pct(budget)} error budget; pages at {fast:g}x (with 5m) and {slow:g}x "
            "(6h with 30m).",
            "none",
            (f"max by (probe) ((1 - {rules.goodput('1h')}{ps}) / {rules.num(budget)})",
             "{{probe}}"),
            [(None, "green"), (slow, "orange"), (fast, "red")],
            span=4,
        ),
    ])
    rtt = "network RTT"
    budget_panel = ts(
        "Latency budget: network, queue, prefill, decode vs what probes see",
        "Mean time per request in each stage, stacked: carrier round trip, engine queue, "
        "prefill and decode. The dashed lines are the probes' mean TTFT and E2E: TTFT "
        "should sit near RTT + queue + prefill, E2E near the whole stack; a gap is time "
        "spent outside the engine (proxies, gateway, client). Means, because percentiles "
        "do not add up.",
        "s",
        [
            (mean_of(metrics.PATH_RTT, sel("instance", "carrier")), rtt),
            (mean_of(metrics.ENGINE_QUEUE_TIME, es), "engine queue"),
            (mean_of(metrics.ENGINE_PREFILL_TIME, es), "prefill"),
            (mean_of(metrics.ENGINE_DECODE_TIME, es), "decode"),
            (mean_of(metrics.PROBE_TTFT, ps), "probe TTFT (mean)"),
            (mean_of(metrics.PROBE_E2E, ps), "probe E2E (mean)"),
        ],
        span=24,
        stack=True,
        lines=("probe TTFT (mean)", "probe E2E (mean)"),
    )
    latency_row = Section("Latency budget", [
        budget_panel,
        ts("Probe TTFT quantiles",
           f"P50, P95 and P99 time to first token per probe over {rules.RATE}.",
           "s", quantiles(PROBE, metrics.PROBE_TTFT, ps, "{{probe}}"),
           threshold=slo.ttft_p95_seconds),
        ts("Probe TPOT quantiles",
           f"P50, P95 and P99 time per output token per probe over {rules.RATE}.",
           "s", quantiles(PROBE, metrics.PROBE_TPOT, ps, "{{probe}}"),
           threshold=slo.tpot_p95_seconds),
        ts("Probe E2E quantiles",
           f"P50, P95 and P99 time from request to last token per probe over {rules.RATE}; "
           f"the SLO is {rules.human_seconds(slo.e2e_p95_seconds)}.",
           "s", quantiles(PROBE, metrics.PROBE_E2E, ps, "{{probe}}"),
           threshold=slo.e2e_p95_seconds),
        ts("Engine time: queue, prefill, decode shares",
           "Share of engine end-to-end time spent queued, in prefill and in decode. A "
           f"growing queue share (above {rules.pct(config.alerting.queue_share_ratio)} "
           "alerts) means capacity-bound; prefill and decode dominating while slow means "
           "compute-bound.",
           "percentunit", _shares(es), stack=True),
        ts("Probe outcomes",
           "Probe requests per second by outcome; anything but ok is a failure.",
           "reqps",
           [(f"sum by (probe, outcome) (rate({metrics.PROBE_REQUESTS.name}{ps}[{RI}]))",
             "{{probe}} {{outcome}}")]),
    ])
    return build_dashboard(
        "llm-overview", "LLM latency: overview",
        "What users feel (probes) against where the time goes (network, queue, compute).",
        ("instance", "probe", "carrier", "model"), [slo_row, latency_row],
    )


def _shares(matchers: str) -> list[Target]:
    return [
        (f"{rules.share(f)}{matchers}", f"{{{{target}}}} {{{{model}}}} {phase}")
        for f, phase in (
            (metrics.ENGINE_QUEUE_TIME, "queue"),
            (metrics.ENGINE_PREFILL_TIME, "prefill"),
            (metrics.ENGINE_DECODE_TIME, "decode"),
        )
    ]


def engine(config: Config) -> db.Dashboard:
    es = sel("instance", "model")
    by = "target, model"
    m = "{{target}} {{model}}"
    slo = config.slo

    def per_model(family: Family, fn: str = "sum") -> str:
        return f"{fn} by ({by}) ({family.name}{es})"

    def rate_of(family: Family, extra: str = "") -> str:
        matchers = sel("instance", "model", extra=extra)
        return f"sum by ({by}) (rate({family.name}{matchers}[{RI}]))"

    load = Section("Load", [
        ts("Running and waiting requests",
           "Requests in the running batch and queued behind it. Waiting above zero for "
           "long means the engine is at capacity.", "short",
           [(per_model(metrics.ENGINE_REQUESTS_RUNNING), f"{m} running"),
            (per_model(metrics.ENGINE_REQUESTS_WAITING), f"{m} waiting")], span=8),
        ts("Token throughput",
           "Prompt (prefill) and generated (decode) tokens per second.", "suffix: tok/s",
           [(rate_of(metrics.ENGINE_PROMPT_TOKENS), f"{m} prompt"),
            (rate_of(metrics.ENGINE_GENERATION_TOKENS), f"{m} generated")], span=8),
        ts("Finished requests by reason",
           "Requests per second by finish reason; abort and error are failures.", "reqps",
           [(f"sum by ({by}, finished_reason) "
             f"(rate({metrics.ENGINE_REQUESTS_FINISHED.name}{es}[{RI}]))",
             f"{m} {{{{finished_reason}}}}")], span=8),
    ])
    queue = Section("Queue", [
        ts("Queue time",
           "Mean and P95 time requests waited in the engine queue before their first "
           "schedule.", "s",
           [(mean_of(metrics.ENGINE_QUEUE_TIME, es, by), f"{m} mean"),
            (f"histogram_quantile(0.95, sum by (le, {by}) "
             f"(rate({metrics.ENGINE_QUEUE_TIME.name}_bucket{es}[{RI}])))", f"{m} p95")]),
        ts("Engine time shares",
           "Share of engine end-to-end time in queue, prefill and decode (recorded over "
           f"{rules.RATE}).", "percentunit", _shares(es), stack=True),
    ])
    preempt = metrics.ENGINE_PREEMPTIONS
    cache = Section("KV cache", [
        ts("KV cache usage",
           "Fraction of KV-cache capacity in use (highest data-parallel rank). Near full, "
           "the scheduler preempts.", "percentunit",
           [(per_model(metrics.ENGINE_KV_CACHE_USAGE, "max"), m)], span=8,
           threshold=config.alerting.kv_cache_usage_ratio),
        ts("Prefix-cache hit rate",
           "Share of looked-up prompt tokens served from the prefix cache.", "percentunit",
           [(f"{rate_of(metrics.ENGINE_PREFIX_CACHE_HITS)}\n/\n"
             f"{rate_of(metrics.ENGINE_PREFIX_CACHE_QUERIES)}", m)], span=8),
        ts("Preemptions",
           "Requests preempted per second; each one recomputes its prompt and output.",
           "ops", [(rate_of(preempt), m)], span=8),
    ])
    latency = Section("Engine-side latency", [
        ts("Engine TTFT quantiles",
           f"Engine-side time to first token, P50/P95/P99 over {rules.RATE}: queue plus "
           "prefill, without the network.", "s",
           quantiles(MODEL, metrics.ENGINE_TTFT, es, m), threshold=slo.ttft_p95_seconds),
        ts("Engine inter-token latency quantiles",
           f"Engine-side gap between output events, P50/P95/P99 over {rules.RATE}.", "s",
           quantiles(MODEL, metrics.ENGINE_ITL, es, m), threshold=slo.tpot_p95_seconds),
        stat_panel("Engine up", "1 while the engine's metrics endpoint answers.", "none",
                   (f"min by (target) ({metrics.ENGINE_UP.name}{sel('instance')})",
                    "{{target}}"),
                   [(None, "red"), (1, "green")], span=24, mappings={"0": "down", "1": "up"}),
    ])
    return build_dashboard(
        "llm-engine", "LLM latency: engine",
        "Inference engine internals, normalized over vLLM, TensorRT-LLM, Triton and SGLang.",
        ("instance", "model"), [load, queue, cache, latency],
    )


def gpu(config: Config) -> db.Dashboard:
    gs = sel("instance", "gpu")
    g = "GPU {{gpu}}"

    def series(family: Family) -> str:
        return f"{family.name}{gs}"

    activity = Section("Activity", [
        ts("Utilization vs memory-controller busy vs DRAM bandwidth",
           "Kernel-active time (utilization: 1 even for one small kernel), memory-"
           "controller duty cycle, and achieved DRAM bandwidth over peak (Hopper+). Decode "
           "is bandwidth-bound: watch the last one.", "percentunit",
           [(series(metrics.GPU_UTILIZATION), f"{g} utilization"),
            (series(metrics.GPU_MEMORY_CONTROLLER_BUSY), f"{g} memory busy"),
            (series(metrics.GPU_DRAM_BANDWIDTH_UTILIZATION), f"{g} DRAM bandwidth")]),
        ts("SM and tensor activity",
           "Share of SMs busy, warp occupancy and tensor-core activity (NVML GPM, Hopper+).",
           "percentunit",
           [(series(metrics.GPU_SM_ACTIVE), f"{g} SM active"),
            (series(metrics.GPU_SM_OCCUPANCY), f"{g} occupancy"),
            (series(metrics.GPU_TENSOR_ACTIVE), f"{g} tensor active")]),
        ts("Memory bandwidth",
           "Achieved DRAM bandwidth against the GPU's theoretical peak.", "Bps",
           [(series(metrics.GPU_MEMORY_BANDWIDTH), f"{g} achieved"),
            (series(metrics.GPU_MEMORY_BANDWIDTH_PEAK), f"{g} peak")]),
        ts("PCIe traffic", "PCIe bytes per second into and out of the GPU.", "Bps",
           [(series(metrics.GPU_PCIE_RX), f"{g} rx"), (series(metrics.GPU_PCIE_TX), f"{g} tx")]),
    ])
    memory = Section("Memory, power, clocks", [
        ts("Memory",
           "Device memory used and installed. Engines preallocate most of it for the KV "
           f"cache; above {rules.pct(config.alerting.gpu_memory_ratio)} alerts.", "bytes",
           [(series(metrics.GPU_MEMORY_USED), f"{g} used"),
            (series(metrics.GPU_MEMORY_TOTAL), f"{g} total")], span=8),
        ts("Power", "Board power draw against the enforced power limit.", "watt",
           [(series(metrics.GPU_POWER), f"{g} draw"),
            (series(metrics.GPU_POWER_LIMIT), f"{g} limit")], span=8),
        ts("Temperature", "GPU die temperature.", "celsius",
           [(series(metrics.GPU_TEMPERATURE), g)], span=8),
        ts("Clocks", "Current SM and memory clocks; a drop under load is throttling.",
           "hertz",
           [(series(metrics.GPU_SM_CLOCK), f"{g} SM"),
            (series(metrics.GPU_MEMORY_CLOCK), f"{g} memory")]),
        timeline("Throttle reasons",
                 "Which clock-event reasons hold the clocks down. power_cap under full load "
                 f"is normal; {', '.join(rules.THROTTLE_REASONS)} alert.", "none",
                 [(f"max by (gpu, reason) ({metrics.GPU_CLOCK_EVENT.name}{gs})",
                   f"{g} {{{{reason}}}}")],
                 {"0": "off", "1": "active"}),
    ])
    errors = Section("Errors", [
        ts("XID errors",
           "XID critical errors reported by the driver, by XID number, per rate interval.",
           "short",
           [(f"sum by (gpu, xid) (increase({metrics.GPU_XID_ERRORS.name}{gs}[{RI}]))",
             f"{g} XID {{{{xid}}}}")]),
        stat_panel("GPU up", "1 while the GPU answers NVML; 0 after it fell off the bus.",
                   "none", (f"min by (gpu) ({series(metrics.GPU_UP)})", g),
                   [(None, "red"), (1, "green")], span=12, mappings={"0": "lost", "1": "up"}),
    ])
    return build_dashboard(
        "llm-gpu", "LLM latency: GPU",
        "NVML telemetry: is the GPU busy, bandwidth-bound, hot, throttled or failing?",
        ("instance", "gpu"), [activity, memory, errors],
    )


def paths(config: Config) -> db.Dashboard:
    cs = sel("instance", "carrier")
    slo = config.slo
    t = "{{carrier}}/{{target}}"
    ranks = {str(i): cls for i, cls in enumerate(config.alerting.route_class_order, start=1)}
    jitter = sel("instance", "carrier", extra=f'method="{rules.JITTER_METHOD}"')
    rtt = Section("Round trip", [
        heat("RTT distribution",
             "Round-trip times of answered probe packets, all selected carriers.",
             f"sum by (le) (rate({metrics.PATH_RTT.name}_bucket{cs}[{RI}]))", "s"),
        ts("RTT quantiles",
           f"P50, P95 and P99 round trip per carrier target over {rules.RATE}.", "s",
           quantiles(PATH, metrics.PATH_RTT, cs, t)),
    ])
    quality = Section("Loss and jitter", [
        ts("Packet loss",
           f"Share of probe packets unanswered over {rules.RATE}, from the sent and received "
           f"counters; the SLO is {rules.pct(slo.loss_ratio)}.", "percentunit",
           [(f"{rules.LOSS}{cs}", t)], threshold=slo.loss_ratio),
        ts("Jitter (RFC 3550)",
           f"Interarrival jitter estimate per carrier target; the SLO is "
           f"{rules.human_seconds(slo.jitter_seconds)}.", "s",
           [(f"{metrics.PATH_JITTER.name}{jitter}", t)],
           threshold=slo.jitter_seconds),
        ts("Path errors", "Path check errors per second by reason.", "ops",
           [(f"sum by (carrier, target, reason) "
             f"(rate({metrics.PATH_ERRORS.name}{cs}[{RI}]))", f"{t} {{{{reason}}}}")]),
    ])
    route = Section("Routes", [
        timeline("Route class",
                 "Route class of the last traceroute, best classes first in "
                 "alerting.route_class_order; a move down the list alerts.", "none",
                 [(f"{rules.ROUTE_RANK}{cs}", t)], ranks),
        ts("Route changes and hops",
           "Route-class changes per rate interval, and hops to the target.", "short",
           [(f"sum by (carrier, target) "
             f"(increase({metrics.PATH_ROUTE_CHANGES.name}{cs}[{RI}]))", f"{t} changes"),
            (f"max by (carrier, target) ({metrics.PATH_HOP_COUNT.name}{cs})", f"{t} hops")]),
    ])
    return build_dashboard(
        "llm-paths", "LLM latency: network paths",
        "Per-carrier round trip, loss, jitter and route class from the GPU server back to "
        "users.", ("instance", "carrier"), [rtt, quality, route],
    )


def day_evening(config: Config) -> db.Dashboard:
    pw = config.peak_windows
    ps = sel("instance", "probe", "carrier")
    cs = sel("instance", "carrier")
    span = rules.prom_duration(config.alerting.baseline_window)
    windows = "; ".join(rules.window_text(n, w, pw.timezone) for n, w in pw.windows.items())
    peak_note = f"Only while a peak window is on: {windows}."

    def off_note(what: str) -> str:
        return (
            f"Only while no peak window is on. The dashed baseline is the true {what} of the "
            f"off-peak time in the last {span}, the one peak-hour drift alerts compare with."
        )

    sections: list[Section] = []
    if pw.windows:
        pairs: list[Panel] = []
        for level, family, what, matchers, legend in (
            (PROBE, metrics.PROBE_TTFT, "P95 TTFT", ps, "{{probe}}"),
            (PROBE, metrics.PROBE_TPOT, "P95 TPOT", ps, "{{probe}}"),
            (PATH, metrics.PATH_RTT, "P95 RTT", cs, "{{carrier}}/{{target}}"),
        ):
            base = f"{legend} baseline"
            pairs += [
                ts(f"{what}: peak windows", peak_note, "s",
                   [(f"{quantile(level, family, 0.95, '_peak')}{matchers}",
                     f"{legend} {{{{window}}}}")]),
                ts(f"{what}: off-peak", off_note("P95"), "s",
                   [(f"{quantile(level, family, 0.95, '_offpeak')}{matchers}", legend),
                    (f"{rules.baseline(level, family)}{matchers}", base)],
                   lines=(base,)),
            ]
        t = "{{carrier}}/{{target}}"
        pairs += [
            ts("Packet loss: peak windows", peak_note, "percentunit",
               [(f"{rules.LOSS_PEAK}{cs}", f"{t} {{{{window}}}}")]),
            ts("Packet loss: off-peak", off_note("loss"), "percentunit",
               [(f"{rules.LOSS_OFFPEAK}{cs}", t), (f"{rules.LOSS_BASELINE}{cs}", f"{t} baseline")],
               lines=(f"{t} baseline",)),
        ]
        sections.append(Section("Peak windows vs off-peak, side by side", pairs))
    ago = f"${COMPARE} ago"
    offset = f"offset ${COMPARE}"
    week = [
        (quantile(PROBE, metrics.PROBE_TTFT, 0.95), ps, "{{probe}}", "P95 TTFT", "s"),
        (quantile(PATH, metrics.PATH_RTT, 0.95), cs, "{{carrier}}/{{target}}", "P95 RTT", "s"),
        (rules.LOSS, cs, "{{carrier}}/{{target}}", "Packet loss", "percentunit"),
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


DASHBOARDS = {
    "overview": overview,
    "engine": engine,
    "gpu": gpu,
    "paths": paths,
    "day-evening": day_evening,
}


def to_json(dashboard: db.Dashboard) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True, indent=2).encode(
        dashboard.build()))
    return data


def render(config: Config) -> dict[str, str]:
    """Relative path -> JSON text of every dashboard."""
    return {
        f"llm-{name}.json": json.dumps(to_json(build(config)), indent=2, sort_keys=True) + "\n"
        for name, build in DASHBOARDS.items()
    }

