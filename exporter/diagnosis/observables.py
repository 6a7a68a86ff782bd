"""Every number the chain reads, as tables: one per window kind, one row per measured field
of :mod:`exporter.diagnosis.observations` (where each is declared, beside its type), and the
check runs ``Observations.failing_checks`` is decided from. Both sources evaluate these rows
(``embedded.py``, ``promqueries.py``); ``families.py`` keeps what they read."""

from __future__ import annotations

from exporter import metrics
from exporter.diagnosis import finish
from exporter.diagnosis.declare import CHECK, Increase, Observable, table
from exporter.diagnosis.host_window import HostWindow
from exporter.diagnosis.observations import (
    ClientWindow,
    EngineWindow,
    GpuWindow,
    PathWindow,
    ProbeWindow,
)

PROBE_TABLE = table(ProbeWindow)
PATH_TABLE = table(PathWindow)
ENGINE_TABLE = table(EngineWindow)
GPU_TABLE = table(GpuWindow)
CLIENTS_TABLE = table(ClientWindow)
HOST_TABLE = table(HostWindow)
#: What ``Observations.failing_checks`` is decided from (``finish.failing``).
CHECK_TABLE: tuple[Observable, ...] = (
    Observable("check_runs", CHECK, Increase(
        metrics.EXPORTER_CHECK_RUNS.name, (metrics.EXPORTER_CHECK_RUNS.labels[-1],)),
        finish.runs),
)

TABLES: tuple[tuple[Observable, ...], ...] = (
    PROBE_TABLE, PATH_TABLE, ENGINE_TABLE, GPU_TABLE, CLIENTS_TABLE, HOST_TABLE, CHECK_TABLE)
