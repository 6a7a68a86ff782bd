"""The verdict people see, page on and alert on: a new primary verdict only once the chain has
concluded it for ``diagnosis.confirm`` evaluations in a row.

One evaluation can be wrong for reasons that are not the system's: a window edge where one
layer's data is a scrape older than another's, one slow request entering or leaving the
window. Paging on that costs more than the few seconds the hold adds, so a change of the
primary verdict (healthy to a fault, a fault to healthy, fault A to fault B) waits until the
candidate has held; until then the previous shown diagnosis stays, whole (its time, verdicts
and steps), with the candidate in its ``pending`` field. While the primary stays the same,
each evaluation is shown at once: its numbers, its secondary verdicts and its status
(degraded or failing) are news, not a change of cause.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from exporter.diagnosis.result import SCOPE_KEYS, Diagnosis, Pending

#: What a primary verdict is, for the hold: its layer, cause and scope, or the status of a
#: diagnosis without verdicts (healthy or unknown).
Identity = tuple[str, ...]


def identity(diagnosis: Diagnosis) -> Identity:
    if not diagnosis.verdicts:
        return (diagnosis.status,)
    v = diagnosis.verdicts[0]
    return (v.layer, v.cause, *(f"{k}={v.scope[k]}" for k in SCOPE_KEYS if v.scope.get(k)))


@dataclasses.dataclass
class _Candidate:
    identity: Identity
    since: dt.datetime
    evaluations: int


class Hold:
    """Turns the chain's diagnoses, one per evaluation, into the shown ones."""

    def __init__(self) -> None:
        #: The last confirmed diagnosis (without ``pending``); None before the first.
        self.shown: Diagnosis | None = None
        self._candidate: _Candidate | None = None

    def update(self, diagnosis: Diagnosis, confirm: int) -> Diagnosis:
        """The diagnosis to show after the chain concluded ``diagnosis``."""
        new = identity(diagnosis)
        # The first diagnosis replaces "no evaluation yet", not a verdict anyone saw.
        if self.shown is None or new == identity(self.shown) or confirm <= 1:
            return self._show(diagnosis)
        c = self._candidate
        if c is not None and c.identity == new:
            c.evaluations += 1
        else:
            c = self._candidate = _Candidate(new, diagnosis.at, 1)
        if c.evaluations >= confirm:
            return self._show(diagnosis)
        primary = diagnosis.verdicts[0] if diagnosis.verdicts else None
        pending = Pending(diagnosis.status, primary, c.since, c.evaluations, confirm)
        return dataclasses.replace(self.shown, pending=pending)

    def _show(self, diagnosis: Diagnosis) -> Diagnosis:
        self.shown, self._candidate = diagnosis, None
        return diagnosis
