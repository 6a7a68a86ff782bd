"""The panel kit every dashboard is built from: variables, panel builders, PromQL helpers
and the dashboard frame.

Every panel and query points at the ``${datasource}`` variable; uids are fixed so links
and bookmarks survive regeneration. The SDK is pinned to the Grafana 11.6 build
(pyproject.toml), the version of the image in docker-compose.yml.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from exporter import metrics
from exporter.metrics import Family, names

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
        # The fleet's external labels (docs/scaling.md): every exporter's build info
        # carries them once it arrives through an edge Prometheus.
        Var("site", "GPU site", metrics.EXPORTER_BUILD_INFO),
        Var("vantage", "Vantage point", metrics.EXPORTER_BUILD_INFO),
        Var("instance", "Exporter", metrics.EXPORTER_BUILD_INFO),
        Var("probe", "Probe", metrics.PROBE_REQUESTS),
        Var("carrier", "Carrier", metrics.PATH_PACKETS_SENT),
        Var("model", "Model", metrics.ENGINE_REQUESTS_RUNNING),
        Var("gpu", "GPU", metrics.GPU_UP),
    )
}


def sel(*variables: str, extra: str = "") -> str:
    """A label matcher block filtering on the fleet variables and the dashboard
    ``variables``: every query is scoped to the selected sites and vantage points."""
    parts = [f'{n}=~"${n}"' for n in (*names.FLEET, *variables)]
    if extra:
        parts.append(extra)
    return "{" + ", ".join(parts) + "}"


def query_variable(var: Var) -> db.QueryVariable:
    if var.name in names.FLEET:
        scope = ""  # a vantage point has no site, a GPU site no vantage: both unscoped
    elif var.name == "instance":
        scope = sel()
    else:
        scope = sel("instance")
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
        # such as probes that name no carrier, or everything on a single Prometheus,
        # which adds no site or vantage.
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


#: Said under every panel that shows a histogram quantile.
RESOLUTION = (" Quantiles are read from histogram buckets and interpolated linearly inside "
              "the bucket they fall in: one is known to no finer than its bucket's bounds "
              "(vLLM's TTFT buckets jump from 250 ms to 500 ms), and two quantiles in one "
              "bucket differ only by the interpolation.")
_QUANTILE = re.compile(r"histogram_quantile\(|:p\d\d_")


def described(description: str, targets: Sequence[Target]) -> str:
    """The panel's description, with the resolution note where a target reads a quantile."""
    if any(_QUANTILE.search(expr) for expr, _ in targets):
        return description + RESOLUTION
    return description


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
        .description(described(description, targets))
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
        .description(described(description, [target]))
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


def quantiles(series: names.Quantiles, matchers: str, legend: str) -> list[Target]:
    return [(f"{name}{matchers}", f"{legend} p{q * 100:g}") for q, name in series.by_quantile()]


def engine_shares(matchers: str) -> list[Target]:
    """Queue, prefill and decode shares of engine time, one target each (to stack)."""
    return [
        (f"{name}{matchers}", f"{{{{target}}}} {{{{model}}}} {phase}")
        for name, phase in (
            (names.ENGINE_QUEUE_SHARE, "queue"),
            (names.ENGINE_PREFILL_SHARE, "prefill"),
            (names.ENGINE_DECODE_SHARE, "decode"),
        )
    ]


# --- the dashboard frame ----------------------------------------------------------------


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
    for name in (*names.FLEET, *variables):
        d = d.with_variable(query_variable(VARS[name]))
    for variable in extra_variables:
        d = d.with_variable(variable)
    for section in sections:
        d = d.with_row(db.Row(section.title))
        for panel in section.panels:
            d = d.with_panel(panel)
    return d
