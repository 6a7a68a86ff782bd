"""Clients check: real users' established TCP connections on local ports, per carrier.

Each run dumps the connections on ``clients.ports`` from the kernel (``diag.py``, on a
worker thread) and adds them up per (carrier, port): the carrier comes from the client
address by longest prefix over the configured CIDR lists (``cidrs.py``), and is all that is
kept of the address. Segment counts are per-connection cumulative in the kernel; the check
keeps each connection's last values by socket cookie (its identity for the namespace's
life) so a run adds only what was sent and retransmitted since the previous one. The map
holds only the connections the last dump saw (at most ``max_connections``): an entry goes
when its connection is no longer established, and what it sent after the last run is
never seen, so the counters never go backwards.

The first run takes stock: its connections are counted as established but not as opened,
and their history before it is not counted as segments.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from exporter import metrics
from exporter.checks.base import Check, Registration
from exporter.checks.batch import Batch, Counter, Gauge, Histogram, Ledger, Named
from exporter.checks.clients import diag
from exporter.checks.clients.cidrs import Carriers, CidrError, load_carriers
from exporter.config.models import ClientsConfig, Config
from exporter.config.yamlfile import ConfigError

#: The counters of each (carrier, port), added to from a run's tally.
COUNTED = (metrics.CLIENTS_SEGMENTS_SENT, metrics.CLIENTS_SEGMENTS_RETRANSMITTED,
           metrics.CLIENTS_OPENED, metrics.CLIENTS_CLOSED)

#: cookie -> (slot, segments retransmitted, data segments sent) at the last run.
State = dict[bytes, tuple[int, int, int]]


@dataclass
class Tally:
    """What one run found, per slot (``carrier * len(ports) + port``), built off the loop."""

    slots: int
    rtt_buckets: int
    rate_buckets: int
    connections: list[int] = field(init=False)
    opened: list[int] = field(init=False)
    closed: list[int] = field(init=False)
    retransmitted: list[int] = field(init=False)
    sent: list[int] = field(init=False)
    rtt: list[list[int]] = field(init=False)
    rtt_sum: list[float] = field(init=False)
    #: per slot * 2 + app_limited
    rate: list[list[int]] = field(init=False)
    rate_sum: list[float] = field(init=False)
    truncated: bool = False

    def __post_init__(self) -> None:
        n = self.slots
        self.connections, self.opened, self.closed = [0] * n, [0] * n, [0] * n
        self.retransmitted, self.sent = [0] * n, [0] * n
        self.rtt, self.rtt_sum = [[0] * self.rtt_buckets for _ in range(n)], [0.0] * n
        self.rate = [[0] * self.rate_buckets for _ in range(2 * n)]
        self.rate_sum = [0.0] * (2 * n)


def tally(
    conns: Iterable[diag.Connection],
    previous: State | None,
    slot_of: Callable[[diag.Connection], int | None],
    shape: Tally,
    rtt_bounds: Sequence[float],
    rate_bounds: Sequence[float],
    cap: int,
) -> State:
    """Fill ``shape`` from ``conns`` against ``previous`` (None: the first run); the new
    state. At ``cap`` connections the rest is not read: ``previous`` entries not reached
    are carried over (not closed), so the state holds at most twice ``cap``."""
    first = previous is None
    prev = previous or {}
    state: State = {}
    t = shape
    for conn in conns:
        if len(state) >= cap:
            t.truncated = True
            break
        old = prev.get(conn.cookie)
        if old is None:
            found = slot_of(conn)
            if found is None:
                continue
            slot = found
            state[conn.cookie] = (slot, conn.retransmitted, conn.sent)
            t.connections[slot] += 1
            if first:
                continue
            t.opened[slot] += 1
            retransmitted, sent = conn.retransmitted, conn.sent
        else:
            slot = old[0]
            state[conn.cookie] = (slot, conn.retransmitted, conn.sent)
            t.connections[slot] += 1
            retransmitted = max(0, conn.retransmitted - old[1])
            sent = max(0, conn.sent - old[2])
        t.retransmitted[slot] += retransmitted
        if not sent:
            continue  # an idle connection's RTT and rate are from its last data: stale
        t.sent[slot] += sent
        t.rtt[slot][bisect.bisect_left(rtt_bounds, conn.rtt)] += 1
        t.rtt_sum[slot] += conn.rtt
        if conn.delivery_rate is not None:
            r = 2 * slot + conn.app_limited
            t.rate[r][bisect.bisect_left(rate_bounds, conn.delivery_rate)] += 1
            t.rate_sum[r] += conn.delivery_rate
    for cookie, entry in prev.items():
        if cookie not in state:
            if t.truncated:
                state[cookie] = entry
            else:
                t.closed[entry[0]] += 1
    return state


class ClientsCheck(Check):
    kind = "clients"

    def __init__(self, cfg: ClientsConfig, carriers: Carriers,
                 established: Callable[[Sequence[int], float], Iterable[diag.Connection]]
                 = diag.established) -> None:
        super().__init__("sock_diag", cfg.interval, cfg.interval)
        self.ports = tuple(cfg.ports)
        self.carriers = carriers
        self.max_connections = cfg.max_connections
        self._established = established
        self._port_index = {port: i for i, port in enumerate(self.ports)}
        names = (*carriers.names, metrics.CLIENTS_OTHER_CARRIER)
        self._slots: list[Named] = [
            {"carrier": name, "port": str(port)} for name in names for port in self.ports
        ]
        own = self._own = Ledger()
        for name, count in zip(carriers.names, carriers.prefixes, strict=True):
            own.gauge(metrics.CLIENTS_PREFIXES, {"carrier": name}).set(count)
        self._truncated = own.counter(metrics.CLIENTS_TRUNCATED)
        # Per slot, kept so a run updates them without asking the ledger again.
        self._connections: list[Gauge] = []
        self._counted: list[tuple[Counter, ...]] = []  # in COUNTED's order
        self._rtt: list[Histogram] = []
        self._rate: list[Histogram] = []
        for labels in self._slots:  # pre-created: every carrier and port, from the first run
            self._connections.append(own.gauge(metrics.CLIENTS_CONNECTIONS, labels))
            self._counted.append(tuple(own.counter(family, labels) for family in COUNTED))
            self._rtt.append(own.histogram(metrics.CLIENTS_RTT, labels, cfg.rtt_buckets))
            self._rate.extend(
                own.histogram(metrics.CLIENTS_DELIVERY_RATE, {**labels, "app_limited": limited})
                for limited in metrics.CLIENTS_APP_LIMITED
            )
        self._state: State | None = None

    def describe(self) -> str:
        lists = ", ".join(f"{n} ({c} prefixes)"
                          for n, c in zip(self.carriers.names, self.carriers.prefixes, strict=True))
        return f"ports {', '.join(map(str, self.ports))}; carriers {lists}"

    def _slot(self, conn: diag.Connection) -> int | None:
        port = self._port_index.get(conn.port)
        if port is None:
            return None  # the kernel filters by port; this only guards against a stray reply
        return self.carriers.lookup(conn.remote) * len(self.ports) + port

    def _read(self, previous: State | None) -> tuple[State, Tally]:
        rtt_bounds, rate_bounds = self._rtt[0].bounds, self._rate[0].bounds
        shape = Tally(len(self._slots), len(rtt_bounds), len(rate_bounds))
        state = tally(self._established(self.ports, self.timeout), previous, self._slot,
                      shape, rtt_bounds, rate_bounds, self.max_connections)
        return state, shape

    async def run(self) -> None:
        # A cancelled run (past its timeout) leaves the thread's result unused and the
        # state as it was, so the next run counts from the last one that finished.
        state, t = await asyncio.to_thread(self._read, self._state)
        self._state = state
        counted = (t.sent, t.retransmitted, t.opened, t.closed)  # COUNTED's order
        for slot, connections in enumerate(self._connections):
            connections.set(t.connections[slot])
            for counter, values in zip(self._counted[slot], counted, strict=True):
                counter.inc(values[slot])
            self._rtt[slot].merge(t.rtt[slot], t.rtt_sum[slot])
            for r in (2 * slot, 2 * slot + 1):
                self._rate[r].merge(t.rate[r], t.rate_sum[r])
        if t.truncated:
            self._truncated.inc()

    @property
    def tracked(self) -> int:
        """Connections whose counters the check holds now."""
        return len(self._state or ())

    def batch(self) -> Batch:
        return self._own.batch()


def carrier_files(config: Config) -> Mapping[str, str]:
    """Each carrier's CIDR file, a relative path taken from the config file's folder."""
    assert config.clients is not None
    base = Path(config.where()).parent
    return {name: str(base / path) for name, path in config.clients.carriers.items()}


def build(config: Config) -> list[Check]:
    """One check for the ``clients`` section; its CIDR files are read now (so SIGHUP, which
    builds every check anew, re-reads them, and a bad file keeps the running config)."""
    if config.clients is None:
        return []
    try:
        carriers = load_carriers(carrier_files(config))
    except CidrError as exc:
        raise ConfigError([f"{config.where('clients', 'carriers', carrier)}: {message}"
                           for carrier, message in exc.problems]) from None
    return [ClientsCheck(config.clients, carriers)]


REGISTRATION = Registration("clients", build)
