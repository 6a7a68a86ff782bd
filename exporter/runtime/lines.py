"""A batch's samples as exposition lines, and as the diagnosis windows' raw samples.

The lines are what prometheus_client's ``generate_latest`` writes for the same samples
(the label order of the family, ``le`` last, values in Go's float format), so Prometheus,
promtool and the strict OpenMetrics parser read them alike (tests/test_exposition.py holds
the two renderers equal).
"""

from __future__ import annotations

from collections.abc import Callable, Container
from functools import lru_cache
from typing import cast

from prometheus_client.utils import floatToGoString

from exporter.checks.batch import Batch, Buckets, Labels
from exporter.diagnosis.families import RawSample
from exporter.metrics import Family

# prometheus_client's own value format (Go's, as Prometheus prints it); untyped upstream.
_go_float = cast(Callable[[float], str], floatToGoString)
#: Label texts kept for reuse; cleared when full, so label churn cannot grow it for ever.
LABEL_CACHE = 200_000
_labels: dict[tuple[tuple[str, ...], Labels], tuple[str, str]] = {}
_HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def _value(v: float) -> str:
    # Below 1e6 Go prints what repr does (above, it switches to exponents sooner); the
    # counts and seconds here nearly always are, and repr is 5x cheaper.
    return repr(v) if -1e300 < v < 1e6 else _go_float(v)


@lru_cache(maxsize=4096)
def le_text(bound: float) -> str:
    """Go's float format, as Prometheus writes ``le`` ("1.0", "+Inf")."""
    return _go_float(bound)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(names: tuple[str, ...], values: Labels) -> tuple[str, str]:
    """The label pairs sorted by name, as prometheus_client writes them: those before
    ``le`` and those after it (a histogram's bucket puts its ``le`` between)."""
    key = (names, values)
    text = _labels.get(key)
    if text is None:
        if len(_labels) >= LABEL_CACHE:
            _labels.clear()
        pairs = sorted(zip(names, values, strict=True))
        before = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs if k < "le")
        after = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs if k > "le")
        text = _labels[key] = (before, after)
    return text


@lru_cache(maxsize=1024)
def header(family: Family, openmetrics: bool) -> bytes:
    """``# HELP`` and ``# TYPE``; OpenMetrics names a counter without ``_total``."""
    name = family.base if openmetrics else family.name
    doc = family.help.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {family.kind}\n".encode()


def _histogram(name: str, before: str, after: str, value: Buckets) -> str:
    both = ",".join(part for part in (before, after) if part)
    braces = "{" + both + "}" if both else ""
    head, tail = (before + "," if before else ""), ("," + after if after else "")
    out = [
        f'{name}_bucket{{{head}le="{le_text(b)}"{tail}}} {_value(n)}\n'
        for b, n in zip(value.bounds, value.counts, strict=True)
    ]
    if value.count is not None:
        out.append(f"{name}_count{braces} {_value(value.count)}\n")
    if value.sum is not None:
        out.append(f"{name}_sum{braces} {_value(value.sum)}\n")
    return "".join(out)


def render_lines(batch: Batch) -> dict[Family, bytes]:
    """The sample lines of ``batch``, per family, in batch order."""
    out: dict[Family, list[str]] = {}
    for family, values, value in batch:
        before, after = _label_text(family.labels, values)
        if isinstance(value, Buckets):
            line = _histogram(family.name, before, after, value)
        elif before or after:
            labels = before + "," + after if before and after else before or after
            line = f"{family.name}{{{labels}}} {_value(value)}\n"
        else:
            line = f"{family.name} {_value(value)}\n"
        out.setdefault(family, []).append(line)
    return {family: "".join(lines).encode() for family, lines in out.items()}


def raw_samples(batch: Batch, keep: Container[str]) -> list[RawSample]:
    """The samples of ``batch`` named in ``keep``, labels in the family's order (``le``
    last), as prometheus_client's collect() would give them."""
    out: list[RawSample] = []
    for family, values, value in batch:
        if not isinstance(value, Buckets):
            if family.name in keep:
                out.append((family.name, dict(zip(family.labels, values, strict=True)), value))
            continue
        if not any(family.name + suffix in keep for suffix in _HISTOGRAM_SUFFIXES):
            continue
        labels = dict(zip(family.labels, values, strict=True))
        if (bucket := family.name + "_bucket") in keep:
            out.extend(
                (bucket, {**labels, "le": le_text(b)}, n)
                for b, n in zip(value.bounds, value.counts, strict=True)
            )
        for suffix, total in (("_count", value.count), ("_sum", value.sum)):
            if total is not None and family.name + suffix in keep:
                out.append((family.name + suffix, labels, total))
    return out

