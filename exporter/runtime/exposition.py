"""/metrics from the checks' batches: the one place their samples become text.

Every check hands the scheduler one immutable batch per run (``exporter/checks/batch.py``);
the ``Store`` keeps the latest of each and renders it to sample lines then, once
(``lines.py``), so a scrape only joins bytes. A batch replaces its owner's lines whole,
under a lock a scrape holds only while it copies the lists of lines: a scrape sees all of
one run or none of it, and a retired owner's series go with its batch.

The runtime's own families (build info, reloads, listener, peak window, diagnosis, process)
come first, rendered by prometheus_client from ``head``; no family is in both halves.
Sample lines are the same in the Prometheus text format and OpenMetrics for these families
(counters, gauges, histograms; no exemplars, no ``_created``): only the family headers and
the ``# EOF`` trailer differ, and those are written per scrape.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Container
from typing import cast

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from exporter.checks.batch import Batch
from exporter.diagnosis.families import RawSample
from exporter.metrics import SCHEMA, Family
from exporter.runtime.lines import header, raw_samples, render_lines

_EOF = b"# EOF\n"
#: zlib's fastest level: 3x faster than the default, for 20 % more bytes.
GZIP_LEVEL = 1
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around the deflate stream
_openmetrics = cast(Callable[[object], bytes], generate_openmetrics)
_RANK = {family: i for i, family in enumerate(SCHEMA.values())}


class _Piece:
    """One owner's batch with its lines per family, and its raw samples once asked for."""

    __slots__ = ("batch", "lines", "raw")

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.lines = render_lines(batch)
        self.raw: tuple[Container[str], list[RawSample]] | None = None


class Store:
    """The latest batch of every owner (a check), rendered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pieces: dict[str, _Piece] = {}
        self._families: dict[Family, dict[str, bytes]] = {}  # family -> owner -> lines

    def publish(self, owner: str, batch: Batch) -> None:
        """``batch`` is everything ``owner`` has now: what it leaves out is gone."""
        piece = _Piece(batch)  # rendered before the lock, so a scrape never waits on it
        with self._lock:
            self._drop(owner, keep=piece.lines.keys())
            for family, text in piece.lines.items():
                self._families.setdefault(family, {})[owner] = text
            self._pieces[owner] = piece

    def retire(self, owner: str) -> None:
        """``owner`` is gone, and its series with it."""
        with self._lock:
            self._drop(owner)

    def _drop(self, owner: str, keep: Container[Family] = ()) -> None:
        old = self._pieces.pop(owner, None)
        for family in old.lines if old is not None else ():
            if family not in keep:
                del self._families[family][owner]

    def batches(self) -> dict[str, Batch]:
        """The latest batch of every owner (a benchmark's reference renders them again)."""
        with self._lock:
            return {owner: piece.batch for owner, piece in self._pieces.items()}

    def text(self, openmetrics: bool) -> bytes:
        """Every family with its header, each owner's lines together."""
        with self._lock:
            families = [(f, list(by.values())) for f, by in self._families.items() if by]
        families.sort(key=lambda item: _RANK.get(item[0], len(_RANK)))
        parts: list[bytes] = []
        for family, lines in families:
            parts.append(header(family, openmetrics))
            parts.extend(lines)
        return b"".join(parts)

    def raw(self, keep: Container[str]) -> list[RawSample]:
        """The samples named in ``keep`` of every batch, as the diagnosis windows read them
        (``(sample name, labels, value)``); worked out once per batch."""
        with self._lock:
            pieces = list(self._pieces.values())
        out: list[RawSample] = []
        for piece in pieces:
            cached = piece.raw
            if cached is None or cached[0] is not keep:
                cached = piece.raw = (keep, raw_samples(piece.batch, keep))
            out.extend(cached[1])
        return out


def render(head: CollectorRegistry, store: Store, openmetrics: bool, gzipped: bool = False
           ) -> bytes:
    """The whole exposition: ``head`` rendered now, then the store's text and the trailer
    OpenMetrics ends with.

    The three are compressed one after another into one gzip stream rather than joined
    first: joining copies the store's megabytes twice while holding the GIL, which a scrape
    at 1000 targets (7 MB) waited on for ~10 ms, longer while the diagnosis ran beside it."""
    if not openmetrics:
        before, after = generate_latest(head), b""
    else:
        first = _openmetrics(head)
        assert first.endswith(_EOF)
        before, after = first[: -len(_EOF)], _EOF
    text = store.text(openmetrics)
    if not gzipped:
        return b"".join((before, text, after))
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return b"".join((packer.compress(before), packer.compress(text), packer.compress(after),
                     packer.flush()))
