"""Step 5: the host under the engines, where the GPU is not the answer: its CPUs, memory
and disks, from the kernel's pressure stall information (PSI) of the engine's own cgroup
(``host.engine_cgroup`` or ``engine_process``). The whole host's pressure is not judged: on
a busy host some task always waits somewhere, which says nothing of the engine's."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.causes import CPU_SATURATED, IO_PRESSURE, MEMORY_PRESSURE, Cause
from exporter.diagnosis.host_window import HostWindow
from exporter.diagnosis.result import Evidence, Step, StepResult
from exporter.diagnosis.steps.base import Case, EngineState, Finding, Outcome, Standing
from exporter.diagnosis.steps.words import pct, strength

#: Evidence names: a PSI total's share of the window, and the engine cgroup's CPU.
PRESSURE = f"rate({metrics.HOST_PRESSURE.name})"
ENGINE_CPU = f"rate({metrics.HOST_ENGINE_CPU.name})"
MEMORY_AVAILABLE = f"{metrics.HOST_MEMORY_AVAILABLE.name} / {metrics.HOST_MEMORY_TOTAL.name}"
SWAP = f"rate({metrics.HOST_SWAP.name})"


def resources(case: Case) -> tuple[tuple[str, Cause, float, str], ...]:
    """(resource, its cause, its line, what a task waits for)."""
    t = case.thresholds
    return (("cpu", CPU_SATURATED, t.host_cpu_pressure, "a CPU"),
            ("memory", MEMORY_PRESSURE, t.host_memory_pressure, "memory"),
            ("io", IO_PRESSURE, t.host_io_pressure, "IO"))


def _extra(case: Case, h: HostWindow, resource: str) -> list[Evidence]:
    """What says why, beside the pressure."""
    out: list[Evidence] = []
    if resource == "cpu":
        if h.engine_cpu is not None:
            out.append(case.evidence(ENGINE_CPU, h.engine_cpu))
        if h.cpu_busy is not None:
            out.append(case.evidence(f"busy share of {metrics.HOST_CPU.name}", h.cpu_busy))
    elif resource == "memory":
        if h.memory_available_ratio is not None:
            out.append(case.evidence(MEMORY_AVAILABLE, h.memory_available_ratio))
        if h.swap_pages is not None:
            out.append(case.evidence(SWAP, h.swap_pages, {}, 0))
    return out


def waited_most(case: Case, site: str) -> str:
    """For an idle GPU under a slow engine: which resource the engine's cgroup on ``site``
    waited for most (the field guides' next place to look), or that the host is not
    measured. A resource over its line is the host step's own finding, which takes the
    GPU's verdict over; this says where the time went when none is."""
    measured = [h for h in case.obs.hosts
                if not h.vantage and h.site == site and h.engine_measured]
    if not measured:
        return ("; the host under it is not measured (host.engine_cgroup or engine_process "
                "would say whether its CPU, memory or IO holds the engine)")
    shares = [(h.pressure.get((metrics.ENGINE_SCOPE, r), 0.0), what, line)
              for h in measured for r, _, line, what in resources(case)]
    share, what, line = max(shares)
    return (f"; the engine's cgroup waited most for {what}, {pct(share)} of the window "
            f"(under its {pct(line)} line): look past the host too, at the network and "
            "the clients")


def _on(case: Case, h: HostWindow) -> list[EngineState]:
    """The engines on this host: those of its site (every engine on a single exporter);
    none on a vantage point's."""
    return [] if h.vantage else [st for st in case.engines if st.engine.site == h.site]


def _findings(case: Case, h: HostWindow, engines: list[EngineState],
              cleared: list[Evidence]) -> list[Finding]:
    scope_of = metrics.ENGINE_SCOPE  # only the engine's cgroup is judged
    out: list[Finding] = []
    for resource, cause, line, what in resources(case):
        share = h.pressure.get((scope_of, resource))
        if share is None:
            continue
        e = case.evidence(PRESSURE, share, {"scope": scope_of, "resource": resource,
                                            "kind": metrics.PRESSURE_KINDS[0]}, line)
        if share <= line:
            cleared.append(e)
            continue
        scope = {"site": h.site, "vantage": h.vantage}
        if len(engines) == 1:
            scope["engine"] = engines[0].engine.engine
        headline = (f"The engine's cgroup had a task waiting for {what} {pct(share)} of the "
                    f"window (line {pct(line)})")
        out.append(Finding(cause, {k: v for k, v in scope.items() if v},
                           headline, [e, *_extra(case, h, resource)], strength(share, line, 0.7),
                           tuple(p for st in engines for p in st.probes),
                           Standing.OVER_LINE))
    # One resource's waits can be another's doing (Cause.absorbs): a working set over its
    # memory is read back from disk as it is evicted, and the kernel counts both.
    for f in out:
        for other in out:
            if other.cause in f.cause.absorbs and not other.taken_over:
                f.absorb(other)
    return [f for f in out if not f.taken_over]


def evaluate(case: Case) -> Outcome:
    """A finding takes over what it explains of the engines on its host (``Cause.absorbs``):
    their time splits, and an idle GPU under them (the time went to the host)."""
    findings: list[Finding] = []
    cleared: list[Evidence] = []
    decided = False
    for h in case.obs.hosts:
        if case.failing("host"):
            break  # what we have is stale
        states = _on(case, h)
        engines = {st.engine.engine for st in states}
        if not engines or not h.engine_measured:
            continue  # a probe-only vantage point, or no engine cgroup named
        decided = True
        found = _findings(case, h, states, cleared)
        for f in found:
            for ef in case.findings:
                if ef.cause in f.cause.absorbs and not ef.taken_over and \
                        ef.scope.get("engine") in engines:
                    f.absorb(ef)
        findings.extend(found)
    outcome = Outcome.of("host", findings, cleared, decided)
    if not decided and not case.failing("host"):
        outcome.step = Step("host", StepResult.NOT_CONFIGURED)
    return outcome
