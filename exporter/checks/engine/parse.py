"""Fast Prometheus/OpenMetrics text parser that reads only the families in the table.

An engine exposition is mostly families the exporter does not re-expose (request-size
histograms, process metrics, `_created` samples). Each line's metric name is cut off with
``str.find`` and looked up in a dict of the sample names the table maps; every other line is
skipped before any label parsing, which is what makes this several times faster than the
Prometheus client library's own text parser (benchmarks/engine_parse.py).

Lines that are read are validated strictly: a malformed one fails the whole scrape, as it
would in Prometheus, and so do a series written twice (same name and label set as written),
``le="NaN"`` and bucket counts that decrease as ``le`` grows. Lines that are skipped are not
validated, since nothing read from them reaches /metrics; lines a cap turned away
(``limits.py``) are, except for repeats, which are not remembered. Timestamps are ignored
(values are re-exposed at the exporter's scrape), exemplars are ignored, and ``# EOF`` ends
the input. A parse past its deadline stops (``ParseTimeout``), so a body that takes too
long never holds a worker thread beyond its scrape.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from exporter.checks.engine.limits import LE, SERIES, Gate
from exporter.checks.engine.table import ALIASES, ENGINES, PREFIXES, Source, rows_for_engine
from exporter.config.models import EngineLimits
from exporter.metrics import Family, Kind

_VALUE, _BUCKET, _SUM, _COUNT = 0, 1, 2, 3
_INF: Final = float("inf")


class ParseError(ValueError):
    """The exposition does not parse; ``str()`` names the line number, never its content."""


class ParseTimeout(Exception):
    """The parse passed its deadline."""


#: How many lines pass between looks at the clock (a few milliseconds of parsing).
_CLOCK_EVERY = 4096


@dataclass
class HistogramValue:
    """One normalized histogram series: cumulative counts by upper bound (base units)."""

    buckets: dict[float, float] = field(default_factory=dict)
    count: float | None = None
    sum: float | None = None

    def sorted_buckets(self) -> list[tuple[float, float]]:
        return sorted(self.buckets.items())


Value = float | HistogramValue
#: Normalized label values after ``target`` and ``engine``: model, dp_rank(, extra...).
SeriesKey = tuple[str, ...]


@dataclass(frozen=True)
class Snapshot:
    """Everything one scrape contributes to /metrics for one target."""

    engine: str
    series: Mapping[Family, Mapping[SeriesKey, Value]]
    #: Values admitted per capped label (at most its cap), in the order they were admitted:
    #: the next scrape's ``keep``.
    kept: Mapping[str, tuple[str, ...]]
    #: Source sample lines left out by a cap, by reason (ENGINE_DROP_REASONS).
    dropped: Mapping[str, int]
    #: Samples whose name is in the table (0 means the engine family did not match).
    matched: int

    @property
    def models(self) -> tuple[str, ...]:
        return self.kept.get("model", ())


class _Plan:
    """A table row compiled for one sample name (a histogram row yields three)."""

    __slots__ = (
        "key_defaults", "key_names", "key_src", "legacy", "match", "part", "scale", "target",
    )

    def __init__(self, src: Source, part: int) -> None:
        self.target = src.target
        self.part = part
        self.scale = src.scale
        self.legacy = src.legacy
        self.match = tuple(src.match.items())
        # Normalized label order is the family's, minus `target` and `engine` (added when
        # collecting); a label the source lacks becomes "".
        back = {norm: source for source, norm in src.labels.items()}
        names = _key_names(src.target)
        self.key_names = names
        self.key_src = tuple(back.get(n, "") for n in names)
        self.key_defaults = ("",) * len(names)


def _key_names(family: Family) -> tuple[str, ...]:
    return tuple(n for n in family.labels if n not in ("target", "engine"))


def _compile(engine: str) -> dict[str, tuple[_Plan, ...]]:
    lookup: dict[str, tuple[_Plan, ...]] = {}

    def add(name: str, plan: _Plan) -> None:
        # Several rows may select different series of one source family through `match`
        # (Triton's request_type), so a name can carry more than one plan.
        lookup[name] = (*lookup.get(name, ()), plan)

    for src in rows_for_engine(engine):
        names = [src.name]
        for old, new in ALIASES.get(engine, ()):
            if src.name.startswith(old):
                names.append(new + src.name[len(old) :])
        for name in names:
            if src.kind is Kind.HISTOGRAM:
                add(name + "_bucket", _Plan(src, _BUCKET))
                add(name + "_sum", _Plan(src, _SUM))
                add(name + "_count", _Plan(src, _COUNT))
            else:
                add(name, _Plan(src, _VALUE))
    return lookup


_LOOKUP: dict[str, dict[str, tuple[_Plan, ...]]] = {e: _compile(e) for e in ENGINES}

_LE_CACHE: dict[str, float] = {}
_LE_CACHE_MAX = 4096

_LABEL_RE = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*')
_UNESCAPE_RE = re.compile(r"\\(.)")


def _unescape(value: str) -> str:
    return _UNESCAPE_RE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _labels_escaped(rest: str, lineno: int) -> tuple[dict[str, str], str]:
    """Label block with backslash escapes: ``rest`` starts just after ``{``."""
    labels: dict[str, str] = {}
    pos = 0
    while True:
        if rest.startswith("}", pos):
            return labels, rest[pos + 1 :]
        m = _LABEL_RE.match(rest, pos)
        if m is None:
            raise ParseError(f"line {lineno}: bad label set")
        labels[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
        if rest.startswith(",", pos):
            pos += 1
        elif not rest.startswith("}", pos):
            raise ParseError(f"line {lineno}: bad label set")


def _labels(rest: str, lineno: int) -> tuple[dict[str, str], str]:
    """Parse a label block; ``rest`` starts just after ``{``. Returns labels and the tail.

    Without backslashes a label value cannot contain a quote, so splitting on ``"`` puts
    every value at an odd index whatever else it contains (``,``, ``}``, ``=``, spaces).
    """
    if "\\" in rest:
        return _labels_escaped(rest, lineno)
    parts = rest.split('"')
    labels: dict[str, str] = {}
    last = len(parts) - 1
    i = pos = 0  # pos: where parts[i] starts in rest, so the tail is an exact suffix
    while True:
        if i > last:
            raise ParseError(f"line {lineno}: unterminated label value")
        key = parts[i]
        if i:
            if key[:1] == "}":
                return labels, rest[pos + 1 :]
            if key[:2] == ",}":
                return labels, rest[pos + 2 :]
            if key[:1] != ",":
                raise ParseError(f"line {lineno}: bad label set")
            key = key[1:]
        elif key[:1] == "}":
            return labels, rest[1:]
        name = key[:-1].strip()
        if i >= last or key[-1:] != "=" or not name.isidentifier():
            raise ParseError(f"line {lineno}: bad label set")
        value = parts[i + 1]
        labels[name] = value
        pos += len(parts[i]) + len(value) + 2
        i += 2


def _le(text: str, lineno: int) -> float:
    le = _LE_CACHE.get(text)
    if le is None:
        try:
            le = float(text)
        except ValueError:
            raise ParseError(f"line {lineno}: bad le value") from None
        if le != le:
            raise ParseError(f"line {lineno}: le is NaN")
        if len(_LE_CACHE) >= _LE_CACHE_MAX:
            # A target inventing bounds must not grow memory without end.
            _LE_CACHE.clear()
        _LE_CACHE[text] = le
    return le


def has_names(text: str, engine: str) -> bool:
    """Whether a line of ``text`` starts with one of ``engine``'s name prefixes."""
    return any(text.startswith(p) or ("\n" + p) in text for p in PREFIXES[engine])


def detect(text: str) -> str | None:
    """The engine family whose name prefix starts a line of ``text``, or None."""
    for engine in PREFIXES:
        if has_names(text, engine):
            return engine
    return None


class _Entry:
    """A normalized series being assembled; ``legacy`` says which name supplied it."""

    __slots__ = ("hist", "legacy", "lines", "over", "value")

    def __init__(self, legacy: bool, value: float = 0.0, hist: HistogramValue | None = None):
        self.legacy = legacy
        self.value = value
        self.hist = hist
        #: Source lines folded in, and the drop reason once the series broke a cap.
        self.lines = 0
        self.over: str | None = None


_Store = dict[Family, dict[SeriesKey, _Entry]]


_DEFAULT_LIMITS: Final = EngineLimits()


def parse(
    body: bytes | str,
    engine: str,
    limits: EngineLimits = _DEFAULT_LIMITS,
    keep: Mapping[str, Sequence[str]] | None = None,
    deadline: float | None = None,
) -> Snapshot:
    """Parse and normalize one exposition of ``engine`` under ``limits``.

    ``keep`` is the previous scrape's ``Snapshot.kept``: those values stay admitted while
    present, so a new value past a cap never displaces one that already has history.
    ``deadline`` is a ``time.monotonic()`` value past which ``ParseTimeout`` is raised.
    """
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
    except UnicodeDecodeError as exc:
        raise ParseError(f"not UTF-8 at byte {exc.start}") from None
    lookup = _LOOKUP[engine]
    store: _Store = {}
    gate = Gate(limits, keep or {})
    seen: set[str] = set()
    matched = 0
    lineno = 0
    for line in text.split("\n"):
        lineno += 1
        if not lineno % _CLOCK_EVERY and deadline is not None and time.monotonic() > deadline:
            raise ParseTimeout(f"stopped at line {lineno}")
        if not line:
            continue
        if line[0] == "#":
            if line.startswith("# EOF"):
                break
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
        elif space != -1:
            name = line[:space]
        else:
            name = line.split(None, 1)[0] if line.strip() else ""
        plans = lookup.get(name)
        if plans is None:
            if "\t" not in name:
                continue
            # Tabs are legal separators, just rare enough to keep off the fast path.
            name = name.split(None, 1)[0]
            plans = lookup.get(name)
            if plans is None:
                continue
        matched += 1
        tail = line[len(name) :]
        stripped = tail.lstrip()
        if stripped[:1] == "{":
            labels, tail = _labels(stripped[1:], lineno)
        else:
            labels = {}
        fields = tail.split()
        if not fields:
            raise ParseError(f"line {lineno}: no value")
        try:
            value = float(fields[0])
        except ValueError:
            raise ParseError(f"line {lineno}: bad value") from None
        if len(fields) > 1 and fields[1] != "#":
            try:
                float(fields[1])
            except ValueError:
                raise ParseError(f"line {lineno}: bad timestamp") from None
        stored = False
        for plan in plans:
            stored = _apply(plan, labels, value, store, lineno, gate) or stored
        if stored:
            # The name and label block as written: a repeat is a second sample of one series,
            # which Prometheus would reject rather than sum. (A string, not a tuple of the
            # labels: strings do not feed the cyclic garbage collector, which made the
            # tuples cost more than the rest of the parse.)
            ident = line[: len(line) - len(tail)]
            if ident in seen:
                raise ParseError(f"line {lineno}: the same series again")
            seen.add(ident)
    return _finish(engine, store, matched, gate)


def _apply(
    plan: _Plan, labels: dict[str, str], value: float, store: _Store, lineno: int, gate: Gate
) -> bool:
    """Fold one sample into its normalized series; whether it was kept (not capped)."""
    for k, v in plan.match:
        if labels.get(k) != v:
            return False
    key = tuple(map(labels.get, plan.key_src, plan.key_defaults))
    series = store.get(plan.target)
    if series is None:
        series = store[plan.target] = {}
    entry = series.get(key)
    if entry is None:
        if not gate.admit(plan.key_names, key):
            return False
    elif entry.legacy != plan.legacy:
        if plan.legacy:
            return False  # the current name already supplied this series
        entry = None  # the current name replaces what a legacy name supplied
    elif entry.over is not None:
        entry.lines += 1
        return False
    part = plan.part
    if part == _VALUE:
        value *= plan.scale
        if entry is None:
            entry = series[key] = _Entry(plan.legacy, value)
        elif plan.target.kind is Kind.GAUGE:
            # Series that differ only in dropped labels (e.g. SGLang tp_rank) report the
            # same state; summing a gauge would multiply it.
            entry.value = max(entry.value, value)
        else:
            entry.value += value
        entry.lines += 1
        return True
    if entry is None:
        hist = HistogramValue()
        entry = series[key] = _Entry(plan.legacy, hist=hist)
    else:
        assert entry.hist is not None
        hist = entry.hist
    entry.lines += 1
    if part == _BUCKET:
        le_text = labels.get("le")
        if le_text is None:
            raise ParseError(f"line {lineno}: bucket without le")
        le = _le(le_text, lineno) * plan.scale
        buckets = hist.buckets
        if len(buckets) >= gate.max_buckets and le not in buckets:
            # Dropping some bounds would leave a histogram that looks whole: drop it all.
            entry.over, hist.buckets = LE, {}
            return False
        buckets[le] = buckets.get(le, 0.0) + value
    elif part == _SUM:
        hist.sum = (hist.sum or 0.0) + value * plan.scale
    else:
        hist.count = (hist.count or 0.0) + value
    return True


def _finish(engine: str, store: _Store, matched: int, gate: Gate) -> Snapshot:
    finals = gate.finals()
    allowed = {name: set(values) for name, values in finals.items()}
    dropped = gate.dropped
    budget = gate.limits.max_series
    out: dict[Family, dict[SeriesKey, Value]] = {}
    for family, series in store.items():
        names = _key_names(family)
        kept: dict[SeriesKey, Value] = {}
        for key, entry in series.items():
            reason = entry.over or next(
                (n for n, v in zip(names, key, strict=True) if v not in allowed[n]), None
            )
            hist = entry.hist
            if reason is None:
                if hist is not None:
                    _complete(hist)
                    _check_monotonic(family, hist)
                cost = 1 if hist is None else (
                    len(hist.buckets) + (hist.count is not None) + (hist.sum is not None)
                )
                if cost > budget:
                    reason = SERIES
                else:
                    budget -= cost
            if reason is not None:
                dropped[reason] += entry.lines
            else:
                kept[key] = entry.value if hist is None else hist
        if kept:
            out[family] = kept
    return Snapshot(engine, out, finals, dict(dropped), matched)


def _check_monotonic(family: Family, hist: HistogramValue) -> None:
    last = -_INF
    for _, count in hist.sorted_buckets():
        if count < last:
            raise ParseError(f"{family.name}: bucket counts decrease as le grows")
        last = count


def _complete(hist: HistogramValue) -> None:
    """Restore the +Inf bucket / _count identity where an exposition carries only one.

    Both are the total observation count by definition; Prometheus needs the +Inf bucket
    for histogram_quantile and the _count for means.
    """
    inf = hist.buckets.get(_INF)
    if inf is None and hist.count is not None and hist.buckets:
        hist.buckets[_INF] = hist.count
    elif inf is not None and hist.count is None:
        hist.count = inf
