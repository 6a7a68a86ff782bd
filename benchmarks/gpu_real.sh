#!/usr/bin/env bash
# The GPU check on real hardware, side by side with nvidia-smi.
#
# Runs the exporter's NVML sampler (exporter/checks/gpu/sampler.py, the code behind the GPU check)
# once a second for DURATION seconds (default 20) on every GPU of this machine. Right after each
# tick it runs `nvidia-smi --query-gpu=...` and prints both values for each GPU and field, in
# the same units. nvidia-smi's start-up makes its reading lag ours by the "skew" printed each
# tick, typically 0.05-0.3 s. Fast-moving values (power, clocks, utilization) can differ by that
# much; memory, limits, ECC and clock-event bits should agree exactly. If PyTorch with CUDA is
# installed, a load runs on every GPU meanwhile, alternating 5 s of bf16 matmul
# (compute-bound) with 5 s of large device-to-device copies (bandwidth-bound), so the GPM DRAM
# bandwidth ratio should be high in copy phases and the tensor ratio high in matmul phases.
# nvidia-smi has no field for GPM, PCIe throughput or per-process memory, so only our value is
# printed for those. The summary gives the sampler's tick cost on this hardware and the largest
# difference seen per field.
#
# Usage: benchmarks/gpu_real.sh [DURATION_SECONDS]
#        PYTHON=/path/to/python benchmarks/gpu_real.sh 30
# Needs: an NVIDIA driver (libnvidia-ml.so.1, nvidia-smi); the repo's .venv (or PYTHON) with
# the exporter's dependencies; optionally torch with CUDA for the load.
set -euo pipefail

# The repository root is the working directory and on PYTHONPATH, so the embedded Python
# below imports `exporter` from this checkout.
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
DURATION="${1:-20}"
PY="${PYTHON:-.venv/bin/python}"
if [[ ! -x "$PY" ]]; then PY="$(command -v python3)"; fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "nvidia-smi not found: this script needs a machine with an NVIDIA GPU and driver" >&2
    exit 2
fi
PHASE_FILE="$(mktemp -t gpu_real_phase.XXXXXX)"
LOAD_PID=""
cleanup() {
    if [[ -n "$LOAD_PID" ]]; then kill "$LOAD_PID" 2>/dev/null || true; wait "$LOAD_PID" 2>/dev/null || true; fi
    rm -f "$PHASE_FILE"
}
trap cleanup EXIT

if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    "$PY" - "$DURATION" "$PHASE_FILE" <<'LOAD' &
import sys
import time

import torch

