"""What every step shares: the case it reads (the window, the thresholds, and what the earlier
steps left for the later ones), the outcome it returns, and a finding before it becomes a
verdict."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from exporter.config.values import format_duration
from exporter.diagnosis.causes import Cause, Failure, Symptom
from exporter.diagnosis.observations import EngineWindow, GpuWindow, Observations, ProbeWindow
from exporter.diagnosis.result import Evidence, Step, StepName, StepResult
from exporter.diagnosis.steps.words import bucket_of
from exporter.diagnosis.thresholds import Thresholds


@dataclass
class ProbeSymptoms:
    """One probe's symptoms. ``open`` shrinks as steps explain them (attribution)."""

    probe: ProbeWindow
    found: tuple[Symptom, ...]
    breached: bool  # over its SLO or failure ratio (not only drifting)
    evidence: tuple[Evidence, ...]
    #: Symptom -> the phrase a summary quotes ("TTFT P95 1.8 s over its 1 s SLO").
    phrases: dict[Symptom, str]
    #: How the most frequent failure failed, None without failures.
    failure: Failure | None = None
    open: set[Symptom] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.open = set(self.found)


@dataclass
class EngineState:
    """What the later steps need to know about one engine the engine step judged: is it
    slow, and how."""

    engine: EngineWindow
    probes: tuple[ProbeSymptoms, ...]
    slow_first: bool  # its TTFT (or a linked probe's first token) is over the line
    slow_decode: bool
    slo_ttft: float
    slo_tpot: float
    own: bool  # its own TTFT or ITL is over the line, whatever the probes show

    @property
    def slow(self) -> bool:
        return self.slow_first or self.slow_decode


class Standing(IntEnum):
    """Why a finding is a verdict when it takes over no symptom; lower ranks first among
    verdicts that explain as much."""

    #: A fault on its own (an engine down, an XID): always a verdict.
    FAULT = 0
    #: Its own numbers are over its line (an alert's, where one stands for the cause).
    OVER_LINE = 1
    #: It names a cause of what the probes it slows feel, and stands on that alone.
    EXPLAINS = 2


@dataclass
class Finding:
    """One implicated cause, before ordering and attribution make it a ``Verdict``."""

    cause: Cause
    scope: dict[str, str]
    #: The cause in one clause, without the symptoms it explains (those are added by chain).
    headline: str
    evidence: list[Evidence]
    strength: float  # 0..1, from how far past its threshold the evidence is
    #: The symptomatic probes whose symptoms it may take over; none: no probe could show it.
    probes: tuple[ProbeSymptoms, ...] = ()
    standing: Standing = Standing.EXPLAINS
    #: Narrower than the cause's own, for this finding (a probe's own prompt that grew
    #: explains its first token, not the stream).
    narrower: frozenset[Symptom] | None = None
    #: Filled by the chain: probe name -> the symptoms this finding took over.
    took: dict[str, set[Symptom]] = field(default_factory=dict)
    #: Set when a deeper finding took this one over: it is that one's evidence now.
    taken_over: bool = False

    def __post_init__(self) -> None:
        if self.cause.fault:
            self.standing = Standing.FAULT

    @property
    def explains(self) -> frozenset[Symptom]:
        return self.cause.explains if self.narrower is None else self.narrower

    @property
    def unseen(self) -> bool:
        """No probe that shows symptoms rides it when it is found: none could have felt it."""
        return not self.probes

    def claim(self) -> None:
        """Take the still-open symptoms of the linked probes this cause explains."""
        for ps in self.probes:
            taken = ps.open & self.explains
            if "failures" in taken and ps.failure not in self.cause.fails:
                taken.discard("failures")
            if taken:
                self.took.setdefault(ps.probe.probe, set()).update(taken)
                ps.open -= taken

    def absorb(self, other: Finding) -> None:
        """Take over a shallower finding (an engine time split): its evidence, the symptoms
        it took, its probes, its strength and its standing become this one's."""
        self.evidence.extend(e for e in other.evidence if e not in self.evidence)
        for name, taken in other.took.items():
            self.took.setdefault(name, set()).update(taken)
        self.probes = (*self.probes, *(p for p in other.probes if p not in self.probes))
        self.strength = max(self.strength, other.strength)
        self.standing = min(self.standing, other.standing)
        other.taken_over = True


