"""Step 4: the GPUs under a slow engine: throttling, memory full, XID errors, too idle to be
the bottleneck, DRAM bandwidth saturated while decode is slow, a degraded link. A short GPU
disguises itself as a slow network, which is why this step comes after the network and
engine ones."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.causes import (
    INTERCONNECT,
    MEMORY_BANDWIDTH,
    MEMORY_FULL,
    THROTTLING,
    UNDERUTILIZED,
    XID_ERRORS,
    Cause,
)
from exporter.diagnosis.observations import GpuWindow
from exporter.diagnosis.result import Evidence, Step, StepResult
from exporter.diagnosis.steps.base import Case, EngineState, Finding, Outcome, Standing
from exporter.diagnosis.steps.host import waited_most
from exporter.diagnosis.steps.words import pct, strength

MEMORY_RATIO = f"{metrics.GPU_MEMORY_USED.name} / {metrics.GPU_MEMORY_TOTAL.name}"
LINKS_DOWN = f"count({metrics.GPU_NVLINK_UP.name} == 0)"


def _causes(case: Case, g: GpuWindow, st: EngineState | None,
            cleared: list[Evidence]) -> list[tuple[Cause, str, list[Evidence], float]]:
    """(cause, clause, evidence, strength) of one GPU."""
    lines = case.thresholds
    lab = {"gpu": g.gpu, "name": g.name}
    out: list[tuple[Cause, str, list[Evidence], float]] = []
    if g.xid_errors > 0:
        out.append((XID_ERRORS, f"{g.xid_errors} XID error(s)",
                    [case.evidence(metrics.GPU_XID_ERRORS.name, g.xid_errors, lab, 0)], 0.9))
    slow = st is not None and st.slow
    throttled = [r for r in g.clock_events if r in lines.throttle_reasons]
    if throttled:
        ev = [case.evidence(metrics.GPU_CLOCK_EVENT.name, 1, {**lab, "reason": r}, 0)
              for r in throttled]
        out.append((THROTTLING, f"throttled ({', '.join(throttled)})", ev, 0.85))
    if g.memory_used_ratio is not None:
        e = case.evidence(MEMORY_RATIO, g.memory_used_ratio, lab, lines.gpu_memory_ratio)
        if g.memory_used_ratio > lines.gpu_memory_ratio:
            out.append((MEMORY_FULL, f"memory {pct(g.memory_used_ratio)} full", [e],
                        strength(g.memory_used_ratio, lines.gpu_memory_ratio, 0.7)))
        else:
            cleared.append(e)
    if g.utilization is not None:
        e = case.evidence(metrics.GPU_UTILIZATION.name, g.utilization, lab, lines.gpu_underutilized)
        if slow and g.utilization < lines.gpu_underutilized:
            out.append((UNDERUTILIZED, f"busy only {pct(g.utilization)} of the time"
                        + waited_most(case, g.site), [e],
                        strength(lines.gpu_underutilized, max(g.utilization, 0.01), 0.55)))
        else:
            cleared.append(e)
    if g.dram_bandwidth_utilization is not None:
        bw = g.dram_bandwidth_utilization
        e = case.evidence(metrics.GPU_DRAM_BANDWIDTH_UTILIZATION.name, bw, lab,
                          lines.dram_bandwidth)
        if st is not None and st.slow_decode and bw > lines.dram_bandwidth:
            out.append((MEMORY_BANDWIDTH, f"DRAM bandwidth {pct(bw)} used", [e],
                        strength(bw, lines.dram_bandwidth, 0.7)))
        else:
            cleared.append(e)
    link = _link(case, g, lab)
    if link is not None:
        clause, ev = link
        if slow and clause:
            out.append((INTERCONNECT, clause, ev, 0.8))
        else:
            cleared.extend(ev)
    return out


def _link(case: Case, g: GpuWindow, lab: dict[str, str]
          ) -> tuple[str, list[Evidence]] | None:
    """What is wrong with the GPU's links ("" when nothing), with the evidence; None when
    NVML gives none of it."""
    clauses, ev = [], []
    for now, most, family, what in (
            (g.pcie_width, g.pcie_width_max, metrics.GPU_PCIE_LINK_WIDTH, "x{:g} of x{:g}"),
            (g.pcie_gen, g.pcie_gen_max, metrics.GPU_PCIE_LINK_GENERATION,
             "gen {:g} of {:g}")):
        if now is not None and most is not None:
            ev.append(case.evidence(family.name, now, lab, most))
            if now < most:
                clauses.append("PCIe link at " + what.format(now, most))
    for n, name, what in ((g.nvlink_down, LINKS_DOWN, "NVLink(s) down"),
                          (g.nvlink_errors, metrics.GPU_NVLINK_ERRORS.name, "NVLink errors"),
                          (g.pcie_replays, metrics.GPU_PCIE_REPLAYS.name, "PCIe replays")):
        if n:
            clauses.append(f"{n} {what}")
            ev.append(case.evidence(name, n, lab, 0))
    if not ev:
        return None
    return "; ".join(clauses), ev


def _served(case: Case, g: GpuWindow) -> str:
    """The engine a GPU serves, judged or not: the scope stays put when the engine's own
    numbers are missing from a window."""
    return next((e.engine for e in case.obs.engines if g in case.gpus_of(e)), "")


def evaluate(case: Case) -> Outcome:
    """A finding takes over the time splits of its engine it explains (``Cause.absorbs``):
    the engine's "where" becomes the GPU's "why"."""
    findings: list[Finding] = []
    cleared: list[Evidence] = []
    decided = False
    by_engine = {st.engine.engine: st for st in case.engines}
    owners: dict[str, EngineState | None] = {}
    for g in case.obs.gpus:
        owners[g.gpu] = next((by_engine[e.engine] for e in case.obs.engines
                              if e.engine in by_engine and g in case.gpus_of(e)), None)
    # One finding per (cause, engine): eight throttled GPUs under one engine are one cause.
    grouped: dict[tuple[Cause, str], tuple[list[str], list[str], list[Evidence], float]] = {}
    for g in case.obs.gpus:
        if case.failing("gpu"):
            break  # NVML failing: what we have is stale
        decided = True
        st = owners[g.gpu]
        for cause, clause, ev, s in _causes(case, g, st, cleared):
            # Without a slow engine only what pages counts: an idle GPU under a fast engine
            # is no one's latency, a throttled one is a fault before it is a symptom.
            if st is not None and not st.slow and not cause.pages:
                continue
            if st is None and case.obs.engines and not cause.pages:
                continue
            key = (cause, st.engine.engine if st else _served(case, g))
            ids, clauses, evs, best = grouped.setdefault(key, ([], [], [], 0.0))
            ids.append(g.gpu)
            clauses.append(clause)
            evs.extend(ev)
            grouped[key] = (ids, clauses, evs, max(best, s))
    engine_findings = [f for f in case.findings if f.cause.layer == "engine"]
    for (cause, engine), (ids, clauses, evs, s) in grouped.items():
        st = by_engine.get(engine)
        scope = {"gpu": ",".join(ids)}
        if engine:
            scope["engine"] = engine
        which = f"GPU {ids[0]}" if len(ids) == 1 else f"GPUs {', '.join(ids)}"
        under = f" under engine {engine}" if engine else ""
        # Its own numbers page (LLMGPUThrottled, ...): over its line under a fast engine too.
        over = cause.pages or (st is not None and st.own)
        f = Finding(cause, scope, f"{which}{under}: {clauses[0]}", evs, s,
                    st.probes if st else (), Standing.OVER_LINE if over else Standing.EXPLAINS)
        for ef in engine_findings:
            if ef.scope.get("engine") == engine and ef.cause in cause.absorbs \
                    and not ef.taken_over:
                f.absorb(ef)
        findings.append(f)
    outcome = Outcome.of("gpu", findings, cleared, decided)
    if not case.obs.gpus and not case.failing("gpu"):
        # No GPU in the window and no GPU check failing or unrun: no ``gpu`` section.
        outcome.step = Step("gpu", StepResult.NOT_CONFIGURED)
    return outcome