duration, phase_file = float(sys.argv[1]), sys.argv[2]
devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
mats = {d: torch.randn(8192, 8192, device=d, dtype=torch.bfloat16) for d in devices}
# 2 GiB source and destination per GPU where it fits: far above any L2, so copies hit DRAM.
copy_bytes = 2 * 1024**3
bufs = {}
for d in devices:
    free, _ = torch.cuda.mem_get_info(d)
    n = min(copy_bytes, free // 4) // 2
    bufs[d] = (torch.empty(n, device=d, dtype=torch.float16), torch.empty(n, device=d, dtype=torch.float16))
end = time.monotonic() + duration + 5
while time.monotonic() < end:
    phase = "matmul" if int(time.monotonic() // 5) % 2 == 0 else "copy"
    with open(phase_file, "w") as f:
        f.write(phase)
    for d in devices:
        if phase == "matmul":
            mats[d] @ mats[d]
        else:
            bufs[d][1].copy_(bufs[d][0])
    for d in devices:
        torch.cuda.synchronize(d)
LOAD
    LOAD_PID=$!
    echo "# load: bf16 matmul / device copies on every GPU (pid $LOAD_PID); warming up 3 s"
    sleep 3
else
    echo "idle" >"$PHASE_FILE"
    echo "# torch with CUDA not available: sampling idle GPUs"
fi

"$PY" - "$DURATION" "$PHASE_FILE" <<'COMPARE'
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from exporter import metrics as M
from exporter.checks.gpu.nvml import CLOCK_EVENT_REASONS
from exporter.checks.gpu.sampler import NvmlSampler

duration, phase_file = float(sys.argv[1]), Path(sys.argv[2])
MiB = 1024**2
REASON_BITS = {reason: bit for bit, reason in CLOCK_EVENT_REASONS}


def ours_value(g, key):
    """Our reading in nvidia-smi's unit, or None where the check has none."""
    v = g.values
    table = {
        "utilization.gpu": (M.GPU_UTILIZATION, 100),
        "utilization.memory": (M.GPU_MEMORY_CONTROLLER_BUSY, 100),
        "memory.used": (M.GPU_MEMORY_USED, 1 / MiB),
        "memory.total": (M.GPU_MEMORY_TOTAL, 1 / MiB),
        "memory.reserved": (M.GPU_MEMORY_RESERVED, 1 / MiB),
        "power.draw": (M.GPU_POWER, 1),
        "power.draw.average": (M.GPU_POWER, 1),
        "enforced.power.limit": (M.GPU_POWER_LIMIT, 1),
        "temperature.gpu": (M.GPU_TEMPERATURE, 1),
        "clocks.sm": (M.GPU_SM_CLOCK, 1e-6),
        "clocks.mem": (M.GPU_MEMORY_CLOCK, 1e-6),
    }
    if key in table:
        fam, factor = table[key]
        return None if fam not in v else v[fam] * factor
    if key in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        if not g.clock_events:
            return None
        return sum(REASON_BITS[r] for r, on in g.clock_events.items() if on)
    if key == "ecc.errors.corrected.volatile.total":
        return g.ecc.get("corrected")
    if key == "ecc.errors.uncorrected.volatile.total":
        return g.ecc.get("uncorrected")
    raise KeyError(key)


WANTED = [
    "utilization.gpu", "utilization.memory", "memory.used", "memory.total", "memory.reserved",
    "power.draw", "power.draw.average", "enforced.power.limit", "temperature.gpu", "clocks.sm",
    "clocks.mem", "clocks_event_reasons.active", "clocks_throttle_reasons.active",
    "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total",
]
help_text = subprocess.run(
    ["nvidia-smi", "--help-query-gpu"], capture_output=True, text=True, check=True
).stdout
known = set(re.findall(r'"([a-z0-9_.]+)"', help_text))
fields = [f for f in WANTED if f in known]
if "clocks_event_reasons.active" in fields and "clocks_throttle_reasons.active" in fields:
    fields.remove("clocks_throttle_reasons.active")  # the same bits under the old name
print(f"# nvidia-smi fields compared: {', '.join(fields)}")
print(f"# not offered by this nvidia-smi: {', '.join(f for f in WANTED if f not in known) or '-'}")


def smi():
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu=index,uuid,{','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True,
    ).stdout
    rows = {}
    for line in out.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        rows[cells[1]] = dict(zip(fields, cells[2:], strict=True))
    return rows


def number(text):
    if text is None or text.startswith("[") or text in ("N/A", ""):
        return None
    return int(text, 16) if text.startswith("0x") else float(text)


def fmt(x):
    return "-" if x is None else f"{x:.6g}"


sampler = NvmlSampler()
tick_wall, tick_cpu, worst = [], [], {}
t_end = time.monotonic() + duration
next_at = time.monotonic()
first = True
while time.monotonic() < t_end:
    time.sleep(max(0.0, next_at - time.monotonic()))
    next_at += 1.0
    w0, c0 = time.perf_counter(), time.thread_time()
    snap = sampler.tick()
    w1, c1 = time.perf_counter(), time.thread_time()
    rows = smi()
    w2 = time.perf_counter()
    if first:  # the first tick opens the NVML session: reported, not counted
        print(f"# first tick (NVML init included): {(w1 - w0) * 1e3:.1f} ms")
        first = False
    else:
        tick_wall.append((w1 - w0) * 1e3)
        tick_cpu.append((c1 - c0) * 1e3)
    phase = phase_file.read_text().strip() if phase_file.exists() else "?"
    print(f"\n== t={time.strftime('%H:%M:%S')} phase={phase} tick={(w1 - w0) * 1e3:.1f} ms "
          f"(cpu {(c1 - c0) * 1e3:.1f} ms) nvidia-smi skew={(w2 - w1) * 1e3:.0f} ms "
          f"nvml_up={int(snap.nvml_up)} driver={snap.driver_version} cuda={snap.cuda_version}")
    for g in snap.gpus:
        print(f"-- gpu {g.index} {g.name} {g.uuid} up={int(g.up)}")
        theirs = rows.get(g.uuid, {})
        print(f"   {'field':40s} {'ours':>14s} {'nvidia-smi':>14s}")
        for f in fields:
            a, b = ours_value(g, f), number(theirs.get(f))
            if f.startswith("clocks_") and a is not None:
                shown = f"{int(a):#06x}"
            else:
                shown = fmt(a)
            print(f"   {f:40s} {shown:>14s} {theirs.get(f, '-'):>14s}")
            if a is not None and b is not None and not f.startswith("clocks_"):
                worst[f] = max(worst.get(f, 0.0), abs(a - b))
            elif a is not None and b is not None:
                worst[f] = max(worst.get(f, 0.0), float(int(a) != int(b)))
        extra = {
            "pcie rx MB/s": g.values.get(M.GPU_PCIE_RX),
            "pcie tx MB/s": g.values.get(M.GPU_PCIE_TX),
            "energy J": g.values.get(M.GPU_ENERGY),
            "GPM dram bw ratio": g.values.get(M.GPU_DRAM_BANDWIDTH_UTILIZATION),
            "GPM sm active ratio": g.values.get(M.GPU_SM_ACTIVE),
            "GPM sm occupancy ratio": g.values.get(M.GPU_SM_OCCUPANCY),
            "GPM tensor active ratio": g.values.get(M.GPU_TENSOR_ACTIVE),
            "bandwidth GB/s": None if g.bandwidth is None else g.bandwidth / 1e9,
            "peak GB/s": None if g.peak is None else g.peak[0] / 1e9,
        }
        for k in ("pcie rx MB/s", "pcie tx MB/s"):
            if extra[k] is not None:
                extra[k] /= 1e6
        print("   ours only: " + ", ".join(f"{k}={fmt(v)}" for k, v in extra.items()))
        if g.peak is not None:
            print(f"   peak source: {g.peak[1]}")
        if g.xid:
            print(f"   XID counts: {dict(g.xid)}")
        if g.processes:
            print("   processes: " + ", ".join(
                f"{p.pid}/{p.name or '?'}={p.used_bytes / MiB:.0f}MiB" for p in g.processes))
sampler.close()

print("\n== summary")
if tick_wall:
    print(f"tick wall: median {statistics.median(tick_wall):.1f} ms, max {max(tick_wall):.1f} ms;"
          f" tick cpu: median {statistics.median(tick_cpu):.2f} ms ({len(tick_wall)} ticks,"
          f" {len(snap.gpus)} GPUs)")
print("largest |ours - nvidia-smi| per field (clock-event fields: 1 = the bits differed once):")
for f in fields:
    print(f"  {f:40s} {fmt(worst.get(f))}")
COMPARE