@dataclass
class Case:
    """What every step reads: one window of observations, the thresholds, and what the steps
    before it left for the later ones. A step adds to it only the fields named for it."""

    obs: Observations
    thresholds: Thresholds
    window: str  # the window as the evidence prints it ("10m")
    #: The symptom step's: the symptomatic probes, and whether any probe had enough
    #: requests to be held to its SLO.
    sick: list[ProbeSymptoms] = field(default_factory=list)
    judged: bool = False
    #: The network step's: per probe, the TTFT between client and engine, over its share.
    splits: list[Evidence] = field(default_factory=list)
    #: The engine step's: the engines it judged, and those it could not observe.
    engines: list[EngineState] = field(default_factory=list)
    unobservable: list[str] = field(default_factory=list)
    #: Every step's findings so far, in chain order (the chain adds them).
    findings: list[Finding] = field(default_factory=list)

    @classmethod
    def of(cls, obs: Observations, thresholds: Thresholds) -> Case:
        return cls(obs, thresholds, format_duration(obs.window))

    def failing(self, kind: str, name: str = "") -> bool:
        """Whether a check of ``kind`` (for ``name`` when given) failed in the window."""
        prefix = f"{kind}/"
        return any(c.startswith(prefix) and (not name or c[len(prefix):] == name
                                             or c[len(prefix):].startswith(name + "/"))
                   for c in self.obs.failing_checks)

    def evidence(self, metric: str, value: float, labels: dict[str, str] | None = None,
                 threshold: float | None = None, baseline: float | None = None,
                 grid: Sequence[float] = ()) -> Evidence:
        """``grid``: for a histogram quantile, the histogram's bucket bounds, so the evidence
        says which two the quantile lies between."""
        return Evidence(metric, float(value), {k: v for k, v in (labels or {}).items() if v},
                        threshold, baseline, self.window, bucket_of(value, grid))

    def engines_of(self, probe: ProbeWindow) -> list[EngineWindow]:
        """The engine a probe is linked to; an unlinked probe beside one engine is its."""
        if probe.engine:
            return [e for e in self.obs.engines if e.engine == probe.engine]
        return list(self.obs.engines) if len(self.obs.engines) == 1 else []

    def gpus_of(self, engine: EngineWindow) -> list[GpuWindow]:
        named = [g for g in self.obs.gpus if g.engine == engine.engine]
        if named:
            return named
        return [g for g in self.obs.gpus if not g.engine and g.site == engine.site]

    def linked(self, e: EngineWindow) -> tuple[ProbeSymptoms, ...]:
        """The symptomatic probes of engine ``e``."""
        return tuple(s for s in self.sick if e in self.engines_of(s.probe))


@dataclass
class Outcome:
    """What every step returns: its record in the diagnosis, and the causes it implicates."""

    step: Step
    findings: list[Finding]

    @classmethod
    def of(cls, name: StepName, findings: list[Finding], cleared: Iterable[Evidence],
           decided: bool) -> Outcome:
        """implicated with the findings' evidence, ruled_out with what cleared it, or no_data
        when nothing could be decided."""
        if findings:
            return cls(Step(name, StepResult.IMPLICATED,
                            tuple(e for f in findings for e in f.evidence)), findings)
        return cls(Step(name, StepResult.RULED_OUT if decided else StepResult.NO_DATA,
                        tuple(cleared)), findings)


@dataclass
class Part:
    """What one part of a step (a path, the real users, a probe's own timing) found, what
    cleared, and whether it could decide anything."""

    findings: list[Finding] = field(default_factory=list)
    cleared: list[Evidence] = field(default_factory=list)
    decided: bool = False


def peak_drift(case: Case, in_peak: bool,
               loss: tuple[float | None, Evidence | None, float | None],
               rtt: tuple[float | None, Evidence | None, float | None]) -> list[Evidence]:
    """Of (value, its evidence, its off-peak baseline) for a loss ratio and an RTT, the
    evidence a peak window holds over the off-peak: a loss of at least ``peak_min_loss``
    and ``drift_ratio`` x its baseline, an RTT ``drift_ratio`` x its own. Congestion on a
    carrier's interconnect, for a path and for its real users alike."""
    lines, peak = case.thresholds, []
    (value, value_e, value_base), (ms, ms_e, ms_base) = loss, rtt
    if in_peak and value is not None and value_e is not None and value_base is not None \
            and value >= lines.peak_min_loss and value > value_base * lines.drift_ratio:
        peak.append(value_e)
    if in_peak and ms is not None and ms_e is not None and ms_base and \
            ms > ms_base * lines.drift_ratio:
        peak.append(ms_e)
    return peak
