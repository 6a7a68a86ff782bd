"""The window and its last seconds as one answer, as a multi-window burn alert pages on its
long window and resets on its short one.

The window (``diagnosis.window``) gives a verdict its significance: a P95 over ten minutes of
requests, a loss ratio over hundreds of packets. It also keeps a fault's numbers for as long
as they stay in it, so a fixed fault would stay red for most of a window. So the embedded
source reads the last ``diagnosis.short_window`` of it too: once the probes feel nothing
there (its symptom step rules every probe out), a verdict of the window is shown only where
the short window names it as well (a path still losing packets now); the others are over.
While the probes feel something, or the short window holds too few requests to say, the
window answers.
"""

from __future__ import annotations

import dataclasses

from exporter.diagnosis.result import Diagnosis, StepResult, Verdict


def _identity(v: Verdict) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    return v.layer, v.cause, tuple(sorted(v.scope.items()))


def combine(window: Diagnosis, recent: Diagnosis) -> Diagnosis:
    """``window``, or, where the probes feel nothing over ``recent``, ``recent``'s steps with
    the window's verdicts ``recent`` names too."""
    if recent.steps[0].result is not StepResult.RULED_OUT:
        return window
    now = {_identity(v) for v in recent.verdicts}
    kept = tuple(v for v in window.verdicts if _identity(v) in now)
    return dataclasses.replace(recent, verdicts=kept, status="degraded" if kept else "healthy")
