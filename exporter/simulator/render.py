"""Render the simulator's normalized state as one engine's exposition.

The mapping table (exporter/checks/engine/table.py) says how each source family becomes a
normalized family; this module runs it backwards: for every row of ``sources_for(format)``
the normalized series are renamed to the source's labels, its ``match`` labels are added,
values are divided by ``scale`` (histogram ``le`` bounds and ``_sum`` too, counts never),
and series that coincide once a label is dropped are summed (counters, histograms) or maxed
(gauges), as the parser would read them. So the simulator holds no engine metric names, and
what it serves is exactly what the exporter, reading it back, should report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from exporter import metrics
from exporter.checks.engine.table import Source, sources_for
from exporter.checks.engine.unmapped import Unmapped, unmapped_for
from exporter.metrics import Kind
from exporter.simulator.stats import Histogram, Store, Value

#: Labels the imitated engine always adds that the table drops (Triton's model version).
EXTRA_LABELS: dict[str, dict[str, str]] = {"triton": {"version": "1"}}

SourceLabels = tuple[tuple[str, str], ...]


def has_dp_label(fmt: str) -> bool:
    """Whether the format can tell data-parallel ranks apart."""
    return any("dp_rank" in s.labels.values() for s in sources_for(fmt))


@dataclass
class _Family:
    name: str
    kind: Kind
    help: str
    series: dict[SourceLabels, Value]


def _clean(x: float) -> float:
    # Dividing by a scale like 1e-6 leaves float noise (0.3/1e-6 = 299999.99999999994).
    return float(f"{x:.12g}")


def _source_value(source: Source, value: Value) -> Value:
    if source.scale == 1.0:
        return value
    if isinstance(value, Histogram):
        out = Histogram(tuple(_clean(b / source.scale) for b in value.bounds), list(value.counts))
        out.sum = value.sum / source.scale
        return out
    if source.kind is Kind.COUNTER:
        # Engines that count in small units (Triton's microseconds) count whole units.
        return float(round(value / source.scale))
    return value / source.scale


def _combine(kind: Kind, a: Value, b: Value) -> Value:
    if isinstance(a, Histogram) and isinstance(b, Histogram):
        out = Histogram(a.bounds, [x + y for x, y in zip(a.counts, b.counts, strict=True)])
        out.sum = a.sum + b.sum
        return out
    assert isinstance(a, float) and isinstance(b, float)
    return max(a, b) if kind is Kind.GAUGE else a + b


def _families(store: Store, fmt: str, hidden: frozenset[str]) -> list[_Family]:
    families: dict[str, _Family] = {}
    extra = EXTRA_LABELS.get(fmt, {})
    for source in sources_for(fmt):
        fam = families.setdefault(
            source.name, _Family(source.name, source.kind, source.target.help, {})
        )
        for norm_labels, value in store.series(source.target.name).items():
            norm = {k: v for k, v in norm_labels if k not in hidden}
            labels = {s: norm[n] for s, n in source.labels.items() if n in norm}
            labels.update(source.match)
            labels.update(extra)
            key = tuple(labels.items())
            converted = _source_value(source, value)
            previous = fam.series.get(key)
            fam.series[key] = (
                converted if previous is None else _combine(source.kind, previous, converted)
            )
    # A feature is on where a family only it has has series (speculative decoding, P/D).
    on = {s.feature for s in sources_for(fmt) if s.feature and store.series(s.target.name)}
    for row in unmapped_for(fmt):
        if not row.feature or row.feature in on:
            families[row.name] = _unmapped(store, row)
    # A family the engine has only with a feature on (speculative decoding, P/D) is absent
    # with it off, not an empty family.
    return [f for f in families.values() if f.series]


#: Normalized labels the unmapped families' engine labels come from (vLLM's names).
_FILL = {"model_name": "model", "engine": "dp_rank"}


def _unmapped(store: Store, row: Unmapped) -> _Family:
    """A family the exporter leaves out, with the engine's label names and pre-created
    values: its value is a placeholder (0; 1 for info gauges and the current state)."""
    fam = _Family(row.name, row.kind, f"Not mapped by the exporter: {row.why}.", {})
    for norm_labels in store.series(metrics.ENGINE_REQUESTS_RUNNING.name):
        norm = dict(norm_labels)
        combos: list[dict[str, str]] = [{}]
        for label in row.labels:
            choices = row.values.get(label) or (norm.get(_FILL.get(label, ""), ""),)
            combos = [{**c, label: v} for c in combos for v in choices]
        for labels in combos:
            first = all(labels[k] == v[0] for k, v in row.values.items())
            value: Value = (
                Histogram(()) if row.kind is Kind.HISTOGRAM
                else float(row.kind is Kind.GAUGE and first)
            )
            fam.series[tuple(labels.items())] = value
    return fam


def _num(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return "NaN" if math.isnan(x) else repr(float(x))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return f"{{{text}}}" if text else ""


def _lines(fam: _Family) -> Iterable[str]:
    yield f"# HELP {fam.name} {fam.help}"
    yield f"# TYPE {fam.name} {fam.kind.value}"
    for labels, value in fam.series.items():
        if isinstance(value, Histogram):
            for bound, count in value.cumulative():
                le = (("le", _num(bound)),)
                yield f"{fam.name}_bucket{_labels(labels + le)} {_num(count)}"
            yield f"{fam.name}_sum{_labels(labels)} {_num(value.sum)}"
            yield f"{fam.name}_count{_labels(labels)} {_num(value.count)}"
        else:
            yield f"{fam.name}{_labels(labels)} {_num(value)}"


def exposition(store: Store, fmt: str, hidden: Iterable[str] = ()) -> str:
    """Prometheus text format 0.0.4 for ``fmt``; ``hidden`` normalized labels are left out
    (SGLang shows dp_rank only when it runs data-parallel)."""
    lines: list[str] = []
    for fam in _families(store, fmt, frozenset(hidden)):
        lines.extend(_lines(fam))
    return "\n".join(lines) + "\n"
