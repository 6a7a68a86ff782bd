"""/metrics without rendering every series on every scrape.

At 1000 path targets the exposition holds ~80k samples (7 MB); prometheus_client renders
them in 0.6-2 s of pure Python per scrape. But the series that belong to one check (the
check's own, and the scheduler's about it) only change while that check runs. So the
scheduler renders those to text when a run ends (``Prepared.update``, a few dozen lines),
and a scrape joins the pieces and renders live only what has no owner (process, engine
views, GPU, the exporter's own families). The scrape itself runs on a worker thread, so the
event loop, and the probes timed on it, wait at most a GIL switch interval for it.

Sample lines are the same in the Prometheus text format and OpenMetrics for the families
prepared here (counters, gauges, histograms; no exemplars, no ``_created``): only the
family headers and the ``# EOF`` trailer differ, and those are written per scrape.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable, Iterator
from typing import cast

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from exporter.checks.base import Series
from exporter.metrics import Family

_EOF = "# EOF\n"
# prometheus_client's own value format (Go's, as Prometheus prints it); untyped upstream.
_go_float = cast(Callable[[float], str], floatToGoString)


def _value(v: float) -> str:
    # Below 1e6 Go prints what repr does (above, it switches to exponents sooner); the
    # counts and seconds here nearly always are, and repr is 5x cheaper.
    return repr(v) if -1e300 < v < 1e6 else _go_float(v)
_openmetrics = cast(Callable[[object], bytes], generate_openmetrics)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class TrackedRegistry(CollectorRegistry):
    """A registry that lists its collectors in order, so a scrape can render some of them."""

    def __init__(self) -> None:
        super().__init__(auto_describe=False)
        self.collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        super().register(collector)
        self.collectors.append(collector)

    def unregister(self, collector: Collector) -> None:
        super().unregister(collector)
        self.collectors.remove(collector)


class _Family:
    def __init__(self, schema: Family) -> None:
        self.labelnames = schema.labels
        self.headers = {
            False: self._header(schema.name, schema),
            True: self._header(schema.base, schema),  # OpenMetrics: a counter's name w/o _total
        }
        self._labels: dict[tuple[str, ...], str] = {}  # label values -> their text

    @staticmethod
    def _header(name: str, schema: Family) -> str:
        doc = schema.help.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {name} {doc}\n# TYPE {name} {schema.kind}\n"

    def render(self, parent: MetricWrapperBase, values: tuple[str, ...]) -> str:
        labels = self._labels.get(values)
        if labels is None:
            labels = self._labels[values] = ",".join(
                f'{k}="{_escape(v)}"' for k, v in zip(self.labelnames, values, strict=True)
            )
        out = []
        for metric in parent.labels(*values).collect():
            for s in metric.samples:
                extra = "".join(f',{k}="{_escape(v)}"' for k, v in s.labels.items())
                out.append(f"{s.name}{{{labels}{extra}}} {_value(s.value)}\n")
        return "".join(out)


class Prepared:
    """Text of the series owned by checks: per owner, one piece per family it has."""

    def __init__(self) -> None:
        self._families: dict[MetricWrapperBase, _Family] = {}
        # owner -> {family: its sample lines}, replaced whole by each update, so a scrape
        # on another thread sees all of one run's series or none (a run's counters agree).
        self._by_owner: dict[str, dict[MetricWrapperBase, str]] = {}

    @property
    def parents(self) -> set[MetricWrapperBase]:
        """The families rendered here; a scrape leaves them out of its live part."""
        return set(self._families)

    def update(self, owner: str, series: Iterable[Series]) -> None:
        """Render ``owner``'s series now: all of them (what it no longer lists is gone).
        A family's series must all be owned by someone, or they are never served."""
        pieces: dict[MetricWrapperBase, list[str]] = {}
        for schema, parent, values in series:
            family = self._families.get(parent)
            if family is None:
                family = self._families[parent] = _Family(schema)
            pieces.setdefault(parent, []).append(family.render(parent, values))
        self._by_owner[owner] = {parent: "".join(lines) for parent, lines in pieces.items()}

    def text(self, openmetrics: bool, only: set[MetricWrapperBase] | None = None) -> str:
        """Every prepared family (of ``only``, when given), each with its header; safe from
        another thread (list() of a dict holds the GIL; an owner's pieces are replaced whole)."""
        owners = list(self._by_owner.values())
        out = []
        for parent, family in list(self._families.items()):
            if only is not None and parent not in only:
                continue
            lines = [piece[parent] for piece in owners if parent in piece]
            if lines:
                out.append(family.headers[openmetrics])
                out.extend(lines)
        return "".join(out)


class _Collectors:
    def __init__(self, collectors: list[Collector]) -> None:
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()


def render(
    live: list[Collector], prepared: Prepared, openmetrics: bool, gzipped: bool = False,
    only: set[MetricWrapperBase] | None = None,
) -> bytes:
    """The whole exposition: the ``live`` collectors rendered now, then the prepared text;
    gzipped at level 1 (3x faster than the default, for 20 % more bytes: 7 MB at 1000
    path targets is 20 ms instead of 60)."""
    if not openmetrics:
        body = generate_latest(_Collectors(live)) + prepared.text(False, only).encode()
    else:
        head = _openmetrics(_Collectors(live))
        assert head.endswith(_EOF.encode())
        body = head[: -len(_EOF)] + (prepared.text(True, only) + _EOF).encode()
    return gzip.compress(body, compresslevel=1) if gzipped else body
