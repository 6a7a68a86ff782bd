"""Carrier CIDR lists: a plain file per carrier, one prefix a line, and the longest-prefix
lookup that names a client address's carrier.

A file holds IPv4 and IPv6 prefixes (``1.0.1.0/24``, ``240e::/20``), ``#`` comments and
blank lines: what ``deploy/clients/build_cidrs.py`` writes from a registry's delegation file
(docs/clients.md). A prefix in two carriers' files goes to the more specific one; the same
prefix in two files is refused, as nothing could say which carrier it is.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from exporter.config.files import FileProblem, read_text

#: Carrier lists are long (a national carrier holds thousands of prefixes), never megabytes
#: of them: 8 MiB is about 400,000 lines.
MAX_CIDR_BYTES = 8 * 1024 * 1024


class CidrError(Exception):
    """Carrier files that cannot be used: ``problems`` holds (carrier, message) for each, the
    message naming the file and, where there is one, its line."""

    def __init__(self, message: str, carrier: str = "",
                 more: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__("; ".join(m for _, m in ((carrier, message), *more)))
        self.problems = ((carrier, message), *more)


def read_prefixes(path: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    try:
        text = read_text(path, MAX_CIDR_BYTES)
    except FileProblem as exc:
        raise CidrError(f"cannot read {path}: {exc}") from None
    out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for number, line in enumerate(text.splitlines(), 1):
        item = line.partition("#")[0].strip()
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=True))
        except ValueError as exc:
            raise CidrError(f"{path} line {number}: bad CIDR {item!r}: {exc}") from None
    if not out:
        raise CidrError(f"{path}: no CIDR in the file (one prefix a line)")
    return out


@dataclass(frozen=True)
class Carriers:
    """Which carrier holds an address, by longest prefix. ``names[i]`` is carrier ``i``;
    ``lookup`` gives ``len(names)`` for an address none holds (the "other" carrier)."""

    names: tuple[str, ...]
    # Per address length in bytes (4 or 16): (prefix length, {network as int: carrier}),
    # longest prefix first, only the lengths some file uses.
    _tables: Mapping[int, tuple[tuple[int, dict[int, int]], ...]]
    prefixes: tuple[int, ...]  # per carrier, how many prefixes its file gave

    def lookup(self, address: bytes) -> int:
        bits = len(address) * 8
        value = int.from_bytes(address, "big")
        for length, table in self._tables.get(len(address), ()):
            found = table.get(value >> (bits - length))
            if found is not None:
                return found
        return len(self.names)


def load_carriers(files: Mapping[str, str]) -> Carriers:
    """The carriers of ``files`` (carrier name -> CIDR file), each file read now."""
    tables: dict[int, dict[int, dict[int, int]]] = {4: {}, 16: {}}
    read, failed = [], []
    # Every file before the first problem: a copied config misses all its files, not one.
    for name, path in files.items():
        try:
            read.append((name, path, read_prefixes(path)))
        except CidrError as exc:
            failed.append((name, str(exc)))
    if failed:
        raise CidrError(failed[0][1], failed[0][0], failed[1:])
    counts = []
    for index, (name, path, nets) in enumerate(read):
        counts.append(len(nets))
        for net in nets:
            size = 4 if net.version == 4 else 16
            table = tables[size].setdefault(net.prefixlen, {})
            key = int(net.network_address) >> (size * 8 - net.prefixlen)
            other = table.setdefault(key, index)
            if other != index:
                raise CidrError(
                    f"{path}: {net} is also in carrier {list(files)[other]!r}'s file", name
                )
    return Carriers(
        tuple(files),
        {size: tuple(sorted(t.items(), reverse=True)) for size, t in tables.items()},
        tuple(counts),
    )
