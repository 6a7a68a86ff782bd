"""A carrier's CIDR file from a regional registry's public delegation statistics.

    python -m exporter.checks.clients.delegation delegated-apnic-extended-latest \\
        --cc CN --holder-of 219.141.140.10 --holder-of 202.96.209.133 > telecom.txt

The file (https://ftp.apnic.net/stats/apnic/delegated-apnic-extended-latest; the other
registries publish the same format) has a line per block:
``registry|cc|type|start|value|date|status|opaque-id``, where an IPv4 value is a count of
addresses and an IPv6 value a prefix length. ``--cc`` keeps one country's blocks. The
extended file's opaque-id is the same for every block of one holder, so ``--holder-of ADDR``
(an address known to be the carrier's, such as its DNS resolvers in deploy/carriers-cn.yaml)
keeps every block of the holder of that address. Where a national registry (CNNIC) holds
blocks on its members' behalf, their id is the registry's: the summary on stderr says how
many blocks each chosen holder has, so such a match shows (docs/clients.md).
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from exporter.checks.clients.cidrs import MAX_CIDR_BYTES
from exporter.config.files import FileProblem, read_text

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Block:
    cc: str
    holder: str
    networks: tuple[Network, ...]


def blocks(text: str) -> Iterator[Block]:
    """The allocated and assigned IPv4 and IPv6 blocks of a delegation file."""
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.strip().split("|")
        if len(parts) < 7 or parts[2] not in ("ipv4", "ipv6") or parts[1] == "*":
            continue  # the version line, summaries, asn blocks, comments
        if parts[6] not in ("allocated", "assigned"):
            continue
        holder = parts[7] if len(parts) > 7 else ""
        nets: tuple[Network, ...]
        try:
            start, value = parts[3], int(parts[4])
            if parts[2] == "ipv4":
                first = ipaddress.IPv4Address(start)
                nets = tuple(ipaddress.summarize_address_range(first, first + (value - 1)))
            else:
                nets = (ipaddress.IPv6Network(f"{start}/{value}"),)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
        yield Block(parts[1], holder, nets)


def select(all_blocks: Iterable[Block], cc: str | None,
           seeds: list[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> tuple[list[Block],
                                                                             Counter[str]]:
    """The blocks of country ``cc`` (any with None) held by the holders of ``seeds`` (every
    holder without seeds), and how many blocks each chosen holder has."""
    kept = [b for b in all_blocks if cc is None or b.cc == cc]
    if seeds:
        holders = {b.holder for b in kept for a in seeds
                   if any(a.version == n.version and a in n for n in b.networks)}
        kept = [b for b in kept if b.holder in holders]
    return kept, Counter(b.holder for b in kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a delegation file, e.g. delegated-apnic-extended-latest")
    parser.add_argument("--cc", help="a country code, e.g. CN")
    parser.add_argument("--holder-of", action="append", default=[], metavar="ADDRESS",
                        help="keep the blocks of the holder of this address (repeatable)")
    args = parser.parse_args(argv)
    try:
        seeds = [ipaddress.ip_address(a) for a in args.holder_of]
        text = read_text(args.file, 8 * MAX_CIDR_BYTES)
        kept, holders = select(blocks(text), args.cc, seeds)
    except (ValueError, FileProblem) as exc:
        print(f"{args.file}: {exc}", file=sys.stderr)
        return 2
    if args.holder_of and not kept:
        print(f"{args.file}: no block holds {', '.join(args.holder_of)}", file=sys.stderr)
        return 2
    if args.holder_of and "" in holders:
        print(f"{args.file}: no opaque-id column, so no holder to follow (use the extended"
              " file, delegated-apnic-extended-latest)", file=sys.stderr)
        return 2
    for holder, count in holders.most_common():
        print(f"# holder {holder or '-'}: {count} blocks", file=sys.stderr)
    for block in kept:
        for net in block.networks:
            print(net)
    return 0


if __name__ == "__main__":
    sys.exit(main())
