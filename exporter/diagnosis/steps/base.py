"""What the steps share: the evaluation context, a finding before it becomes a verdict, and
the small helpers that turn numbers into evidence and sentences."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from exporter.config.values import format_duration
from exporter.diagnosis.observations import EngineWindow, GpuWindow, Observations, ProbeWindow
from exporter.diagnosis.result import Evidence, Step, StepName, StepResult, Symptom
from exporter.diagnosis.thresholds import Thresholds

#: Probe outcome -> the kind of failure, so that only a cause that can produce it claims a
#: probe's failures (a 429 is rate limiting, never a slow engine).
FAILURE_KINDS: dict[str, str] = {
    "rate_limited": "rate_limited",
    "timeout_connect": "timeout", "timeout_first_token": "timeout", "timeout_total": "timeout",
    "connect_error": "connect",
    "http_4xx": "server", "http_5xx": "server",
    "stream_reset": "stream", "stream_error": "stream", "protocol_error": "stream",
    "empty": "stream",
}
ANY_FAILURE: frozenset[str] = frozenset(("timeout", "connect", "server", "stream"))


@dataclass
class ProbeSymptoms:
    """One probe's symptoms. ``open`` shrinks as steps explain them (attribution)."""

    probe: ProbeWindow
    found: tuple[Symptom, ...]
    breached: bool  # over its SLO or failure ratio (not only drifting)
    evidence: tuple[Evidence, ...]
    #: Symptom -> the phrase a summary quotes ("TTFT P95 1.8 s over its 1 s SLO").
    phrases: dict[Symptom, str]
    #: The most frequent failure's kind (FAILURE_KINDS), "" without failures.
    failure_kind: str = ""
    open: set[Symptom] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.open = set(self.found)


@dataclass
class Finding:
    """One implicated cause, before ordering and attribution make it a ``Verdict``."""

    layer: str
    cause: str
    scope: dict[str, str]
    #: The cause in one clause, without the symptoms it explains (those are added by chain).
    headline: str
    evidence: list[Evidence]
    strength: float  # 0..1, from how far past its threshold the evidence is
    #: Symptoms this cause can produce, and the probes whose symptoms it may claim.
    explains: frozenset[Symptom]
    probes: tuple[ProbeSymptoms, ...] = ()
    #: A fault on its own (engine down, XID): reported even where no probe shows a symptom.
    hard: bool = False
    #: Reported even without a symptomatic probe: no probe could have shown it.
    unobserved: bool = False
    #: The layer's own numbers are over the line (an engine's own TTFT over the SLO): kept
    #: even when every linked probe's symptom was explained by an earlier step.
    own: bool = False
    #: Failure kinds (FAILURE_KINDS values) this cause can produce.
    fails: frozenset[str] = ANY_FAILURE
    #: Filled by the chain: probe name -> the symptoms this finding took over.
    claimed: dict[str, set[Symptom]] = field(default_factory=dict)

    def claim(self) -> None:
        """Take the still-open symptoms of the linked probes this cause explains."""
        for ps in self.probes:
            taken = ps.open & self.explains
            if "failures" in taken and ps.failure_kind not in self.fails:
                taken.discard("failures")
            if taken:
                self.claimed.setdefault(ps.probe.probe, set()).update(taken)
                ps.open -= taken

    def absorb(self, other: Finding) -> None:
        """Fold a shallower finding (an engine time split) into this deeper cause."""
        self.evidence.extend(e for e in other.evidence if e not in self.evidence)
        for name, taken in other.claimed.items():
            self.claimed.setdefault(name, set()).update(taken)
        self.probes = (*self.probes, *(p for p in other.probes if p not in self.probes))
        self.strength = max(self.strength, other.strength)


