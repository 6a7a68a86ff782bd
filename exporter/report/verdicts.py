"""The diagnosis verdicts named during the period: when, for how long, whether they paged,
and the chain's evidence at the end of each episode.

``llm_diagnosis_verdict`` (1 while named, 2 while primary) says when; the evidence is not in
Prometheus, so the decision chain runs again over Prometheus at the episode's last evaluation,
with the config's thresholds and diagnosis window, as ``diagnose --prometheus --at`` would.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from exporter import metrics
from exporter.config.models import Config
from exporter.diagnosis import chain
from exporter.diagnosis.promapi import PromClient
from exporter.diagnosis.prometheus import observe
from exporter.diagnosis.result import Evidence
from exporter.diagnosis.thresholds import resolve
from exporter.monitoring.alerts.diagnosis import PRIMARY, diagnosis_alerts
from exporter.report.collect import Key, key_of
from exporter.report.model import Episode
from exporter.report.sections import VANTAGE

BY = (*metrics.DIAGNOSIS_VERDICT_LABELS, VANTAGE)
SCOPE = tuple(name for name in BY if name not in ("layer", "cause"))
#: Episodes whose evidence is looked up (the longest); each costs one diagnosis's queries.
MAX_EVIDENCE = 12


def runs(times: Iterable[float], step: float) -> list[tuple[float, float]]:
    """Contiguous stretches of evaluation times ``step`` apart, as (first, last + step)."""
    out: list[tuple[float, float]] = []
    for t in sorted(times):
        if out and t - out[-1][1] <= step / 2:
            out[-1] = (out[-1][0], t + step)
        else:
            out.append((t, t + step))
    return out


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def evidence_line(e: Evidence) -> str:
    labels = ",".join(f"{k}={v}" for k, v in e.labels.items())
    line = f"{e.metric}{{{labels}}} = {_num(e.value)}"
    if e.threshold is not None:
        line += f" (threshold {_num(e.threshold)})"
    if e.baseline is not None:
        line += f" (baseline {_num(e.baseline)})"
    return line + (f" over {e.window}" if e.window else "")


def _paged(client: PromClient, start: float, end: float, step: float) -> dict[Key, list[float]]:
    name = diagnosis_alerts()[0].name
    expr = f'ALERTS{{alertname="{name}", alertstate="firing"}}'
    out: dict[Key, list[float]] = {}
    for s in client.query_range(expr, start, end, step):
        out.setdefault(key_of(s.labels, BY), []).extend(t for t, _ in s.samples)
    return out


def episodes(client: PromClient, config: Config, start: float, end: float,
             step: float) -> list[Episode]:
    points: dict[Key, dict[float, float]] = {}
    for s in client.query_range(metrics.DIAGNOSIS_VERDICT.name, start, end, step):
        per = points.setdefault(key_of(s.labels, BY), {})
        for t, v in s.samples:
            if v is not None:
                per[t] = max(per.get(t, 0.0), v)
    paged = _paged(client, start, end, step)
    found: list[tuple[Key, float, float, bool, bool, list[float]]] = []
    for key, per in points.items():
        for first, last in runs(per, step):
            named = sorted(t for t in per if first <= t < last)
            primary = any(per[t] >= PRIMARY for t in named)
            fired = any(first <= t < last for t in paged.get(key, ()))
            found.append((key, first, min(last, end), primary, fired, named))
    found.sort(key=lambda f: (f[1], f[0]))
    longest = sorted(range(len(found)), key=lambda i: found[i][1] - found[i][2])[:MAX_EVIDENCE]
    out = []
    for i, (key, first, last, primary, fired, named) in enumerate(found):
        summary, lines = "", list[str]()
        if i in longest:
            summary, lines = _evidence(client, config, key, named)
        out.append(Episode(
            layer=key[0], cause=key[1], scope={n: v for n, v in zip(SCOPE, key[2:], strict=True)
                                               if v},
            start=dt.datetime.fromtimestamp(first, dt.UTC),
            end=dt.datetime.fromtimestamp(last, dt.UTC), duration_s=last - first,
            primary=primary, paged=fired, summary=summary, evidence=lines))
    return out


def _evidence(client: PromClient, config: Config, key: Key,
              named: list[float]) -> tuple[str, list[str]]:
    """The chain's evidence at the last evaluation that named the cause; the episode's middle
    where the chain over Prometheus parts from the exporter's own verdict at its edge (the
    exporter's step and the rule's differ by a scrape)."""
    for at in dict.fromkeys((named[-1], named[len(named) // 2])):
        obs = observe(client.base, config, dt.datetime.fromtimestamp(at, dt.UTC),
                      config.diagnosis.window, client.timeout)
        diagnosis = chain.diagnose(obs, thresholds=resolve(config))
        for v in diagnosis.verdicts:
            if (v.layer, v.cause) == key[:2]:
                return v.summary, [evidence_line(e) for e in v.evidence]
    return "", [f"the chain over Prometheus does not name {key[0]}/{key[1]} in the episode"]
