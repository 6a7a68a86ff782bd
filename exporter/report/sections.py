"""The report's tables from the collected counts: per carrier, outcomes, queue time,
goodput and the long-context profile."""

from __future__ import annotations

import math
from collections.abc import Sequence

from exporter import metrics
from exporter.config.models import Config
from exporter.metrics import ProbeOutcome
from exporter.probing.prompts import Profile
from exporter.report import stats
from exporter.report.collect import Buckets, Collector, Key, Samples, Totals
from exporter.report.model import (
    Bucket,
    Carrier,
    Goodput,
    LongContext,
    Metric,
    OutcomeCounts,
    Outcomes,
    Queue,
    Unit,
)

#: The fleet label that tells vantage points apart (docs/scaling.md); "" for one exporter.
VANTAGE = "vantage"
CARRIER = (VANTAGE, "carrier")
LONG_CONTEXT: Profile = "long_context"
NOT_LONG = f'{{profile!="{LONG_CONTEXT}"}}'
ONLY_LONG = f'{{profile="{LONG_CONTEXT}"}}'
RFC3550 = f'{{method="{metrics.PATH_JITTER_RFC3550}"}}'
TIMEOUTS = tuple(o.value for o in ProbeOutcome if o.value.startswith("timeout_"))
#: The parts of a probe's TTFT the engine's own timing splits it into, in a request's order.
FIRST_TOKEN_PARTS = (metrics.ServerPart.QUEUE, metrics.ServerPart.PREFILL,
                     metrics.ServerPart.NETWORK_FRONTEND)


def _hist(name: str, data: Buckets, key: Key, classes: Sequence[str]) -> Metric:
    per = data.get(key, {})
    return stats.metric(name, "s", {c: stats.from_buckets(per.get(c)) for c in per}, classes)


def _gauge(name: str, unit: Unit, data: Samples, key: Key, classes: Sequence[str]) -> Metric:
    per = data.get(key, {})
    return stats.metric(name, unit, {c: stats.from_samples(per.get(c)) for c in per}, classes)


def stream_ratio(part: dict[str, float], whole: dict[str, float], classes: Sequence[str]
                 ) -> dict[str, float | None]:
    """Per class, the probes' segments of one kind over those of another ({} when the
    probes published no TCP_INFO: a report from before it still reads as a baseline)."""
    if not whole:
        return {}
    return {c: stats.ratio(part.get(c, 0.0), whole[c]) if c in whole else None
            for c in classes}


def carriers(col: Collector, classes: Sequence[str]) -> list[Carrier]:
    ttft = col.buckets(metrics.PROBE_TTFT, CARRIER, NOT_LONG)
    tpot = col.buckets(metrics.PROBE_TPOT, CARRIER, NOT_LONG)
    rtt = col.buckets(metrics.PATH_RTT, CARRIER)
    jitter = col.samples(metrics.PATH_JITTER, CARRIER, RFC3550)
    loss = col.samples(metrics.PATH_LOSS, CARRIER)
    sent = col.totals(metrics.PATH_PACKETS_SENT, CARRIER)
    received = col.totals(metrics.PATH_PACKETS_RECEIVED, CARRIER)
    # Real users (the clients check), whether or not a probe or a path is on the carrier.
    users_rtt = col.buckets(metrics.CLIENTS_RTT, CARRIER)
    segments = col.totals(metrics.CLIENTS_SEGMENTS_SENT, CARRIER)
    retransmitted = col.totals(metrics.CLIENTS_SEGMENTS_RETRANSMITTED, CARRIER)
    # The probes' own streams (TCP_INFO of their connections), per carrier.
    probe_rtt = col.buckets(metrics.PROBE_TCP_RTT, CARRIER)
    # The probes' first token as the engine timed each request, part by part (empty where
    # the engine does not time its requests).
    timing, part = metrics.PROBE_SERVER_TIMING, metrics.PROBE_SERVER_TIMING.labels[-1]
    first = {p: col.buckets(timing, CARRIER,
                            f'{{{part}="{p.value}",profile!="{LONG_CONTEXT}"}}')
             for p in FIRST_TOKEN_PARTS}
    # The same parts as means, which add up: the field guides' segments of a request.
    means = {"network": col.means(metrics.PROBE_TCP_RTT, CARRIER),
             **{p.value: col.means(timing, CARRIER,
                                   f'{{{part}="{p.value}",profile!="{LONG_CONTEXT}"}}')
                for p in (metrics.ServerPart.NETWORK_FRONTEND, *FIRST_TOKEN_PARTS[:2])},
             "ttft": col.means(metrics.PROBE_TTFT, CARRIER, NOT_LONG),
             "tpot": col.means(metrics.PROBE_TPOT, CARRIER, NOT_LONG)}
    family, label = metrics.PROBE_TCP_SEGMENTS, metrics.PROBE_TCP_SEGMENTS.labels[-1]
    probe_segments = {
        kind: col.totals(family, CARRIER, f'{{{label}="{kind.value}"}}')
        for kind in metrics.TcpSegments}
    # The check publishes every carrier's series (and other's) from its first run: a
    # carrier is in the report once its users sent something.
    users = {k for k, per in segments.items() if any(v > 0 for v in per.values())}
    out = []
    for key in sorted({*ttft, *tpot, *rtt, *jitter, *loss, *users}):
        lost = {c: stats.ratio(sent[key][c] - received.get(key, {}).get(c, 0.0), sent[key][c])
                if c in sent.get(key, {}) else None for c in classes}
        resent = {c: stats.ratio(retransmitted.get(key, {}).get(c, 0.0), segments[key][c])
                  if c in segments.get(key, {}) else None for c in classes}
        seg = metrics.TcpSegments
        stream = {part: stream_ratio(probe_segments[part].get(key, {}),
                                     probe_segments[whole].get(key, {}), classes)
                  for part, whole in ((seg.RETRANSMITTED, seg.SENT),
                                      (seg.OUT_OF_ORDER, seg.RECEIVED))}
        out.append(Carrier(
            vantage=key[0], carrier=key[1], loss_ratio=lost, retransmission_ratio=resent,
            stream_retransmission_ratio=stream[seg.RETRANSMITTED],
            stream_out_of_order_ratio=stream[seg.OUT_OF_ORDER],
            means={name: {c: per[key][c] if c in per.get(key, {}) else None for c in classes}
                   for name, per in means.items() if key in per},
            metrics=[
                _hist("ttft", ttft, key, classes),
                _hist("tpot", tpot, key, classes),
                _hist("rtt", rtt, key, classes),
                _gauge("jitter", "s", jitter, key, classes),
                _gauge("loss", "ratio", loss, key, classes),
                _hist("users_rtt", users_rtt, key, classes),
                _hist("probe_tcp_rtt", probe_rtt, key, classes),
                *(_hist(f"ttft_{p.value}", first[p], key, classes)
                  for p in FIRST_TOKEN_PARTS if key in first[p]),
            ],
        ))
    return out


