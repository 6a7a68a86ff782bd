"""The overview: what users feel (probes) against where the time goes (network, queue,
compute)."""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import dashboard as db

from exporter import metrics
from exporter.config.models import Config
from exporter.config.policy import AlertingConfig
from exporter.metrics import names
from exporter.metrics.names import FLEET, RATE, prom_duration
from exporter.monitoring.dashboards.kit import (
    RI,
    Section,
    Target,
    build_dashboard,
    engine_shares,
    mean_of,
    quantiles,
    sel,
    stat_panel,
    ts,
)
from exporter.monitoring.promql import human_seconds, num, pct


def _last(window: str) -> str:
    return "the last hour" if window == "1h" else f"the last {window}"


def _burn_alerts(burn: Sequence[AlertingConfig.BurnWindow], shown: str) -> str:
    """Each pair's factor and windows, the long one left out where it is the window shown:
    'pages at 14.4x (with 5m) and 6x (6h with 30m)'."""
    pairs = []
    for w in burn:
        long, short = prom_duration(w.long), prom_duration(w.short)
        pairs.append(f"{w.factor:g}x ({'' if long == shown else long + ' '}with {short})")
    verb = "pages" if all(w.severity == "critical" for w in burn) else "alerts"
    listed = pairs[0] if len(pairs) == 1 else ", ".join(pairs[:-1]) + " and " + pairs[-1]
    return f"{verb} at {listed}"


