"""Step 4: the GPUs under a slow engine: throttling, memory full, XID errors, too idle to be
the bottleneck, DRAM bandwidth saturated while decode is slow. A short GPU disguises itself
as a slow network, which is why this step comes after the network and engine ones."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis.observations import GpuWindow
from exporter.diagnosis.result import Evidence, Step, Symptom
from exporter.diagnosis.steps.base import Context, Finding, conclude, pct, strength
from exporter.diagnosis.steps.engine import EngineState

ALL: frozenset[Symptom] = frozenset(("ttft", "tpot", "failures", "long_context"))
COMPUTE: frozenset[Symptom] = frozenset(("ttft", "tpot", "long_context"))
EXPLAINS: dict[str, frozenset[Symptom]] = {
    "throttling": COMPUTE,
    "memory_full": ALL,
    "xid_errors": ALL,
    "underutilized": COMPUTE,
    "memory_bandwidth": frozenset(("tpot",)),
}
#: Engine time splits a GPU finding explains: the engine's "where" becomes the GPU's "why".
#: An idle GPU under a slow engine is a why too: the time goes to the host (CPU, I/O).
ABSORBS: dict[str, frozenset[str]] = {
    "throttling": frozenset(("slow_prefill", "slow_decode")),
    "underutilized": frozenset(("slow_prefill", "slow_decode")),
    "memory_full": frozenset(("slow_prefill", "slow_decode")),
    "xid_errors": frozenset(("slow_prefill", "slow_decode")),
    "memory_bandwidth": frozenset(("slow_decode",)),
}
FAILS: dict[str, frozenset[str]] = {
    "memory_full": frozenset(("server", "stream")),
    "xid_errors": frozenset(("server", "stream", "timeout", "connect")),
}

MEMORY_RATIO = f"{metrics.GPU_MEMORY_USED.name} / {metrics.GPU_MEMORY_TOTAL.name}"
#: Causes whose own numbers page (LLMGPUXidError, LLMGPUThrottled, LLMGPUMemoryNearFull):
#: reported under a fast engine too; the others only explain a slow one.
OWN = frozenset(("xid_errors", "throttling", "memory_full"))


def _causes(ctx: Context, g: GpuWindow, st: EngineState | None,
            cleared: list[Evidence]) -> list[tuple[str, str, list[Evidence], float]]:
    """(cause, clause, evidence, strength) of one GPU."""
    th = ctx.th
    lab = {"gpu": g.gpu, "name": g.name}
    out: list[tuple[str, str, list[Evidence], float]] = []
    if g.xid_errors > 0:
        out.append(("xid_errors", f"{g.xid_errors} XID error(s)",
                    [ctx.ev(metrics.GPU_XID_ERRORS.name, g.xid_errors, lab, 0)], 0.9))
    slow = st is not None and st.slow
    throttled = [r for r in g.clock_events if r in th.throttle_reasons]
    if throttled:
        ev = [ctx.ev(metrics.GPU_CLOCK_EVENT.name, 1, {**lab, "reason": r}, 0)
              for r in throttled]
        out.append(("throttling", f"throttled ({', '.join(throttled)})", ev, 0.85))
    if g.memory_used_ratio is not None:
        e = ctx.ev(MEMORY_RATIO, g.memory_used_ratio, lab, th.gpu_memory_ratio)
        if g.memory_used_ratio > th.gpu_memory_ratio:
            out.append(("memory_full", f"memory {pct(g.memory_used_ratio)} full", [e],
                        strength(g.memory_used_ratio, th.gpu_memory_ratio, 0.7)))
        else:
            cleared.append(e)
    if g.utilization is not None:
        e = ctx.ev(metrics.GPU_UTILIZATION.name, g.utilization, lab, th.gpu_underutilized)
        if slow and g.utilization < th.gpu_underutilized:
            out.append(("underutilized", f"busy only {pct(g.utilization)} of the time", [e],
                        strength(th.gpu_underutilized, max(g.utilization, 0.01), 0.55)))
        else:
            cleared.append(e)
    if g.dram_bandwidth_utilization is not None:
        bw = g.dram_bandwidth_utilization
        e = ctx.ev(metrics.GPU_DRAM_BANDWIDTH_UTILIZATION.name, bw, lab, th.dram_bandwidth)
        if st is not None and st.slow_decode and bw > th.dram_bandwidth:
            out.append(("memory_bandwidth", f"DRAM bandwidth {pct(bw)} used", [e],
                        strength(bw, th.dram_bandwidth, 0.7)))
        else:
            cleared.append(e)
    return out


def _served(ctx: Context, g: GpuWindow) -> str:
    """The engine a GPU serves, judged or not: the scope stays put when the engine's own
    numbers are missing from a window."""
    return next((e.engine for e in ctx.obs.engines if g in ctx.gpus_of(e)), "")


def evaluate(ctx: Context, states: list[EngineState], engine_findings: list[Finding]
             ) -> tuple[Step, list[Finding], list[Finding]]:
    """The step, its findings, and the engine findings they absorbed (to drop)."""
    findings: list[Finding] = []
    cleared: list[Evidence] = []
    absorbed: list[Finding] = []
    decided = False
    by_engine = {st.engine.engine: st for st in states}
    owners: dict[str, EngineState | None] = {}
    for g in ctx.obs.gpus:
        owners[g.gpu] = next((by_engine[e.engine] for e in ctx.obs.engines
                              if e.engine in by_engine and g in ctx.gpus_of(e)), None)
    # One finding per (cause, engine): eight throttled GPUs under one engine are one cause.
    grouped: dict[tuple[str, str], tuple[list[str], list[str], list[Evidence], float]] = {}
    for g in ctx.obs.gpus:
        if ctx.failing("gpu"):
            break  # NVML failing: what we have is stale
        decided = True
        st = owners[g.gpu]
        for cause, clause, ev, s in _causes(ctx, g, st, cleared):
            # Without a slow engine only what pages counts: an idle GPU under a fast engine
            # is no one's latency, a throttled one is a fault before it is a symptom.
            if st is not None and not st.slow and cause not in OWN:
                continue
            if st is None and ctx.obs.engines and cause not in OWN:
                continue
            key = (cause, st.engine.engine if st else _served(ctx, g))
            ids, clauses, evs, best = grouped.setdefault(key, ([], [], [], 0.0))
            ids.append(g.gpu)
            clauses.append(clause)
            evs.extend(ev)
            grouped[key] = (ids, clauses, evs, max(best, s))
    for (cause, engine), (ids, clauses, evs, s) in grouped.items():
        st = by_engine.get(engine)
        scope = {"gpu": ",".join(ids)}
        if engine:
            scope["engine"] = engine
        which = f"GPU {ids[0]}" if len(ids) == 1 else f"GPUs {', '.join(ids)}"
        under = f" under engine {engine}" if engine else ""
        f = Finding("gpu", cause, scope, f"{which}{under}: {clauses[0]}", evs, s,
                    EXPLAINS[cause], st.probes if st else (), hard=cause == "xid_errors",
                    unobserved=st is None or not st.probes,
                    own=cause in OWN or (st is not None and st.own),
                    fails=FAILS.get(cause, frozenset(("timeout",))))
        for ef in engine_findings:
            if ef.scope.get("engine") == engine and ef.cause in ABSORBS.get(cause, ()) \
                    and ef not in absorbed:
                f.absorb(ef)
                f.own = f.own or ef.own
                absorbed.append(ef)
        findings.append(f)
    return conclude("gpu", findings, cleared, decided), findings, absorbed