def outcomes(col: Collector, classes: Sequence[str]) -> list[Outcomes]:
    by = (VANTAGE, "probe", "outcome")
    data: Totals = col.totals(metrics.PROBE_REQUESTS, by)
    rows: dict[Key, dict[str, dict[str, float]]] = {}
    for (vantage, probe, outcome), per in data.items():
        for cls, n in per.items():
            # Series are pre-created at 0: an outcome that never happened is no column.
            seen = rows.setdefault((vantage, probe), {}).setdefault(cls, {})
            if n > 0 or outcome == ProbeOutcome.OK.value:
                seen[outcome] = n
    out = []
    for (vantage, probe), per_class in sorted(rows.items()):
        by_class: dict[str, OutcomeCounts | None] = {}
        for cls in classes:
            counts = per_class.get(cls)
            if not counts:
                by_class[cls] = None
                continue
            total = sum(counts.values())
            failed = total - counts.get(ProbeOutcome.OK.value, 0.0)
            timed_out = sum(counts.get(o, 0.0) for o in TIMEOUTS)
            by_class[cls] = OutcomeCounts(
                requests=total, outcomes=dict(sorted(counts.items())),
                failure_ratio=stats.ratio(failed, total),
                timeout_ratio=stats.ratio(timed_out, total))
        out.append(Outcomes(vantage=vantage, probe=probe, by_class=by_class))
    return out


def queue(col: Collector, classes: Sequence[str]) -> list[Queue]:
    by = (VANTAGE, "target", "model")
    data = col.buckets(metrics.ENGINE_QUEUE_TIME, by)
    out = []
    for key in sorted(data):
        period: dict[float, float] = {}
        for counts in data[key].values():
            for le, n in counts.items():
                period[le] = period.get(le, 0.0) + n
        total = max(period.values(), default=0.0)
        shares, below = [], 0.0
        for le in sorted(period):
            # Cumulative counts can dip by a race between scrape and observation: clamp.
            cum = max(period[le], below)
            shares.append(Bucket(le=le if math.isfinite(le) else None,
                                 share=(cum - below) / total if total else 0.0))
            below = cum
        out.append(Queue(vantage=key[0], target=key[1], model=key[2],
                         time=_hist("queue_time", data, key, classes), buckets=shares))
    return out


def goodput(col: Collector, classes: Sequence[str], config: Config) -> list[Goodput]:
    by = (VANTAGE, "probe")
    good = col.totals(metrics.PROBE_SLO_GOOD, by)
    requests = col.totals(metrics.PROBE_REQUESTS, by)
    objective = config.slo.objective
    out = []
    for key in sorted(requests):
        ratios = {c: stats.ratio(good.get(key, {}).get(c, 0.0), requests[key].get(c))
                  for c in classes}
        met = {c: None if r is None else r >= objective for c, r in ratios.items()}
        out.append(Goodput(vantage=key[0], probe=key[1], objective=objective,
                           by_class=ratios, met=met))
    return out


def long_context(col: Collector, classes: Sequence[str]) -> list[LongContext]:
    by = (VANTAGE, "probe", "carrier")
    data = col.buckets(metrics.PROBE_TTFT, by, ONLY_LONG)
    return [LongContext(vantage=k[0], probe=k[1], carrier=k[2],
                        ttft=_hist("ttft", data, k, classes)) for k in sorted(data)]
