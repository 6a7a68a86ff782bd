"""Step 2, real users: each carrier's users as the server's kernel saw their connections
(the clients check). A retransmission is a loss TCP noticed on a user's own stream, so it
is network evidence for the carrier whether or not a probe or a path is there, and whatever
ICMP to a chosen target says. A part of the network step: it returns what it found, and the
step merges it with the paths' findings."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.causes import PACKET_LOSS, PEAK_CONGESTION, RTT_FLOOR, Cause
from exporter.diagnosis.observations import ClientWindow
from exporter.diagnosis.result import Evidence
from exporter.diagnosis.steps.base import (
    Case,
    Finding,
    Part,
    ProbeSymptoms,
    Standing,
    peak_drift,
)
from exporter.diagnosis.steps.words import pct, secs, strength

#: Evidence names: retransmitted over sent segments, and the mean of the kernel's smoothed
#: RTT.
RETRANSMISSION = (f"{metrics.CLIENTS_SEGMENTS_RETRANSMITTED.name} / "
                  f"{metrics.CLIENTS_SEGMENTS_SENT.name}")
CLIENT_RTT = f"{metrics.CLIENTS_RTT.name} mean (_sum / _count)"


def _findings(case: Case, c: ClientWindow, riders: tuple[ProbeSymptoms, ...],
              slo_ttft: float, cleared: list[Evidence]) -> list[Finding]:
    """The carrier's findings, judged on the lines the carrier's path is judged on: the
    loss line (over enough segments), the evening against its own off-peak, the RTT floor."""
    lines = case.thresholds
    labels = {"carrier": c.carrier, "vantage": c.vantage}
    scope = {"carrier": c.carrier, "site": c.site, "vantage": c.vantage}
    where = f"Real users of {c.carrier}"
    out: list[Finding] = []

    def add(cause: Cause, headline: str, evidence: list[Evidence], s: float,
            over_line: bool) -> None:
        out.append(Finding(cause, dict(scope), headline, evidence, s, riders,
                           Standing.OVER_LINE if over_line else Standing.EXPLAINS))

    ratio = c.retransmission
    loss_e = case.evidence(RETRANSMISSION, ratio, labels, lines.loss_ratio,
                           c.retransmission_baseline) \
        if ratio is not None and c.sent >= lines.clients_min_segments else None
    # How many segments the ratio stands on, against the least it is judged over.
    sent_e = case.evidence(metrics.CLIENTS_SEGMENTS_SENT.name, c.sent, labels,
                           lines.clients_min_segments)
    rtt = c.rtt_mean
    rtt_budget = lines.rtt_budget_share * slo_ttft
    rtt_e = case.evidence(CLIENT_RTT, rtt, labels, rtt_budget / lines.rtt_round_trips,
                          c.rtt_baseline) if rtt is not None else None
    # The evening peak against the carrier's own off-peak: congestion on its interconnect,
    # which takes over the plain loss, as for a path.
    peak = peak_drift(case, c.in_peak, (ratio, loss_e, c.retransmission_baseline),
                      (rtt, rtt_e, c.rtt_baseline))
    if peak:
        what = (f"retransmit {pct(ratio)} of segments (off-peak "
                f"{pct(c.retransmission_baseline or 0)})"
                if loss_e in peak and ratio is not None else
                f"have RTT {secs(rtt or 0)} at peak (off-peak {secs(c.rtt_baseline or 0)})")
        # Over the loss line it is what LLMClientsRetransmissionHigh pages on; an RTT drift
        # or a drift under the line no alert stands for.
        add(PEAK_CONGESTION, f"{where} {what} in the evening peak", peak,
            strength(peak[0].value, (peak[0].baseline or 0) * lines.drift_ratio),
            over_line=loss_e in peak and ratio is not None and ratio > lines.loss_ratio)
    elif ratio is not None and loss_e is not None:
        if ratio > lines.loss_ratio:
            add(PACKET_LOSS, f"{where} retransmit {pct(ratio)} of {c.sent} segments "
                f"(threshold {pct(lines.loss_ratio)})", [loss_e, sent_e],
                strength(ratio, lines.loss_ratio, 0.7), over_line=True)
        else:
            cleared.append(loss_e)
    if rtt is not None and rtt_e is not None and not peak:
        floor = rtt * lines.rtt_round_trips
        if floor > rtt_budget:
            add(RTT_FLOOR, f"{where} have RTT {secs(rtt)}: {lines.rtt_round_trips} round "
                f"trips take {secs(floor)} of the {secs(slo_ttft)} TTFT SLO", [rtt_e],
                strength(floor, rtt_budget), over_line=False)
        else:
            cleared.append(rtt_e)
    return out


def evaluate(case: Case) -> Part:
    """The carriers' findings (and what cleared them), and whether any carrier's users
    could be judged at all."""
    lines, part = case.thresholds, Part()
    if case.failing("clients"):
        return part
    for c in case.obs.clients:
        riders = tuple(s for s in case.sick if s.probe.carrier == c.carrier)
        tagged = any(p.carrier == c.carrier for p in case.obs.probes)
        slos = [s.probe.slo_ttft for s in riders] or [lines.slo_ttft]
        found = _findings(case, c, riders, min(slos), part.cleared)
        part.decided = part.decided or c.sent >= lines.clients_min_segments \
            or c.rtt_mean is not None
        # As for a path: a fault no symptomatic probe rides is named where no probe rides
        # the carrier at all, or where it is over an alert's line.
        part.findings.extend(f for f in found if riders or not tagged
                             or f.standing is Standing.OVER_LINE)
    return part