@dataclass
class Context:
    obs: Observations
    th: Thresholds
    window: str  # the window as the evidence prints it ("10m")

    @classmethod
    def of(cls, obs: Observations, th: Thresholds) -> Context:
        return cls(obs, th, format_duration(obs.window))

    def failing(self, kind: str, name: str = "") -> bool:
        """Whether a check of ``kind`` (for ``name`` when given) failed in the window."""
        prefix = f"{kind}/"
        return any(c.startswith(prefix) and (not name or c[len(prefix):] == name
                                             or c[len(prefix):].startswith(name + "/"))
                   for c in self.obs.failing_checks)

    def ev(self, metric: str, value: float, labels: dict[str, str] | None = None,
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


def bucket_of(value: float, grid: Sequence[float]) -> tuple[float, float] | None:
    """The bucket bounds a histogram quantile lies between: histogram_quantile interpolates
    linearly inside the bucket the rank falls in (from 0 in the first, and answers the
    highest finite bound past it), so the quantile is known to no finer than these two."""
    upper = next((b for b in grid if value <= b), None)
    if upper is None:
        return None
    return max((b for b in grid if b < upper), default=0.0), upper


def resolution(value: float, grid: Sequence[float], threshold: float, what: str) -> str:
    """A clause for a summary when ``threshold`` lies inside the quantile's bucket: whether
    the quantile is over it is then the interpolation's guess, not a measurement (vLLM's
    TTFT buckets jump from 0.25 s to 0.5 s: a 0.3 s SLO sits inside one)."""
    bucket = bucket_of(value, grid)
    if bucket is None or not bucket[0] < threshold < bucket[1]:
        return ""
    return (f" (the engine's histogram has no bucket between {secs(bucket[0])} and "
            f"{secs(bucket[1])}, so its P95 against the {secs(threshold)} {what} is "
            "interpolated)")


def step(name: StepName, result: StepResult, evidence: Iterable[Evidence] = ()) -> Step:
    return Step(name, result, tuple(evidence))


def conclude(name: StepName, findings: list[Finding], cleared: list[Evidence],
             decided: bool) -> Step:
    """implicated with the findings' evidence, ruled_out with what cleared it, or no_data
    when nothing could be decided."""
    if findings:
        return step(name, "implicated", (e for f in findings for e in f.evidence))
    return step(name, "ruled_out" if decided else "no_data", cleared)


def strength(value: float, threshold: float, base: float = 0.6) -> float:
    """Confidence from how far past its threshold a value is: ``base`` at the threshold,
    rising to 0.95 at twice it. A value just over a line is weaker evidence than one far
    past it."""
    if threshold <= 0:
        return 0.95
    over = min(1.0, max(0.0, value / threshold - 1.0))
    return round(base + (0.95 - base) * over, 3)


def secs(value: float) -> str:
    """Seconds the way a pager reads them: 1.8 s, 450 ms."""
    if value >= 1:
        return f"{value:.3g} s"
    return f"{value * 1000:.3g} ms"


def pct(value: float) -> str:
    return f"{value * 100:.2g}%" if value < 0.1 else f"{value * 100:.0f}%"


def probe_scope(p: ProbeWindow) -> dict[str, str]:
    return {k: v for k, v in (("carrier", p.carrier), ("target", p.target),
                              ("probe", p.probe), ("engine", p.engine), ("site", p.site),
                              ("vantage", p.vantage)) if v}


def probe_labels(p: ProbeWindow) -> dict[str, str]:
    return {"probe": p.probe, "target": p.target, "carrier": p.carrier, "vantage": p.vantage}


def peak_drift(ctx: Context, in_peak: bool,
               loss: tuple[float | None, Evidence | None, float | None],
               rtt: tuple[float | None, Evidence | None, float | None]) -> list[Evidence]:
    """Of (value, its evidence, its off-peak baseline) for a loss ratio and an RTT, the
    evidence a peak window holds over the off-peak: a loss of at least ``peak_min_loss``
    and ``drift_ratio`` x its baseline, an RTT ``drift_ratio`` x its own. Congestion on a
    carrier's interconnect, for a path and for its real users alike."""
    th, peak = ctx.th, []
    (value, value_e, value_base), (ms, ms_e, ms_base) = loss, rtt
    if in_peak and value is not None and value_e is not None and value_base is not None \
            and value >= th.peak_min_loss and value > value_base * th.drift_ratio:
        peak.append(value_e)
    if in_peak and ms is not None and ms_e is not None and ms_base and \
            ms > ms_base * th.drift_ratio:
        peak.append(ms_e)
    return peak
