"""One assembler for the windows both sources hand the chain.

A source supplies only what it measured: the declarations' values (``declare.Prepared``,
one per table) and the labels of the windows it has (the embedded source takes them from
the config, the Prometheus source from the series it found). The rows are built here, once:
their identity from the labels, the rest from the declarations, and what only the config
knows (a probe's SLO after its own overrides, its client timeout).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from exporter.config.models import Config, ProbeConfig
from exporter.diagnosis import declare
from exporter.diagnosis.host_window import HostWindow
from exporter.diagnosis.observables import (
    CLIENTS_TABLE,
    ENGINE_TABLE,
    GPU_TABLE,
    HOST_TABLE,
    PATH_TABLE,
    PROBE_TABLE,
)
from exporter.diagnosis.observations import (
    ClientWindow,
    EngineWindow,
    GpuWindow,
    PathWindow,
    ProbeWindow,
)

Labels = Mapping[str, str]


def labels_of(kind: declare.WindowKey, key: tuple[str, ...]) -> dict[str, str]:
    return dict(zip(kind.key, key, strict=True))


def _slo(own: float | None, fleet: float) -> float:
    return fleet if own is None else own


def probe(labels: Labels, got: declare.Prepared, cfg: ProbeConfig | None,
          config: Config) -> ProbeWindow:
    """``cfg``: the probe's own config, where the source's config names it."""
    fields = declare.fill(PROBE_TABLE, got, labels, config)
    return ProbeWindow(
        probe=labels["probe"], target=labels["target"],
        profile=labels.get("profile") or "short", carrier=labels.get("carrier", ""),
        engine=labels.get("engine_target", ""), vantage=labels.get("vantage", ""),
        site=labels.get("site", ""), requests=sum(fields["outcomes"].values()),
        slo_ttft=_slo(cfg.slo.ttft_p95_seconds if cfg else None, config.slo.ttft_p95_seconds),
        slo_tpot=_slo(cfg.slo.tpot_p95_seconds if cfg else None, config.slo.tpot_p95_seconds),
        timeout_total=cfg.timeouts.total if cfg else None, **fields)


def path(labels: Labels, got: declare.Prepared, config: Config) -> PathWindow:
    return PathWindow(
        carrier=labels["carrier"], target=labels["target"], region=labels.get("region", ""),
        protocol=labels.get("protocol") or "icmp", vantage=labels.get("vantage", ""),
        site=labels.get("site", ""), **declare.fill(PATH_TABLE, got, labels, config))


def engine(labels: Labels, got: declare.Prepared, config: Config) -> EngineWindow:
    return EngineWindow(engine=labels["target"], target=labels["target"],
                        site=labels.get("site", ""),
                        **declare.fill(ENGINE_TABLE, got, labels, config))


def client(labels: Labels, got: declare.Prepared, config: Config) -> ClientWindow:
    return ClientWindow(carrier=labels["carrier"], vantage=labels.get("vantage", ""),
                        site=labels.get("site", ""),
                        **declare.fill(CLIENTS_TABLE, got, labels, config))


def gpus(got: declare.Prepared, config: Config) -> list[GpuWindow]:
    """Every GPU the declarations found, in index order per server. An index names a GPU only
    within one server: it is qualified by the server where two of a site report the same."""
    found = [labels_of(declare.GPU, k) for k in
             declare.keys(got, "utilization", "memory_used_ratio", "clock_events")]
    found.sort(key=lambda g: (g["instance"], len(g["gpu"]), g["gpu"], g["uuid"], g["name"],
                              g["site"], g["vantage"]))
    servers: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for g in found:
        servers.setdefault((g["site"], g["gpu"]), set()).add(tuple(g.values()))
    return [GpuWindow(
        gpu=f"{g['instance']}/{g['gpu']}" if len(servers[(g["site"], g["gpu"])]) > 1
        else g["gpu"], name=g["name"], site=g["site"],
        **declare.fill(GPU_TABLE, got, g, config)) for g in found]


def hosts(got: declare.Prepared, config: Config) -> list[HostWindow]:
    """Each exporter's host the declarations found."""
    return [HostWindow(site=h["site"], vantage=h["vantage"],
                       **declare.fill(HOST_TABLE, got, h, config))
            for h in found(declare.HOST, got, "pressure", "cpus")]


def found(kind: declare.WindowKey, got: declare.Prepared, *fields: str) -> list[dict[str, str]]:
    """The labels of every window any of ``fields`` has a value for, in key order."""
    return [labels_of(kind, k) for k in sorted(declare.keys(got, *fields))]


def by_name(probes: Iterable[ProbeConfig]) -> dict[str, ProbeConfig]:
    return {p.name: p for p in probes}
