"""Peak DRAM bandwidth of a GPU model: what the GPM DRAM ratio is multiplied by to give bytes/s."""

from __future__ import annotations

import re


def _contains(*words: str) -> re.Pattern[str]:
    """A name pattern matching when every word appears as a whole word, in any order."""
    return re.compile("".join(rf"(?=.*\b{w}\b)" for w in words), re.IGNORECASE)


# Datasheet peak DRAM bandwidth (TB/s) keyed on nvmlDeviceGetName; first match wins, so a
# specific variant precedes its family. Whole-word matching keeps H20 from matching H200 and
# A10 from matching A100. The clock x bus-width formula is only the fallback: on H200 it
# gives 4.92 TB/s against the datasheet's 4.8.
PEAK_BANDWIDTH_TBPS: tuple[tuple[re.Pattern[str], float], ...] = (
    (_contains("H200"), 4.8),  # SXM and NVL, 141 GB HBM3e
    (_contains("H100", "PCIe"), 2.0),  # 80 GB HBM2e
    (_contains("H100", "NVL"), 3.9),  # 94 GB HBM3
    (_contains("H100"), 3.35),  # SXM5 80 GB HBM3 ("NVIDIA H100 80GB HBM3")
    (_contains("H800", "PCIe"), 2.0),
    (_contains("H800"), 3.35),
    (_contains("H20"), 4.0),  # 96 GB HBM3
    (_contains("B200"), 8.0),
    (_contains("A100", "80GB", "PCIe"), 1.935),
    (_contains("A100", "80GB"), 2.039),  # SXM4
    (_contains("A100"), 1.555),  # 40 GB, SXM4 and PCIe
    (_contains("A800", "80GB", "PCIe"), 1.935),
    (_contains("A800"), 2.039),
    (_contains("L40S"), 0.864),
    (_contains("L40"), 0.864),
    (_contains("L20"), 0.864),
    (_contains("RTX 4090"), 1.008),
    (_contains("L4"), 0.300),
    (_contains("A10"), 0.600),
)


def spec_peak_bandwidth(name: str) -> float | None:
    """Datasheet peak DRAM bandwidth in bytes/s for a GPU model name, if it is in the table."""
    for pattern, tbps in PEAK_BANDWIDTH_TBPS:
        if pattern.search(name):
            return tbps * 1e12
    return None


def formula_peak_bandwidth(max_memory_clock_mhz: int, bus_width_bits: int) -> float:
    """Double data rate x bus width: the fallback for GPUs missing from the table."""
    return max_memory_clock_mhz * 1e6 * 2 * bus_width_bits / 8
