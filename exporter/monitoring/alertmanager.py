"""The Alertmanager template: routes by severity, inhibitions, quiet hours, placeholder
receivers. Receiver names come from ``alerting.receivers``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.config.models import Config
from exporter.config.values import PeakWindow
from exporter.diagnosis import causes
from exporter.diagnosis.causes import Cause
from exporter.metrics.names import FLEET


@dataclass(frozen=True)
class Inhibition:
    """While ``source`` fires (and matches ``when``), ``targets`` with the same ``equal``
    labels are muted. Labels absent on both sides count as equal in Alertmanager, so
    ``equal`` names a label the targets always carry (their scope, or ``instance``): a
    source without it then mutes nothing."""

    source: str
    targets: tuple[str, ...]
    equal: tuple[str, ...]
    #: More matchers on the source: the causes that explain the targets, or a severity.
    when: tuple[str, ...] = ()


DIAGNOSIS = "LLMLatencyDiagnosis"
#: The exporter a verdict came from, and the fleet labels its edge Prometheus adds: a
#: verdict only explains what the same exporter measured.
WHERE = ("instance", *FLEET)
CRITICAL = 'severity="critical"'


def _cause(*causes: Cause) -> tuple[str, ...]:
    """Matchers on the diagnosis alert for verdicts of ``causes`` (of one layer)."""
    (layer,) = {c.layer for c in causes}
    return (f'layer="{layer}"', f'cause=~"{"|".join(c.name for c in causes)}"')


#: Cause -> symptoms it mutes. Loss on a carrier explains slow first tokens of probes
#: crossing it (and its path checks failing); a down engine explains failures of probes
#: served by it.
#:
#: The diagnosis is a source, never a target: its page says where the latency comes from,
#: so it mutes the symptoms of the probe it names and the one per-layer alert of the cause
#: it names, and pages once. A warning diagnosis mutes only warnings: a critical alert
#: (budget burn, engine down, XID) is muted only by a critical (failing) diagnosis, so a
#: page is never demoted to a ticket.
INHIBITIONS: tuple[Inhibition, ...] = (
    # Loss seen from one vantage point explains that vantage point's symptoms only.
    Inhibition("LLMPathPacketLoss",
               ("LLMProbeTTFTHigh", "LLMProbeTTFTPeakDrift", "LLMExporterCheckFailing",
                "LLMProbeConnectionSetupSlow"),
               ("carrier", *FLEET)),
    # Real users of a carrier retransmitting is the same loss, seen by TCP.
    Inhibition("LLMClientsRetransmissionHigh", ("LLMProbeTTFTHigh", "LLMProbeTTFTPeakDrift"),
               ("carrier", *FLEET)),
    # A probe's own stream losing packets explains its slow tokens: each loss waits a
    # retransmission timeout.
    Inhibition("LLMProbeStreamPacketLoss",
               ("LLMProbeTTFTHigh", "LLMProbeTPOTHigh", "LLMProbeStreamStalls",
                "LLMProbeTTFTPeakDrift", "LLMProbeConnectionSetupSlow"),
               ("probe", *WHERE)),
    # A down engine fails its probes from every vantage point: the engine's name suffices.
    Inhibition("LLMEngineDown",
               ("LLMProbeFailureRatioHigh", "LLMProbeErrorBudgetBurn", "LLMProbeAbsent"),
               ("engine_target",)),
    # A down engine's rates over RATE still hold its last minutes up: its capacity, compute
    # and KV alerts describe an engine that is gone.
    Inhibition("LLMEngineDown",
               ("LLMEngineCapacityBound", "LLMEngineComputeBound", "LLMEngineKVCacheSaturated",
                "LLMEngineImbalance"),
               ("target", *WHERE)),
    Inhibition(DIAGNOSIS,
               ("LLMProbeTTFTHigh", "LLMProbeTPOTHigh", "LLMProbeStreamStalls",
                "LLMProbeFailureRatioHigh", "LLMProbeTTFTPeakDrift"),
               ("probe", *WHERE)),
    Inhibition(DIAGNOSIS, ("LLMProbeErrorBudgetBurn",), ("probe", *WHERE), (CRITICAL,)),
    Inhibition(DIAGNOSIS, ("LLMPathPacketLoss", "LLMPathLossPeakDrift",
                           "LLMClientsRetransmissionHigh", "LLMProbeStreamPacketLoss"),
                          ("carrier", *WHERE),
               _cause(causes.PACKET_LOSS, causes.PEAK_CONGESTION)),
    Inhibition(DIAGNOSIS, ("LLMPathJitterHigh",), ("carrier", *WHERE),
               _cause(causes.JITTER)),
    Inhibition(DIAGNOSIS, ("LLMPathRouteDegraded",), ("carrier", *WHERE),
               _cause(causes.ROUTE_CHANGE)),
    Inhibition(DIAGNOSIS, ("LLMProbeConnectionSetupSlow",), ("probe", *WHERE),
               _cause(causes.CONNECTION_SETUP)),
    # Causes that take over the queue: a KV handover, a prefill the cache no longer spares
    # or drafts rejected hold each request longer.
    Inhibition(DIAGNOSIS, ("LLMEngineCapacityBound",), ("target", *WHERE),
               _cause(causes.QUEUEING, causes.KV_TRANSFER, causes.PREFIX_CACHE_MISS,
                      causes.SPEC_DECODE)),
    Inhibition(DIAGNOSIS, ("LLMEngineComputeBound",), ("target", *WHERE),
               _cause(causes.SLOW_PREFILL, causes.SLOW_DECODE)),
    Inhibition(DIAGNOSIS, ("LLMEngineKVCacheSaturated",), ("target", *WHERE),
               _cause(causes.KV_CACHE_PRESSURE)),
    # An imbalanced rank takes over its engine's queue: the capacity alert is its too.
    Inhibition(DIAGNOSIS, ("LLMEngineImbalance", "LLMEngineCapacityBound"), ("target", *WHERE),
               _cause(causes.IMBALANCE)),
    Inhibition(DIAGNOSIS, ("LLMEngineFrontendBound",), ("target", *WHERE),
               _cause(causes.FRONTEND, causes.PREFIX_CACHE_MISS)),
    Inhibition(DIAGNOSIS, ("LLMEngineKVTransferSlow",), ("target", *WHERE),
               _cause(causes.KV_TRANSFER)),
    Inhibition(DIAGNOSIS, ("LLMEnginePrefixCacheMiss",), ("target", *WHERE),
               _cause(causes.PREFIX_CACHE_MISS)),
    Inhibition(DIAGNOSIS, ("LLMEngineSpecDecodeAcceptance",), ("target", *WHERE),
               _cause(causes.SPEC_DECODE)),
    Inhibition(DIAGNOSIS, ("LLMEngineDown",), ("target", *WHERE),
               (*_cause(causes.DOWN), CRITICAL)),
    # Verdicts carry no gpu label: a GPU cause explains that exporter's GPU alerts.
    Inhibition(DIAGNOSIS, ("LLMGPUThrottled",), WHERE, _cause(causes.THROTTLING)),
    Inhibition(DIAGNOSIS, ("LLMGPUMemoryNearFull",), WHERE, _cause(causes.MEMORY_FULL)),
    Inhibition(DIAGNOSIS, ("LLMGPUXidError",), WHERE, (*_cause(causes.XID_ERRORS), CRITICAL)),
    # A starved host slows its engines: their capacity, compute and frontend alerts are its
    # too. Verdicts carry no instance label, as for the GPU.
    *(Inhibition(DIAGNOSIS, (*c.pages, "LLMEngineCapacityBound", "LLMEngineComputeBound",
                             "LLMEngineFrontendBound"), WHERE, _cause(c))
      for c in causes.HOST_CAUSES),
)

QUIET_HOURS = "quiet-hours"
#: Placeholders to replace: .invalid never resolves, so nothing is sent until someone does.
WEBHOOK = "https://alerts.example.invalid/llm-latency/{}"
#: Tickets also go by mail: an example of the second common receiver kind.
EMAIL = {
    "to": "llm-oncall@example.invalid",
    "from": "alertmanager@example.invalid",
    "smarthost": "smtp.example.invalid:587",
    "send_resolved": True,
}


def alertmanager_config(config: Config) -> dict[str, Any]:
    a = config.alerting
    receivers = a.receivers
    routes: list[dict[str, Any]] = []
    for severity, receiver in receivers.model_dump().items():
        route: dict[str, Any] = {"receiver": receiver, "matchers": [f'severity="{severity}"']}
        if severity == "critical":
            # A page that is resolved, or joined by a new alert, is news within a minute.
            route["group_interval"] = "1m"
            route["repeat_interval"] = "1h"
        if severity == "warning" and a.quiet_hours is not None:
            route["mute_time_intervals"] = [QUIET_HOURS]
        routes.append(route)
    am: dict[str, Any] = {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": a.default_receiver,
            "group_by": ["alertname", "carrier"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": routes,
        },
        "inhibit_rules": [
            {
                "source_matchers": [f'alertname="{rule.source}"', *rule.when],
                "target_matchers": [f'alertname=~"{"|".join(rule.targets)}"'],
                "equal": list(rule.equal),
            }
            for rule in INHIBITIONS
        ],
    }
    if a.quiet_hours is not None:
        am["time_intervals"] = [
            {
                "name": QUIET_HOURS,
                "time_intervals": [
                    {"times": _time_ranges(a.quiet_hours), "location": config.peak_windows.timezone}
                ],
            }
        ]
    am["receivers"] = [
        {"name": name, "webhook_configs": [{"url": WEBHOOK.format(name), "send_resolved": True}]}
        for name in (a.default_receiver, receivers.critical, receivers.warning)
    ] + [{"name": receivers.info}]  # no configs: info alerts are for dashboards only
    for receiver in am["receivers"]:
        if receiver["name"] == receivers.warning:
            receiver["email_configs"] = [dict(EMAIL)]
    return am


def _time_ranges(window: PeakWindow) -> list[dict[str, str]]:
    """Alertmanager ranges cannot cross midnight: 22:00-06:00 is two ranges."""
    start, end = f"{window.start:%H:%M}", f"{window.end:%H:%M}"
    if window.start < window.end:
        return [{"start_time": start, "end_time": end}]
    ranges = [{"start_time": start, "end_time": "24:00"}]
    if end != "00:00":
        ranges.append({"start_time": "00:00", "end_time": end})
    return ranges
