"""Step 2, real users: each carrier's users as the server's kernel saw their connections
(the clients check). A retransmission is a loss TCP noticed on a user's own stream, so it
is network evidence for the carrier whether or not a probe or a path is there, and whatever
ICMP to a chosen target says. Called by the network step, which owns the step's result."""

from __future__ import annotations

from collections.abc import Mapping

from exporter import metrics
from exporter.diagnosis.observations import ClientWindow
from exporter.diagnosis.result import Evidence, Symptom
from exporter.diagnosis.steps.base import (
    Context,
    Finding,
    ProbeSymptoms,
    pct,
    peak_drift,
    secs,
    strength,
)

#: Evidence names: retransmitted over sent segments, and the mean of the kernel's smoothed
#: RTT.
RETRANSMISSION = (f"{metrics.CLIENTS_SEGMENTS_RETRANSMITTED.name} / "
                  f"{metrics.CLIENTS_SEGMENTS_SENT.name}")
CLIENT_RTT = f"{metrics.CLIENTS_RTT.name} mean (_sum / _count)"
Explains = Mapping[str, frozenset[Symptom]]


def _findings(ctx: Context, c: ClientWindow, riders: tuple[ProbeSymptoms, ...],
              slo_ttft: float, cleared: list[Evidence], explains: Explains,
              fails: frozenset[str]) -> list[Finding]:
    """The carrier's findings, judged on the lines the carrier's path is judged on: the
    loss line (over enough segments), the evening against its own off-peak, the RTT floor."""
    th = ctx.th
    labels = {"carrier": c.carrier, "vantage": c.vantage}
    scope = {"carrier": c.carrier, "site": c.site, "vantage": c.vantage}
    where = f"Real users of {c.carrier}"
    out: list[Finding] = []

    def add(cause: str, headline: str, evidence: list[Evidence], s: float, own: bool) -> None:
        out.append(Finding("network", cause, dict(scope), headline, evidence, s,
                           explains[cause], riders, unobserved=not riders, own=own,
                           fails=fails))

    ratio = c.retransmission
    loss_e = ctx.ev(RETRANSMISSION, ratio, labels, th.loss_ratio,
                    c.retransmission_baseline) \
        if ratio is not None and c.sent >= th.clients_min_segments else None
    # How many segments the ratio stands on, against the least it is judged over.
    sent_e = ctx.ev(metrics.CLIENTS_SEGMENTS_SENT.name, c.sent, labels, th.clients_min_segments)
    rtt = c.rtt_mean
    rtt_budget = th.rtt_budget_share * slo_ttft
    rtt_e = ctx.ev(CLIENT_RTT, rtt, labels, rtt_budget / th.rtt_round_trips,
                   c.rtt_baseline) if rtt is not None else None
    # The evening peak against the carrier's own off-peak: congestion on its interconnect,
    # which takes over the plain loss, as for a path.
    peak = peak_drift(ctx, c.in_peak, (ratio, loss_e, c.retransmission_baseline),
                      (rtt, rtt_e, c.rtt_baseline))
    if peak:
        what = (f"retransmit {pct(ratio)} of segments (off-peak "
                f"{pct(c.retransmission_baseline or 0)})"
                if loss_e in peak and ratio is not None else
                f"have RTT {secs(rtt or 0)} at peak (off-peak {secs(c.rtt_baseline or 0)})")
        # Over the loss line it is what LLMClientsRetransmissionHigh pages on; an RTT drift
        # or a drift under the line no alert stands for.
        add("peak_congestion", f"{where} {what} in the evening peak", peak,
            strength(peak[0].value, (peak[0].baseline or 0) * th.drift_ratio),
            own=loss_e in peak and ratio is not None and ratio > th.loss_ratio)
    elif ratio is not None and loss_e is not None:
        if ratio > th.loss_ratio:
            add("packet_loss", f"{where} retransmit {pct(ratio)} of {c.sent} segments "
                f"(threshold {pct(th.loss_ratio)})", [loss_e, sent_e],
                strength(ratio, th.loss_ratio, 0.7), own=True)
        else:
            cleared.append(loss_e)
    if rtt is not None and rtt_e is not None and not peak:
        floor = rtt * th.rtt_round_trips
        if floor > rtt_budget:
            add("rtt_floor", f"{where} have RTT {secs(rtt)}: {th.rtt_round_trips} round "
                f"trips take {secs(floor)} of the {secs(slo_ttft)} TTFT SLO", [rtt_e],
                strength(floor, rtt_budget), own=False)
        else:
            cleared.append(rtt_e)
    return out


def _merge(findings: list[Finding], found: list[Finding]) -> None:
    """A carrier's real-user finding of a cause a path of the same carrier (and site)
    already has is more evidence for that verdict, not a second one."""
    for f in found:
        same = next((g for g in findings if (g.layer, g.cause) == (f.layer, f.cause)
                     and g.scope.get("carrier") == f.scope["carrier"]
                     and g.scope.get("site", "") == f.scope.get("site", "")), None)
        if same is None:
            findings.append(f)
        else:
            same.absorb(f)
            same.own = same.own or f.own


def evaluate(ctx: Context, sick: list[ProbeSymptoms], findings: list[Finding],
             cleared: list[Evidence], explains: Explains, fails: frozenset[str]) -> bool:
    """Adds the carriers' findings to ``findings`` (and what cleared them to ``cleared``);
    whether any carrier's users could be judged at all."""
    th = ctx.th
    decided = False
    if ctx.failing("clients"):
        return decided
    for c in ctx.obs.clients:
        riders = tuple(s for s in sick if s.probe.carrier == c.carrier)
        tagged = any(p.carrier == c.carrier for p in ctx.obs.probes)
        slos = [s.probe.slo_ttft for s in riders] or [th.slo_ttft]
        found = _findings(ctx, c, riders, min(slos), cleared, explains, fails)
        decided = decided or c.sent >= th.clients_min_segments or c.rtt_mean is not None
        # As for a path: a fault no symptomatic probe rides is named where no probe rides
        # the carrier at all, or where it is over an alert's line.
        _merge(findings, [f for f in found if riders or not tagged or f.own])
    return decided
