"""The caps on what one engine target adds to /metrics, applied while its exposition is read.

A target may report any number of label values; the exporter re-exposes a bounded number
(``EngineLimits`` in the config): per label, distinct values per target; per histogram
series, ``le`` bounds; in all, Prometheus series. A new normalized series is admitted only
while every one of its labels has room, so a line past a cap is counted and forgotten: the
memory a scrape holds is bounded by the caps, not by what the engine sends.

Values admitted on the previous scrape (``keep``) stay admitted while present, so a newcomer
never displaces a series that already has history; among new values the first to appear in
the exposition win.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from exporter.config.models import EngineLimits
from exporter.metrics import ENGINE_DROP_REASONS

#: Labels capped by their own setting; every other engine-derived label by max_label_values.
_CAP_FIELD = {"model": "max_models", "dp_rank": "max_dp_ranks"}
LE, SERIES = "le", "series"
#: The drop reasons that name a label (the rest: too many buckets, too many series).
LABEL_REASONS = tuple(r for r in ENGINE_DROP_REASONS if r not in (LE, SERIES))


def cap_of(limits: EngineLimits, label: str) -> int:
    """The cap on distinct values of one normalized label per target."""
    cap: int = getattr(limits, _CAP_FIELD.get(label, "max_label_values"))
    return cap


class _Label:
    """Admission state of one label during one scrape."""

    __slots__ = ("cap", "keep", "new", "seen")

    def __init__(self, cap: int, keep: Sequence[str]) -> None:
        self.cap = cap
        self.keep = dict.fromkeys(keep[:cap])
        #: Values of ``keep`` present in this exposition.
        self.seen: set[str] = set()
        #: New values admitted for now, in order of appearance; at most ``cap``, since the
        #: kept values that turn out absent leave their places to them at the end.
        self.new: dict[str, None] = {}

    def final(self) -> tuple[str, ...]:
        kept = [v for v in self.keep if v in self.seen]
        return (*kept, *list(self.new)[: self.cap - len(kept)])


class Gate:
    """Admits new normalized series under the caps; counts the source lines it turns away."""

    def __init__(self, limits: EngineLimits, keep: Mapping[str, Sequence[str]]) -> None:
        self.limits = limits
        self.max_buckets = limits.max_buckets
        self._keep = keep
        self._labels: dict[str, _Label] = {}
        self.dropped: Counter[str] = Counter()

    def _label(self, name: str) -> _Label:
        label = self._labels.get(name)
        if label is None:
            assert name in LABEL_REASONS, f"engine label {name} has no drop reason"
            label = self._labels[name] = _Label(
                cap_of(self.limits, name), self._keep.get(name, ())
            )
        return label

    def admit(self, names: Sequence[str], key: Sequence[str]) -> bool:
        """Whether the new series ``key`` (values of ``names``) fits; counts it if not."""
        labels = self._labels
        fresh: list[tuple[_Label, str]] = []
        for name, value in zip(names, key, strict=True):
            label = labels.get(name) or self._label(name)
            if value in label.new or value in label.seen:
                continue
            if value not in label.keep and len(label.new) >= label.cap:
                self.dropped[name] += 1
                return False
            fresh.append((label, value))
        for label, value in fresh:
            if value in label.keep:
                label.seen.add(value)
            else:
                label.new[value] = None
        return True

    def finals(self) -> dict[str, tuple[str, ...]]:
        """The values admitted in the end, per label (what the next scrape keeps)."""
        return {name: label.final() for name, label in self._labels.items()}
