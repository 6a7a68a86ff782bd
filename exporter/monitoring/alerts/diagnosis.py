"""The diagnosis alert: the decision chain's primary verdict as one page per cause, saying
where the latency comes from. Alertmanager mutes the symptom and per-layer alerts the
verdict explains (``INHIBITIONS`` in exporter/monitoring/alertmanager.py), so the page that
arrives is the one that already names the layer, the cause and the scope."""

from __future__ import annotations

from exporter import metrics
from exporter.metrics.names import SOURCE
from exporter.monitoring.rule import Alert

_HEALTHY, DEGRADED, FAILING, _UNKNOWN = metrics.DIAGNOSIS_STATUSES
#: llm_diagnosis_verdict's value for the primary verdict (1: a secondary one).
PRIMARY = 2
#: A failing status pages; degraded is a ticket. Unknown (the exporter/no_data verdict)
#: pages nothing here: LLMEngineDown and LLMExporterCheckFailing say which check is blind.
SEVERITY_BY_STATUS = ((FAILING, "critical"), (DEGRADED, "warning"))


def _with(label: str, text: str) -> str:
    return "{{ with $labels." + label + " }}" + text + "{{ end }}"


SUMMARY = (
    "Latency comes from the {{ $labels.layer }} layer: "
    '{{ reReplaceAll "_" " " $labels.cause }}'
    + _with("carrier", ", carrier {{ . }}")
    + _with("probe", ", probe {{ . }}")
    + _with("engine", ", engine {{ . }}")
    + "."
)


def diagnosis_alerts() -> list[Alert]:
    verdict = metrics.DIAGNOSIS_VERDICT.name
    status = metrics.DIAGNOSIS_STATUS.name
    join = ", ".join(SOURCE)
    alerts = []
    for state, severity in SEVERITY_BY_STATUS:
        # The verdict's engine is an engines[].name, which the engine alerts call target:
        # copied there so an inhibit rule can match the engine alerts of the same engine.
        expr = (
            f"label_replace(\n  {verdict} == {PRIMARY}\n  and on ({join})\n"
            f'  ({status}{{status="{state}"}} == 1),\n'
            '  "target", "$1", "engine", "(.+)"\n)'
        )
        alerts.append(
            Alert(
                "LLMLatencyDiagnosis",
                expr,
                severity,
                SUMMARY,
                "The decision chain of the exporter on {{ $labels.instance }} ("
                f"status {state}) names {{{{ $labels.layer }}}}/{{{{ $labels.cause }}}} as "
                "the first implicated layer in the order network, engine, GPU, application; "
                "the alerts it explains are muted. Evidence (values, thresholds, "
                "baselines) and next actions: "
                "llm-latency-exporter diagnose --exporter http://{{ $labels.instance }}",
                # Before the 10m of the symptom alerts: the page that explains them comes
                # first, and they are muted when they would fire.
                "5m",
            )
        )
    return alerts