def overview(config: Config) -> db.Dashboard:
    slo = config.slo
    ps = sel("instance", "probe", "carrier")
    es = sel("instance", "model")
    overrides = ", ".join(
        f"{p.name} {human_seconds(p.slo.ttft_p95_seconds)}"
        for p in config.probes
        if p.slo.ttft_p95_seconds is not None
    )
    override_text = f" Probes with their own TTFT SLO: {overrides}." if overrides else ""
    budget = 1 - slo.objective
    # The stats show the first burn-rate pair's long window; the thresholds are every
    # pair's factor, the highest red.
    burn = config.alerting.burn_windows
    shown = prom_duration(burn[0].long)
    goodput = names.probe_goodput(shown)
    factors = sorted(w.factor for w in burn)
    steps = [(None, "green"), *((f, "orange") for f in factors[:-1]), (factors[-1], "red")]
    slo_row = Section("Service level (synthetic probes)", [
        stat_panel(
            "P95 TTFT",
            f"P95 time to first token per probe over {RATE}; red above the "
            f"{human_seconds(slo.ttft_p95_seconds)} SLO.{override_text}",
            "s",
            (f"max by (probe) ({names.PROBE_TTFT.p95}{ps})", "{{probe}}"),
            [(None, "green"), (slo.ttft_p95_seconds, "red")],
        ),
        stat_panel(
            "P95 TPOT",
            f"P95 time per output token per probe over {RATE}; red above the "
            f"{human_seconds(slo.tpot_p95_seconds)} SLO.",
            "s",
            (f"max by (probe) ({names.PROBE_TPOT.p95}{ps})", "{{probe}}"),
            [(None, "green"), (slo.tpot_p95_seconds, "red")],
        ),
        stat_panel(
            "Probe success",
            f"Share of probe requests that ended ok over {RATE}; red below "
            f"{pct(1 - slo.probe_failure_ratio)}.",
            "percentunit",
            (f"min by (probe) ({names.PROBE_SUCCESS_RATIO}{ps})", "{{probe}}"),
            [(None, "red"), (1 - slo.probe_failure_ratio, "green")],
        ),
        stat_panel(
            f"Goodput ({shown})",
            f"Share of probe requests over {_last(shown)} that were ok and met their TTFT "
            f"and TPOT SLO; red below the {pct(slo.objective)} objective.",
            "percentunit",
            (f"min by (probe) ({goodput}{ps})", "{{probe}}"),
            [(None, "red"), (slo.objective, "green")],
        ),
        stat_panel(
            f"Error budget burn ({shown})",
            f"How many times faster than sustainable {_last(shown)} spent the "
            f"{pct(budget)} error budget; {_burn_alerts(burn, shown)}.",
            "none",
            (f"max by (probe) ((1 - {goodput}{ps}) / {num(budget)})", "{{probe}}"),
            steps,
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
        ts("First token by part: P50 and P95 per carrier",
           "Each part of the probes' first token per carrier, as quantiles over the rate "
           "interval (quantiles do not add up: the stacked means above do). network: the "
           "probe connections' own round trip (TCP_INFO); queue and prefill: the engine's "
           "own timing of each probe request (vLLM --enable-per-request-metrics, NIM "
           "per-request stats; empty without it); network_frontend: the rest of the "
           "client's TTFT, the way in and out and the engine's API server. Probes with a "
           "carrier only.",
           "s", first_token_parts(), span=24),
        ts("Probe TTFT quantiles",
           f"P50, P95 and P99 time to first token per probe over {RATE}.",
           "s", quantiles(names.PROBE_TTFT, ps, "{{probe}}"),
           threshold=slo.ttft_p95_seconds),
        ts("Probe TPOT quantiles",
           f"P50, P95 and P99 time per output token per probe over {RATE}.",
           "s", quantiles(names.PROBE_TPOT, ps, "{{probe}}"),
           threshold=slo.tpot_p95_seconds),
        ts("Probe E2E quantiles",
           f"P50, P95 and P99 time from request to last token per probe over {RATE}; "
           f"the SLO is {human_seconds(slo.e2e_p95_seconds)}.",
           "s", quantiles(names.PROBE_E2E, ps, "{{probe}}"),
           threshold=slo.e2e_p95_seconds),
        ts("Engine time: queue, prefill, decode shares",
           "Share of engine end-to-end time spent queued, in prefill and in decode. A "
           f"growing queue share (above {pct(config.alerting.queue_share_ratio)} "
           "alerts) means capacity-bound; prefill and decode dominating while slow means "
           "compute-bound.",
           "percentunit", engine_shares(es), stack=True),
        ts("Probe outcomes",
           "Probe requests per second by outcome; anything but ok is a failure.",
           "reqps",
           [(f"sum by (probe, outcome) (rate({metrics.PROBE_REQUESTS.name}{ps}[{RI}]))",
             "{{probe}} {{outcome}}")]),
    ])
    return build_dashboard(
        "llm-overview", "LLM latency: overview",
        "What users feel (probes) against where the time goes (network, queue, compute).",
        ("instance", "probe", "carrier", "model"),
        [slo_row, latency_row, vantage_row(config, ps)],
    )


def first_token_parts() -> list[Target]:
    """P50 and P95 per carrier of the network's round trip and of each part of the probes'
    TTFT the engine timed (decode follows the first token: not a part of it), as recorded:
    the raw buckets stay at the edge."""
    part = metrics.PROBE_SERVER_TIMING.labels[-1]
    cs = sel("instance", "carrier")
    first = sel("instance", "carrier", extra=f'{part}!="{metrics.ServerPart.DECODE.value}"')
    out: list[Target] = []
    rtts, timings = names.PROBE_TCP_RTT.by_quantile(), names.PROBE_SERVER_TIMING.by_quantile()
    for (q, rtt), (_, timing) in zip(rtts, timings, strict=False):  # P99 is not recorded
        p = f"p{q * 100:g}"
        out += [(f"{rtt}{cs}", f"{{{{carrier}}}} network {p}"),
                (f"{timing}{first}", f"{{{{carrier}}}} {{{{{part}}}}} {p}")]
    return out


def vantage_row(config: Config, ps: str) -> Section:
    """The same probes and paths per vantage point and GPU site, side by side: fast beside
    the engine and slow from one carrier's vantage point is that carrier's network."""
    where = "{{vantage}}{{site}}"  # an edge has one of the two (docs/scaling.md)
    cs = sel("instance", "carrier")
    by_probe = f"max by ({', '.join(FLEET)}, probe)"
    by_path = f"max by ({', '.join(FLEET)}, carrier, target)"
    local = ("Series from a GPU site's own exporter carry its site, those from a vantage "
             "point inside a carrier's network its vantage.")
    return Section("Vantage points side by side", [
        ts("P95 TTFT per vantage point",
           f"P95 time to first token of each probe as each vantage point and GPU site sees "
           f"it, over {RATE}. Fast at the site and slow from one vantage point is that "
           f"carrier's network, not the engine. {local}",
           "s", [(f"{by_probe} ({names.PROBE_TTFT.p95}{ps})", f"{where} {{{{probe}}}}")],
           span=6, threshold=config.slo.ttft_p95_seconds),
        ts("P95 TPOT per vantage point",
           f"P95 time per output token of each probe per vantage point and GPU site, over "
           f"{RATE}. {local}",
           "s", [(f"{by_probe} ({names.PROBE_TPOT.p95}{ps})", f"{where} {{{{probe}}}}")],
           span=6, threshold=config.slo.tpot_p95_seconds),
        ts("Packet loss per vantage point",
           f"Share of path probe packets lost over {RATE} from each vantage point to each "
           f"target. {local}", "percentunit",
           [(f"{by_path} ({names.PATH_LOSS}{cs})", f"{where} {{{{carrier}}}}/{{{{target}}}}")],
           span=6, threshold=config.slo.loss_ratio),
        ts("P95 RTT per vantage point",
           f"P95 round trip over {RATE} from each vantage point to each target. {local}", "s",
           [(f"{by_path} ({names.PATH_RTT.p95}{cs})", f"{where} {{{{carrier}}}}/{{{{target}}}}")],
           span=6),
    ])

