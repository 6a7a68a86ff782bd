"""Reading metric samples back, one way for every test: exposition text goes through
prometheus_client's own parser, a check's batch as the exporter renders it.

* :func:`parse` -- exposition text -> ``{(sample name, sorted labels): value}``;
  :func:`find`, :func:`value`, :func:`total` and :func:`series` select from it (each takes
  the text or the parsed dict), labels given as keywords match a subset of a sample's labels.
* :func:`published` -- the samples of checks' batches, rendered by the exporter's store and
  parsed back; :func:`published_value` -- one of them that must be there; :class:`Exposed`
  -- the same, read by exact label set (``get_sample_value``) as checks are added.
* :data:`SampleKey` / :func:`key` -- the bucket-exact form the engine oracle compares in (``le``
  as a float, so "1" and "1.0" are one bucket), with :func:`exposed_samples` (an exporter's
  /metrics body) and :func:`snapshot_samples` (a parsed engine snapshot) producing it.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from exporter.checks.base import Check
from exporter.checks.engine.parse import HistogramValue, Snapshot
from exporter.runtime.exposition import Store

Labels = tuple[tuple[str, str], ...]
#: (sample name, sorted labels) -> value
Samples = dict[tuple[str, Labels], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition, in exposition order; a repeated series is an error."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            k = (sample.name, tuple(sorted(sample.labels.items())))
            assert k not in out, f"duplicate sample {k}"
            out[k] = sample.value
    return out


def _parsed(data: str | Samples) -> Samples:
    return parse(data) if isinstance(data, str) else data


def find(data: str | Samples, name: str, /, **labels: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every ``name`` sample whose labels include ``labels``."""
    out = []
    for (sample, sample_labels), v in _parsed(data).items():
        found = dict(sample_labels)
        if sample == name and all(found.get(k) == want for k, want in labels.items()):
            out.append((found, v))
    return out


def value(data: str | Samples, name: str, /, **labels: str) -> float | None:
    """The one matching sample's value, or None when there is none (several: an error)."""
    found = find(data, name, **labels)
    assert len(found) <= 1, f"{name}{labels}: {found}"
    return found[0][1] if found else None


def total(data: str | Samples, name: str, /, **labels: str) -> float:
    """The sum over matching samples (0 when none match)."""
    return sum(v for _, v in find(data, name, **labels))


def series(data: str | Samples, name: str, /) -> dict[Labels, float]:
    """sorted labels -> value for every ``name`` sample."""
    return {lab: v for (sample, lab), v in _parsed(data).items() if sample == name}


def published(checks: Check | Iterable[Check]) -> Samples:
    """Every sample of the checks' batches now, as /metrics renders them."""
    store = Store()
    for i, check in enumerate([checks] if isinstance(checks, Check) else checks):
        store.publish(f"{i}:{check.name}", check.batch())
    return parse(store.text(False).decode())


def published_value(checks: Check | Iterable[Check], name: str, /, **labels: str) -> float:
    """One sample of the checks' batches, which must be there."""
    found = value(published(checks), name, **labels)
    assert found is not None, f"{name}{labels} is absent"
    return found


class Exposed:
    """The batches of the checks added so far, as /metrics renders them, read back now."""

    def __init__(self, *checks: Check) -> None:
        self.checks = list(checks)

    def add(self, *checks: Check) -> None:
        self.checks.extend(checks)

    def samples(self) -> Samples:
        return published(self.checks)

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The sample of exactly ``labels``, or None when there is none."""
        return self.samples().get((name, tuple(sorted((labels or {}).items()))))


# --- the engine oracle's form ----------------------------------------------------------------

#: (sample name, sorted labels without le, le or None) -> value
SampleKey = tuple[str, Labels, float | None]


def key(name: str, labels: dict[str, str]) -> SampleKey:
    rest = dict(labels)
    le = rest.pop("le", None)
    return name, tuple(sorted(rest.items())), None if le is None else float(le)


def exposed_samples(exposition: str) -> dict[SampleKey, float]:
    """The engine data samples in an exporter /metrics body (those with an engine label;
    up, scrape duration, errors, dropped series and info have none)."""
    out: dict[SampleKey, float] = {}
    for (name, labels), v in parse(exposition).items():
        if not name.startswith("llm_engine_") or "engine" not in dict(labels):
            continue
        k = key(name, dict(labels))
        assert k not in out, f"duplicate sample {k}"
        out[k] = v
    return out


def snapshot_samples(snapshot: Snapshot, target: str = "t") -> dict[SampleKey, float]:
    """A snapshot in the oracle's sample form (what the collector writes for it)."""
    out: dict[SampleKey, float] = {}
    for family, series_ in snapshot.series.items():
        names = [n for n in family.labels if n not in ("target", "engine")]
        for k, v in series_.items():
            labels = {"target": target, "engine": snapshot.engine, **dict(zip(names, k, strict=True))}
            if isinstance(v, HistogramValue):
                for le, count in v.buckets.items():
                    out[key(family.name + "_bucket", {**labels, "le": str(le)})] = count
                if v.count is not None:
                    out[key(family.name + "_count", labels)] = v.count
                if v.sum is not None:
                    out[key(family.name + "_sum", labels)] = v.sum
            else:
                out[key(family.name, labels)] = v
    return out
