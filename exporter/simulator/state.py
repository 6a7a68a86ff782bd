"""One simulator's settings and what it is made of: the engines (one per model and
data-parallel rank), their stats, and the faults. The HTTP handlers reach it through ``SIM``."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

from aiohttp import web

from exporter.checks.engine.table import FORMATS
from exporter.simulator import render
from exporter.simulator.engine import Engine
from exporter.simulator.engine_config import EngineConfig
from exporter.simulator.faults import Faults
from exporter.simulator.stats import EngineStats, ServerStats, Store

DEFAULT_MODEL = "simulated-model"


@dataclass
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    #: Triton only; None means port + 2.
    metrics_port: int | None = None
    format: str = "vllm"
    models: tuple[str, ...] = (DEFAULT_MODEL,)
    dp_ranks: int = 1
    seed: int = 0
    engine: EngineConfig = field(default_factory=EngineConfig)
    faults: Faults = field(default_factory=Faults)
    #: vLLM's --enable-per-request-metrics: a ``metrics`` object on every final response
    #: and stream usage chunk.
    per_request_metrics: bool = False

    def problems(self) -> list[str]:
        out = self.engine.problems()
        if self.format not in FORMATS:
            out.append(f"--format: {self.format!r} is not one of {', '.join(FORMATS)}")
        elif self.dp_ranks > 1 and not render.has_dp_label(self.format):
            out.append(f"--dp-ranks: the {self.format} format has no data-parallel label")
        if self.dp_ranks < 1:
            out.append("--dp-ranks: must be at least 1")
        for flag, port in (("--port", self.port), ("--metrics-port", self.metrics_port)):
            if port is not None and not 1 <= port <= 65535:
                out.append(f"{flag}: {port} is not a TCP port (1-65535)")
        if not self.models or len(set(self.models)) != len(self.models):
            out.append("--model: give each served model name once")
        return out

    @property
    def triton_metrics_port(self) -> int:
        return self.metrics_port if self.metrics_port is not None else self.port + 2


class Simulator:
    """The engines (one per model and data-parallel rank), their stats, and the faults."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.format = settings.format
        #: Shared by every engine, so /admin/config changes them all at once.
        self.config = settings.engine
        self.faults = settings.faults
        self.rng = random.Random(settings.seed)
        self.store = Store()
        self.stats = ServerStats(self.store)
        # SGLang labels dp_rank only when it runs data-parallel.
        self.hidden_labels = (
            {"dp_rank"} if settings.format == "sglang" and settings.dp_ranks == 1 else set()
        )
        self.engines: dict[str, list[tuple[Engine, EngineStats]]] = {}
        for model in settings.models:
            ranks = []
            for rank in range(settings.dp_ranks):
                stats = EngineStats(self.store, settings.format, model, rank, self.config)
                # Its own seed, so the shared generator's draws stay what they were.
                seed = zlib.crc32(f"{settings.seed}/{model}/{rank}".encode())
                ranks.append((Engine(model, rank, self.config, stats, seed), stats))
            self.engines[model] = ranks

    def start(self) -> None:
        for ranks in self.engines.values():
            for engine, _ in ranks:
                engine.start()

    async def stop(self) -> None:
        for ranks in self.engines.values():
            for engine, _ in ranks:
                await engine.stop()

    def all_engines(self) -> list[Engine]:
        return [engine for ranks in self.engines.values() for engine, _ in ranks]

    def route(self, model: str) -> Engine:
        """Least-loaded data-parallel rank, as a DP load balancer would pick; the last rank
        for the ``dp_pin_rate`` fraction of requests (drawn only while it is set, so the
        seeded draws of every other run stay what they were)."""
        ranks = [engine for engine, _ in self.engines[model]]
        pin = self.faults.dp_pin_rate
        if pin and len(ranks) > 1 and self.rng.random() < pin:
            return ranks[-1]
        return min(ranks, key=lambda e: e.load)

    def exposition(self) -> bytes:
        for ranks in self.engines.values():
            for engine, stats in ranks:
                stats.sample(engine)
        return render.exposition(self.store, self.format, self.hidden_labels).encode()


SIM: web.AppKey[Simulator] = web.AppKey("simulator", Simulator)
