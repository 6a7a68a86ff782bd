"""Which of the exporter's samples the embedded history keeps, derived from the declarations:
the fine windows keep every sample a declaration reads (``KINDS``), the coarse history
(once a minute, for ``diagnosis.history``) those read over a baseline, over the whole
history, or by a field the ``/`` page draws over the last hour (``COARSE_SAMPLES``). A new
observation is kept without a line here. Counters and histograms are stored monotonic
(reset-corrected), gauges as they are."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from exporter import metrics
from exporter.diagnosis import declare
from exporter.diagnosis.observables import TABLES

#: (sample name, labels, value) as a registry's collect() yields them.
RawSample = tuple[str, Mapping[str, str], float]

#: Read by the history itself, not by a declaration: whether each snapshot is in a peak
#: window, and when each engine was last scraped (what a probe is aligned to, alignment.py).
PEAK = metrics.EXPORTER_PEAK_WINDOW.name
ALIGNMENT = metrics.EXPORTER_CHECK_LAST_SUCCESS.name


def sample_names(family: metrics.Family) -> tuple[str, ...]:
    if family.kind is metrics.Kind.HISTOGRAM:
        return (f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count")
    return (family.name,)


#: sample name -> its family, over the whole schema.
FAMILY_OF: dict[str, metrics.Family] = {
    name: f for f in metrics.SCHEMA.values() for name in sample_names(f)}


def _samples(leaf: declare.Leaf, kind: declare.WindowKey) -> Iterator[str]:
    """The samples one leaf reads."""
    if isinstance(leaf, declare.Quantile | declare.Grid):
        yield f"{leaf.family.name}_bucket"
    elif isinstance(leaf, declare.PeakRatio):
        yield from (leaf.num, leaf.den)
    elif isinstance(leaf, declare.InPeak):
        yield kind.presence
    elif isinstance(leaf, declare.Increase | declare.MeanOverTime | declare.MaxOverTime
                    | declare.Last | declare.Seen):
        yield leaf.sample
    # A recorded series is the Prometheus source's alone.


def _history_long(leaf: declare.Leaf) -> bool:
    """Read over the whole history kept, not the window."""
    return isinstance(leaf, declare.PeakRatio | declare.Seen) or (
        isinstance(leaf, declare.MaxOverTime) and leaf.history)


def _read() -> tuple[set[str], set[str]]:
    """(every sample a declaration reads, those the coarse history must keep)."""
    fine, coarse = {PEAK, ALIGNMENT}, set()
    for table in TABLES:
        for o in table:
            # A window's presence: what a baseline's coverage and a never-run check count.
            fine.add(o.kind.presence)
            for leaf, base in declare.in_baseline(o.expr):
                names = set(_samples(leaf, o.kind))
                fine |= names
                if base or o.trend or _history_long(leaf):
                    coarse |= names
    return fine, coarse


_FINE, _COARSE = _read()
#: Sections whose counters started before the exporter: an engine's, and the kernel's; and
#: the GPU driver's counters since it loaded. The GPU's XID count is the exporter's own.
STARTED_BEFORE = ("engine", "host")
DRIVER_COUNTERS = frozenset(f.name for f in (
    metrics.GPU_ENERGY, metrics.GPU_PCIE_REPLAYS, metrics.GPU_NVLINK_ERRORS,
    metrics.GPU_ECC_ERRORS))
#: sample name -> (monotonic, counts from zero on first appearance: only the exporter's
#: own counters are born at zero).
KINDS: dict[str, tuple[bool, bool]] = {
    name: (FAMILY_OF[name].kind is not metrics.Kind.GAUGE,
           FAMILY_OF[name].section not in STARTED_BEFORE
           and FAMILY_OF[name].name not in DRIVER_COUNTERS)
    for name in sorted(_FINE)}
#: The family names a registry's collect() yields (counters without ``_total``).
COLLECTED: frozenset[str] = frozenset(FAMILY_OF[name].base for name in KINDS)
COARSE_SAMPLES: frozenset[str] = frozenset(_COARSE)
#: A gauge keeps its highest value since the previous coarse snapshot, so a batch size or
#: route class held between two of them is not lost.
COARSE_GAUGES: tuple[str, ...] = tuple(
    name for name in sorted(_COARSE) if FAMILY_OF[name].kind is metrics.Kind.GAUGE)


def raw_samples(families: Iterable[object]) -> list[RawSample]:
    """The samples of the window families among ``families`` (a registry's collect())."""
    out: list[RawSample] = []
    for family in families:
        if getattr(family, "name", None) not in COLLECTED:
            continue
        for s in getattr(family, "samples", ()):
            if s.name in KINDS:
                out.append((s.name, s.labels, s.value))
    return out
