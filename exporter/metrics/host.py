"""The host under the engine: the kernel's pressure stall information (PSI), memory, swap,
CPU, and the same pressure and CPU for the engine's own cgroup.

Every series is the host's or the engine cgroup's (``scope``): the count of processes never
shows in a label.
"""

from __future__ import annotations

from exporter.metrics.schema import Kind, define

#: Bounded values of ``scope``: the whole host, or the engine's cgroup.
HOST_SCOPES = ("host", "engine")
HOST_SCOPE, ENGINE_SCOPE = HOST_SCOPES
#: Bounded values of ``resource`` and ``kind`` on HOST_PRESSURE (the kernel's PSI files).
PRESSURE_RESOURCES = ("cpu", "memory", "io")
PRESSURE_KINDS = ("some", "full")
#: Bounded values of ``mode`` on HOST_CPU: busy is every mode but idle and iowait.
CPU_MODES = ("busy", "idle", "iowait")
#: Bounded values of ``direction`` on HOST_SWAP.
SWAP_DIRECTIONS = ("in", "out")

HOST_PRESSURE = define(
    "llm_host_pressure_seconds_total",
    Kind.COUNTER,
    "Time tasks stalled waiting for the resource (the kernel's PSI total): some (at least "
    "one task) or full (all non-idle tasks at once), of the host or of the engine's cgroup.",
    ("scope", "resource", "kind"),
    section="host",
)
HOST_MEMORY_AVAILABLE = define(
    "llm_host_memory_available_bytes",
    Kind.GAUGE,
    "Memory available for new work without swapping (MemAvailable of /proc/meminfo).",
    section="host",
)
HOST_MEMORY_TOTAL = define(
    "llm_host_memory_total_bytes",
    Kind.GAUGE,
    "Usable memory of the host (MemTotal of /proc/meminfo).",
    section="host",
)
HOST_SWAP = define(
    "llm_host_swap_pages_total",
    Kind.COUNTER,
    "Pages swapped in or out (pswpin / pswpout of /proc/vmstat).",
    ("direction",),
    section="host",
)
HOST_MAJOR_FAULTS = define(
    "llm_host_major_faults_total",
    Kind.COUNTER,
    "Page faults that read from disk (pgmajfault of /proc/vmstat).",
    section="host",
)
HOST_CPU = define(
    "llm_host_cpu_seconds_total",
    Kind.COUNTER,
    "CPU time of all the host's CPUs by mode (/proc/stat): busy, idle, or iowait.",
    ("mode",),
    section="host",
)
HOST_CPUS = define(
    "llm_host_cpus",
    Kind.GAUGE,
    "CPUs the host has online.",
    section="host",
)
HOST_ENGINE_CPU = define(
    "llm_host_engine_cpu_seconds_total",
    Kind.COUNTER,
    "CPU time of the engine's cgroup, all its processes (usage_usec of its cpu.stat).",
    section="host",
)
