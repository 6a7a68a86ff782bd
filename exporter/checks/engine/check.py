"""Engine check: scrape an inference engine's metrics endpoint, re-expose one schema.

Each target (``engines:`` entry) is scraped over aiohttp with a total timeout and a body-size
cap, parsed by ``exporter.checks.engine.parse`` against the mapping table, and kept as an
immutable snapshot. The check's batch carries the last successful snapshot's samples as
they are, so values are the engine's own (counter resets pass through as resets,
histograms keep the engine's buckets) and a target that goes down loses its data series
while ``llm_engine_up{target}`` stays, at 0.

Failures raise ``ScrapeError`` after updating the metrics; the scheduler logs the failing
and recovered transitions once each, with the reason (never the body or the token).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from exporter import __version__, metrics, redact
from exporter.checks.base import Check, Registration
from exporter.checks.batch import Batch, Buckets, Ledger, Sample
from exporter.checks.engine.parse import (
    HistogramValue,
    ParseError,
    ParseTimeout,
    Snapshot,
    detect,
    has_names,
    parse,
)
from exporter.checks.engine.table import SOURCES
from exporter.config.models import Config, EngineConfig

log = logging.getLogger("exporter.engine")

#: Bodies larger than this are abandoned mid-read (reason too_large). A 16-model, 2-rank
#: vLLM exposition is about 1.3 MB, so this leaves room for big fleets behind one URL.
MAX_BODY_BYTES = 16 * 1024 * 1024
#: The scheduler's deadline is the configured timeout plus this, so the HTTP timeout fires
#: first and the failure is counted here as reason=timeout rather than cancelled blind.
TIMEOUT_GRACE = 1.0
ACCEPT = (
    "text/plain;version=0.0.4;q=1.0,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
)
#: Where engines that report a version over HTTP do so (JSON with a "version" key).
VERSION_PATHS = {"vllm": "/version", "sglang": "/get_server_info"}
VERSION_MAX_BYTES = 1024 * 1024
_VERSION_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")
#: trtllm-serve answers /metrics with JSON iteration stats; its Prometheus text is here.
TRTLLM_PROMETHEUS_PATH = "/prometheus/metrics"

#: Every normalized data family, in table order (the order /metrics lists them).
DATA_FAMILIES: tuple[metrics.Family, ...] = tuple(dict.fromkeys(s.target for s in SOURCES))


class ScrapeError(Exception):
    """A failed scrape; ``reason`` is one of ENGINE_SCRAPE_ERROR_REASONS, safe to log."""

    def __init__(self, reason: str, detail: str) -> None:
        assert reason in metrics.ENGINE_SCRAPE_ERROR_REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def view_samples(target: str, family: str, version: str, snapshot: Snapshot) -> Batch:
    """What /metrics shows of one target that is up: its info series and every normalized
    data series of its last successful scrape, in table order."""
    out: list[Sample] = [
        (metrics.ENGINE_INFO, (target, family, version), 1.0)
    ]
    for fam in DATA_FAMILIES:
        for key, value in snapshot.series.get(fam, {}).items():
            labels = (target, snapshot.engine, *key)
            if isinstance(value, HistogramValue):
                pairs = value.sorted_buckets()
                out.append((fam, labels, Buckets(
                    tuple(le for le, _ in pairs), tuple(n for _, n in pairs),
                    value.sum, value.count,
                )))
            else:
                out.append((fam, labels, value))
    return tuple(out)


@dataclass(frozen=True)
class TargetView:
    """One successful scrape of a target: its snapshot and the samples it publishes."""

    snapshot: Snapshot
    samples: Batch


def _base_url(url: str) -> str:
    """The server root a metrics URL hangs off (for the version endpoint)."""
    parts = urlsplit(url)
    path = parts.path
    for suffix in (TRTLLM_PROMETHEUS_PATH, "/metrics"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/"), "", ""))


def _looks_like(content_type: str, body: bytes) -> str | None:
    """'html' or 'json' when the response is clearly not the text exposition format."""
    head = body[:64].lstrip()
    if "html" in content_type or head[:1] == b"<":
        return "html"
    if "json" in content_type or head[:1] in (b"{", b"["):
        return "json"
    return None


class EngineCheck(Check):
    kind = "engine"

    def __init__(
        self,
        config: EngineConfig,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        super().__init__(config.name, config.interval, config.timeout + TIMEOUT_GRACE)
        self.config = config
        self.max_body_bytes = max_body_bytes
        self._url = config.url
        self._detected: str | None = None
        self._kept: Mapping[str, tuple[str, ...]] = {}
        #: Drop reasons of the last scrape, so a cap being hit is logged once, not per scrape.
        self._dropping: frozenset[str] = frozenset()
        self._version: str | None = None
        self._version_family = ""
        self._session: aiohttp.ClientSession | None = None
        headers = {"Accept": ACCEPT, "User-Agent": f"llm-latency-exporter/{__version__}"}
        if config.bearer_token is not None:
            headers["Authorization"] = f"Bearer {config.bearer_token.value()}"
        self._headers = headers
        self._own = own = Ledger()
        self._view: TargetView | None = None  # the last successful scrape while up
        for reason in metrics.ENGINE_SCRAPE_ERROR_REASONS:
            own.counter(metrics.ENGINE_SCRAPE_ERRORS, {"target": self.target, "reason": reason})
        for reason in metrics.ENGINE_DROP_REASONS:
            own.counter(metrics.ENGINE_DROPPED_SERIES, {"target": self.target, "reason": reason})

    def describe(self) -> str:
        family = self.config.type or self._detected or "auto-detect"
        auth = (
            f", bearer token from {self.config.bearer_token.describe()}"
            if self.config.bearer_token is not None
            else ""
        )
        return f"{redact.url(self._url)} ({family}{auth})"

    @property
    def url(self) -> str:
        """The URL scraped now (the trtllm-serve fallback may have replaced the config's)."""
        return self._url

    async def run(self) -> None:
        started = time.monotonic()
        try:
            view = await self._scrape(started + self.config.timeout)
        except ScrapeError as exc:
            self._down(exc.reason, time.monotonic() - started)
            raise
        self._up(view, time.monotonic() - started)

    def batch(self) -> Batch:
        mine = self._own.batch()
        return mine + self._view.samples if self._view is not None else mine

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- one scrape ---------------------------------------------------------------------
    async def _scrape(self, deadline: float) -> TargetView:
        body, content_type = await self._fetch(self._url, deadline, self.max_body_bytes)
        kind = _looks_like(content_type, body)
        if kind == "json" and urlsplit(self._url).path.rstrip("/").endswith("/metrics"):
            body, content_type, kind = await self._try_trtllm_prometheus(deadline, body)
        if kind is not None:
            raise ScrapeError("not_prometheus", f"got {kind}, not the Prometheus text format")
        # Parsing takes ~20 ms per MB (a 16 MB label bomb, most of a second): keep it off
        # the event loop, which then shares the interpreter with it at the GIL's switch
        # interval (5 ms) instead of stopping for it. The parse stops at the deadline, so a
        # thread is never left working for a scrape that has already timed out.
        snapshot = await asyncio.to_thread(self._parse, body, deadline)
        if snapshot.engine != (self.config.type or self._detected):
            log.info(
                "engine family detected",
                extra={"check": self.name, "family": snapshot.engine},
            )
            self._detected = snapshot.engine
        version = await self._engine_version(snapshot.engine, deadline)
        return TargetView(snapshot, view_samples(self.target, snapshot.engine, version, snapshot))

    async def _try_trtllm_prometheus(
        self, deadline: float, body: bytes
    ) -> tuple[bytes, str, str | None]:
        parts = urlsplit(self._url)
        path = parts.path.rstrip("/")
        if path.endswith(TRTLLM_PROMETHEUS_PATH):
            return body, "application/json", "json"
        alt = urlunsplit(
            (parts.scheme, parts.netloc, path[: -len("/metrics")] + TRTLLM_PROMETHEUS_PATH,
             parts.query, "")
        )
        body, content_type = await self._fetch(alt, deadline, self.max_body_bytes)
        kind = _looks_like(content_type, body)
        if kind is None:
            log.info(
                "metrics URL returned JSON (trtllm-serve); using its Prometheus endpoint",
                extra={"check": self.name, "path": urlsplit(alt).path},
            )
            self._url = alt
        return body, content_type, kind

    def _parse(self, body: bytes, deadline: float | None = None) -> Snapshot:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ScrapeError("malformed", f"body is not UTF-8 at byte {exc.start}") from None
        # Label values reach /metrics: a server echoing a configured token into one (or
        # anywhere in the body) must not publish it.
        text = redact.secrets(text)
        configured = self.config.type
        if configured is not None and not has_names(text, configured):
            # A 200 with "Service Unavailable" (or another engine's names) is not an engine
            # of this type answering: down, not an empty success.
            raise ScrapeError("unrecognized", f"no {configured} metric names in the body")
        family = configured or self._detected
        limits, keep = self.config, self._kept
        try:
            snapshot = None
            if family is not None:
                snapshot = parse(text, family, limits, keep, deadline)
                # A configured type whose names are there is trusted even when nothing
                # mapped matched (an engine that has loaded no model yet); a detected one
                # is re-checked.
                if snapshot.matched or configured is not None:
                    return snapshot
            found = detect(text)
            if found is None:
                raise ScrapeError(
                    "unrecognized", "no vLLM, trtllm-serve, Triton or SGLang metric names"
                )
            if found == family and snapshot is not None:
                return snapshot
            return parse(text, found, limits, deadline=deadline)
        except ParseError as exc:
            raise ScrapeError("malformed", str(exc)) from None
        except ParseTimeout:
            raise ScrapeError(
                "timeout",
                f"no complete scrape within {self.config.timeout:g}s "
                f"(parsing a {len(body)} byte body)",
            ) from None

    async def _fetch(self, url: str, deadline: float, limit: int) -> tuple[bytes, str]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ScrapeError("timeout", f"no complete response within {self.config.timeout:g}s")
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers)
        try:
            async with self._session.get(
                url, timeout=aiohttp.ClientTimeout(total=remaining)
            ) as resp:
                if not 200 <= resp.status < 300:
                    reason = {4: "http_4xx", 5: "http_5xx"}.get(resp.status // 100, "http_status")
                    raise ScrapeError(reason, f"HTTP {resp.status}")
                if resp.content_length is not None and resp.content_length > limit:
                    raise ScrapeError("too_large", f"body of {resp.content_length} bytes")
                buf = bytearray()
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    if len(buf) > limit:
                        # Leaving the context without reading on closes the connection.
                        raise ScrapeError("too_large", f"body over {limit} bytes")
                return bytes(buf), resp.content_type
        except TimeoutError:
            raise ScrapeError(
                "timeout", f"no complete response within {self.config.timeout:g}s"
            ) from None
        except aiohttp.TooManyRedirects as exc:
            # The host answered, so not "connection": the URL needs fixing, not the network.
            hops = len(exc.history)
            raise ScrapeError("redirect", f"redirect loop ({hops} redirects)") from None
        except aiohttp.ClientError as exc:
            raise ScrapeError("connection", _connection_detail(exc)) from None

    async def _engine_version(self, family: str, deadline: float) -> str:
        """The engine's version, asked once per up period; "" where it reports none."""
        if self._version is not None and self._version_family == family:
            return self._version
        version = ""
        path = VERSION_PATHS.get(family)
        if path is not None:
            try:
                body, _ = await self._fetch(
                    _base_url(self._url) + path, deadline, VERSION_MAX_BYTES
                )
                data = json.loads(body)
                found = data.get("version") if isinstance(data, dict) else None
                if isinstance(found, str) and _VERSION_RE.fullmatch(found):
                    version = found
            except (ScrapeError, ValueError):
                pass  # the version is a nicety; its absence must not fail the scrape
        self._version, self._version_family = version, family
        return version

    # --- outcome ------------------------------------------------------------------------
    def _up(self, view: TargetView, elapsed: float) -> None:
        own, target = self._own, {"target": self.target}
        self._view = view
        own.gauge(metrics.ENGINE_UP, target).set(1)
        own.gauge(metrics.ENGINE_SCRAPE_DURATION, target).set(elapsed)
        dropped = view.snapshot.dropped
        for reason, count in dropped.items():
            own.counter(metrics.ENGINE_DROPPED_SERIES, {**target, "reason": reason}).inc(count)
        reasons = frozenset(r for r, n in dropped.items() if n)
        if reasons - self._dropping:
            log.warning(
                "engine series dropped by a cap",
                extra={"check": self.name, "reasons": ",".join(sorted(reasons)),
                       "dropped": sum(dropped.values())},
            )
        self._dropping = reasons
        self._kept = view.snapshot.kept

    def _down(self, reason: str, elapsed: float) -> None:
        own, target = self._own, {"target": self.target}
        self._view = None
        own.gauge(metrics.ENGINE_UP, target).set(0)
        own.gauge(metrics.ENGINE_SCRAPE_DURATION, target).set(elapsed)
        own.counter(metrics.ENGINE_SCRAPE_ERRORS, {**target, "reason": reason}).inc()
        # The engine may come back as a different build: ask for its version again.
        self._version = None


def _connection_detail(exc: aiohttp.ClientError) -> str:
    # Built from the error type and OS error only: aiohttp's own messages can include
    # the URL, and a URL may carry credentials.
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {exc.os_error.strerror or type(exc.os_error).__name__}"
    return type(exc).__name__


def build(config: Config) -> list[Check]:
    """One check per ``engines:`` entry."""
    return [EngineCheck(engine) for engine in config.engines]


REGISTRATION = Registration("engines", build)
