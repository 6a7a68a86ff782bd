"""Wires config -> checks -> scheduler -> HTTP server, and handles signals.

A *generation* is one config with its checks and scheduler (whose store holds the batches
the checks publish, so a retired check's series go with it). SIGHUP builds a new generation
from the re-read file and swaps it in only if it is valid; the HTTP server and the
exporter-level metrics (build info, reload outcome, peak windows) live across generations.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import platform
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from aiohttp import web
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    disable_created_metrics,
)

from exporter import __version__, metrics
from exporter.checks import Check, build_checks
from exporter.config.load import load_config
from exporter.config.models import Config
from exporter.config.web import Web, load_web_config
from exporter.config.yamlfile import ConfigError
from exporter.diagnosis.families import KINDS, raw_samples
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.result import Diagnosis
from exporter.diagnosis.trends import Point
from exporter.runtime.auth import Guard
from exporter.runtime.evaluator import Evaluate, Evaluator, chain_evaluator
from exporter.runtime.exposition import render
from exporter.runtime.listener import Gate, GatedSite, Limits, connection_cap, make_runner
from exporter.runtime.logs import setup_logging
from exporter.runtime.peak import PeakWindowCollector
from exporter.runtime.scheduler import CheckState, Scheduler
from exporter.runtime.server import make_web_app

log = logging.getLogger("exporter")

# A `_created` series per counter and histogram doubles the text exposition for nothing
# Prometheus reads from it (it uses them from OpenMetrics only, and counts resets anyway).
disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped upstream

#: Seconds a thread waiting for the GIL waits before the holder must hand it over. The loop
#: gives the GIL up at every socket call, and while the diagnosis runs (~0.5 s of every 5 at
#: 1000 path targets) it waits this long to get it back each time: at 1 ms, /metrics scrapes
#: that met an evaluation took 100-170 ms against 40 (docs/benchmarks.md).
SWITCH_INTERVAL = 0.0001
#: Net new objects per young (gen-0) collection; Python's default is 700. At 1000 path
#: targets 700 came every few ms, and each collection promoted live transients a step
#: toward the full collection that stops every thread for 100-200 ms.
YOUNG_GC_EVERY = 10_000
#: Gen-1 collections per full (gen-2) collection; Python's default is 10.
FULL_GC_EVERY = 100
#: /-/ready turns true after this long even if a check has not finished its first run.
READY_AFTER = 30.0
#: SIGTERM to exit, including cancelling in-flight probes and closing the listener.
SHUTDOWN_BUDGET = 5.0


@dataclass
class Generation:
    config: Config
    scheduler: Scheduler


def build_generation(config: Config) -> Generation:
    return Generation(config, Scheduler(build_checks(config)))


class App:
    def __init__(
        self,
        config: Config,
        config_path: str,
        clock: Callable[[], float] = time.time,
        adjust: Callable[[Config], Config] = lambda config: config,
        evaluate: Evaluate | None = None,
        web_config: str | None = None,
    ) -> None:
        """``evaluate`` replaces the decision chain (tests); by default each config's
        thresholds drive the real one (``evaluator.chain_evaluator``). ``web_config`` is the
        exporter-toolkit web config file (TLS, basic auth), re-read with the config."""
        self.config_path = config_path
        self._adjust = adjust
        self.gen = build_generation(config)
        self._web_path = web_config
        self.web: Web | None = load_web_config(web_config) if web_config else None
        self._max_connections = connection_cap(
            config.server.max_connections, len(self.gen.scheduler.checks))
        self._gate: Gate | None = None
        self._guard = Guard(lambda: self.web)
        # The exporter's own families; the checks' come from the scheduler's store.
        self.registry = CollectorRegistry(auto_describe=False)
        # process_* (CPU, RSS, open fds) and python_* as every exporter serves them.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        metrics.EXPORTER_BUILD_INFO.gauge(self.registry).labels(
            __version__, platform.python_version()
        ).set(1)
        self._reloads = metrics.EXPORTER_CONFIG_RELOADS.counter(self.registry)
        for outcome in metrics.RELOAD_OUTCOMES:
            self._reloads.labels(outcome)
        self._last_reload_ok = metrics.EXPORTER_CONFIG_LAST_RELOAD_SUCCESSFUL.gauge(self.registry)
        self._last_reload_ok.set(1)
        peak = PeakWindowCollector(lambda: self.gen.config.peak_windows, clock)
        self.registry.register(peak)
        # One thread renders /metrics, so scrapes never run on the event loop nor pile up.
        self._render_pool = ThreadPoolExecutor(1, thread_name_prefix="metrics")
        self.evaluator = Evaluator(
            self.registry,
            lambda: self.gen.config,
            # The current generation's checks and the peak gauge: what the chain reads.
            lambda: itertools.chain(
                self.gen.scheduler.store.raw(KINDS), raw_samples(peak.collect())),
            chain_evaluator if evaluate is None else (lambda _config: evaluate),
        )
        self._started = time.monotonic()
        self._stop = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._runner: web.AppRunner | None = None

    # --- state for the HTTP handlers ----------------------------------------------------
    @property
    def checks(self) -> list[Check]:
        return self.gen.scheduler.checks

    def check_state(self, name: str) -> CheckState | None:
        return self.gen.scheduler.state.get(name)

    @property
    def config(self) -> Config:
        return self.gen.config

    @property
    def diagnosis(self) -> Diagnosis | None:
        return self.evaluator.last

    async def metrics_body(self, openmetrics: bool, gzipped: bool = False) -> bytes:
        """The /metrics exposition, rendered (and gzipped) on the render thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._render_pool, render, self.registry, self.gen.scheduler.store, openmetrics,
            gzipped,
        )

    @property
    def observations(self) -> Observations | None:
        return self.evaluator.observations

    @property
    def trend(self) -> tuple[Point, ...]:
        return self.evaluator.trend

    @property
    def ready(self) -> bool:
        return self.gen.scheduler.all_ran or time.monotonic() - self._started >= READY_AFTER

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        """Bind the listener and start the checks (raises OSError if the port is taken)."""
        server = self.gen.config.server
        web_app = make_web_app(self)
        runner = self._runner = make_runner(web_app)

        def handler() -> web.RequestHandler:
            assert runner.server is not None
            return runner.server()

        self._gate = Gate(
            self.registry,
            Limits(self._max_connections, server.header_timeout, server.idle_timeout),
            handler,
            lambda: self.web.tls if self.web else None,
        )
        web_app.middlewares.append(self._gate.middleware)  # outermost: it sees every request
        self._guard.install(web_app)
        await runner.setup()
        await GatedSite(runner, server.host or None, server.port, self._gate).start()
        # Move what startup loaded (pydantic, aiohttp, the config) out of the collector's
        # view: a full collection scanning it stalls the loop ~15 ms, inside a probe's timing.
        gc.freeze()
        # The diagnosis, /metrics and the page run pure Python on worker threads while the
        # loop times probes: each time the loop wakes it waits for the GIL up to one switch
        # interval, 5 ms by default, and at 1000 path targets it wakes ~2000 times a second.
        sys.setswitchinterval(SWITCH_INTERVAL)
        # And fewer full collections: an evaluation's transient samples (40k at 1000 path
        # targets) otherwise set off several per evaluation, each stopping every thread.
        _, gen1, _ = gc.get_threshold()
        gc.set_threshold(YOUNG_GC_EVERY, gen1, FULL_GC_EVERY)
        self.gen.scheduler.start()
        self.evaluator.start()
        log.info(
            "exporter started",
            extra={
                "version": __version__,
                "listen": server.listen_address,
                "scheme": self.web.scheme if self.web else "http",
                "basic_auth": bool(self.web and self.web.config.basic_auth_users),
                "max_connections": self._max_connections,
                "checks": len(self.checks),
                "config": self.config_path,
            },
        )

    async def serve(self) -> None:
        """Run until SIGTERM/SIGINT; SIGHUP reloads the config."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(self.reload()))
        await self.start()
        await self._stop.wait()
        log.info("shutting down")
        await self.shutdown()

    async def shutdown(self) -> None:
        self._render_pool.shutdown(wait=False)
        await self.evaluator.stop()
        await self.gen.scheduler.stop(timeout=SHUTDOWN_BUDGET - 2)
        if self._runner is not None:
            await asyncio.wait_for(self._runner.cleanup(), timeout=2)
            self._runner = None
        self._guard.close()

    async def reload(self) -> bool:
        """Re-read the config file; keep the old generation if the new one is invalid."""
        async with self._reload_lock:
            try:
                # Off the event loop: even a bounded parse of a 1 MiB file takes a while,
                # and /metrics and the probes keep their timing meanwhile.
                loaded = await asyncio.to_thread(load_config, self.config_path)
                config = self._adjust(loaded)
                new = build_generation(config)
                web_config = (await asyncio.to_thread(load_web_config, self._web_path)
                              if self._web_path else None)
            except ConfigError as exc:
                for message in exc.messages:
                    log.error(
                        "config reload failed, keeping the running config",
                        extra={"problem": message},
                    )
                self._reloads.labels(metrics.CHECK_ERROR).inc()
                self._last_reload_ok.set(0)
                return False
            old = self.gen
            for key in ("listen_address", "max_connections"):
                if getattr(config.server, key) != getattr(old.config.server, key):
                    log.warning(
                        f"server.{key} changed; it takes effect on restart",
                        extra={"running": getattr(old.config.server, key)},
                    )
            self.web = web_config
            if self._gate is not None:
                self._gate.limits = replace(
                    self._gate.limits, header_timeout=config.server.header_timeout,
                    idle_timeout=config.server.idle_timeout)
            setup_logging(config.server.log_format, config.server.log_level)
            await old.scheduler.stop()
            self.gen = new
            new.scheduler.start()
            self._reloads.labels(metrics.CHECK_SUCCESS).inc()
            self._last_reload_ok.set(1)
            log.info("config reloaded", extra={"checks": len(new.scheduler.checks)})
            return True
