"""Layers compared over the same span: a probe linked to an engine is read up to that
engine's last scrape, not past it.

The exporter's samples of one moment are not of one moment: an engine family holds what the
engine's last scrape said (up to ``engines[].interval`` ago), a probe family what the last
probe request measured. Right after a fault, the probe's window already holds the slow
requests while the engine's does not yet, and the client-minus-engine split reads as time
lost between client and engine (the network, or ``exporter/no_data``): a wrong cause, for up
to one engine interval. So a linked probe's window ends at the newest sample taken no later
than the start of the linked engine's last successful scrape (``llm_exporter_check_last_
success_timestamp_seconds`` of its check, which the scheduler stamps with the run's start;
a snapshot is stamped once its values are collected): a request the probe counted there had
ended at the client, so the engine had recorded it, before the scrape began. Its start stays
the window's, so the probe never counts a request the engine window could not. The probe's
numbers lag by up to one engine interval plus one sample; unlinked probes, paths and GPUs
are read to the end.

An engine whose last success is older than a scrape should take (its interval, timeout and
one sample of slack) is stale: its own step says so (down, failing check), and the probe is
read to the end, so that a dead engine never freezes what users are seen to feel.

Both sources apply it: the embedded one to its snapshots (:func:`probe_windows`), the
Prometheus one by evaluating the probe queries at the time :func:`probe_time` returns.
"""

from __future__ import annotations

from collections.abc import Iterable

from exporter import metrics
from exporter.config.models import Config, EngineConfig, ProbeConfig
from exporter.diagnosis.promapi import PromClient, Sample
from exporter.diagnosis.windows import Snapshot, Window

LAST_SUCCESS = metrics.EXPORTER_CHECK_LAST_SUCCESS.name
(_CHECK,) = metrics.EXPORTER_CHECK_LAST_SUCCESS.labels
#: Check names are "<kind>/<target>"; the engine check's kind is its families' section.
ENGINE_CHECK = metrics.ENGINE_UP.section
_DEFAULT_ENGINE = EngineConfig(name="default", url="http://127.0.0.1/metrics")


def check_name(engine: str) -> str:
    return f"{ENGINE_CHECK}/{engine}"


def engine_of(probe: ProbeConfig, config: Config) -> EngineConfig | None:
    """The engine the chain compares ``probe`` with (``Context.engines_of``): the linked
    one, else the only one."""
    if probe.engine:
        return next((e for e in config.engines if e.name == probe.engine), None)
    return config.engines[0] if len(config.engines) == 1 else None


def max_lag(engine: EngineConfig, config: Config) -> float:
    """How old an engine's last scrape may be and still be the engine's current data."""
    return engine.interval + engine.timeout + config.diagnosis.interval


def scraped_at(snap: Snapshot, engine: str) -> float | None:
    return snap.get((LAST_SUCCESS, ((_CHECK, check_name(engine)),), None))


def until(w: Window, at: float) -> int:
    """How many of ``w``'s snapshots were taken by ``at`` (its start snapshot always)."""
    return max(1, sum(1 for s in w.snapshots if s.at <= at))


def probe_windows(w: Window, config: Config) -> dict[str, Window]:
    """Probe name -> the window it is read over, for the probes linked to an engine.
    Engines scraped between the same two snapshots share one window (and its caches)."""
    kept: dict[str, int] = {}
    windows = {len(w.snapshots): w}
    out: dict[str, Window] = {}
    for p in config.probes:
        e = engine_of(p, config)
        if e is None:
            continue
        if e.name not in kept:
            at = scraped_at(w.last, e.name)
            fresh = at is not None and w.last.at - at <= max_lag(e, config)
            kept[e.name] = until(w, at) if fresh and at is not None else len(w.snapshots)
        n = kept[e.name]
        if n not in windows:
            windows[n] = Window(w.snapshots[:n], w.seconds)
        out[p.name] = windows[n]
    return out


# --- the Prometheus source ------------------------------------------------------------------
#: Each exporter's engine checks' last success, and when Prometheus scraped that exporter.
_ENGINE_SUCCESS = f'{LAST_SUCCESS}{{{_CHECK}=~"{ENGINE_CHECK}/.+"}}'
QUERIES = {"success": _ENGINE_SUCCESS, "scraped": f"timestamp({_ENGINE_SUCCESS})"}


def _series_key(s: Sample) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in s.labels.items() if k != "__name__"))


def aligned_time(success: Iterable[Sample], scraped: Iterable[Sample], at: float,
                 config: Config) -> float:
    """When to evaluate the probe queries: the oldest fresh engine scrape of the fleet (a
    sample of each exporter is that exporter's moment, as one embedded snapshot is), or
    ``at`` when there is none. Fresh: the exporter had scraped it within ``max_lag`` when
    Prometheus scraped the exporter."""
    engines = {e.name: e for e in config.engines}
    taken = {_series_key(s): s.value for s in scraped}
    times = []
    for s in success:
        when = taken.get(_series_key(s))
        if s.value is None or when is None:
            continue
        engine = engines.get(s.labels.get(_CHECK, "").partition("/")[2], _DEFAULT_ENGINE)
        if when - s.value <= max_lag(engine, config):
            times.append(s.value)
    return min([at, *times])


def probe_time(client: PromClient, at: float, config: Config) -> float:
    """:func:`aligned_time` from ``client`` at ``at`` (two queries)."""
    return aligned_time(client.query(QUERIES["success"], at), client.query(QUERIES["scraped"], at),
                        at, config)
