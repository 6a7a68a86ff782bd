"""Route classes from traceroute hop addresses, by CIDR table (``data/routes-cn.yaml`` here).

A table names networks (lists of CIDRs) and ordered rules; the first rule whose networks all
appear among the hops gives the class. A user file extends the built-in table (its networks
replace same-named ones, its rules are tried first) or replaces it with ``replace: true``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

from exporter.config.files import FileProblem, read_text
from exporter.config.yamlfile import ConfigError, YamlPath, compose, format_path

#: Built-in classes that no table rule may use: no rule matched / no hop answered.
OTHER = "other"
UNKNOWN = "unknown"
_CLASS_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class RouteTableError(Exception):
    """A problem in a route table file, naming the file and line."""


@dataclass(frozen=True)
class Rule:
    route_class: str
    networks: frozenset[str]


@dataclass(frozen=True)
class RouteTable:
    networks: dict[str, tuple[Network, ...]]
    rules: tuple[Rule, ...]

    @property
    def classes(self) -> list[str]:
        """Every class this table can give, built-ins included (bounded label values)."""
        return [*dict.fromkeys(r.route_class for r in self.rules), OTHER, UNKNOWN]

    def networks_of(self, hops: Iterable[str]) -> set[str]:
        seen: set[str] = set()
        for hop in hops:
            try:
                addr = ipaddress.ip_address(hop)
            except ValueError:
                continue
            seen.update(n for n, nets in self.networks.items() if any(addr in x for x in nets))
        return seen

    def classify(self, hops: Iterable[str]) -> str:
        hops = list(hops)
        if not hops:
            return UNKNOWN
        seen = self.networks_of(hops)
        for rule in self.rules:
            if rule.networks <= seen:
                return rule.route_class
        return OTHER


class _Source:
    """One table file being read: its data, and where each YAML path sits for errors."""

    def __init__(self, text: str, name: str) -> None:
        self.name = name
        try:
            self.data, self.lines = compose(text)
        except ConfigError as exc:
            raise RouteTableError(f"{name} {exc.messages[0]}") from None
        if not isinstance(self.data, dict):
            raise self.error((), "expected a mapping with networks and classes")
        unknown = sorted(map(str, set(self.data) - {"replace", "networks", "classes"}))
        if unknown:
            raise self.error(
                (unknown[0],), f"unknown key {unknown[0]!r}; known keys: replace, networks, classes"
            )

    def error(self, path: YamlPath, msg: str) -> RouteTableError:
        line = next(
            (self.lines[path[:i]] for i in range(len(path), -1, -1) if path[:i] in self.lines), 1
        )
        return RouteTableError(f"{self.name}: {format_path(path)} (line {line}): {msg}")

    @property
    def replace(self) -> bool:
        value = self.data.get("replace", False)
        if not isinstance(value, bool):
            raise self.error(("replace",), f"expected true or false, got {value!r}")
        return value

    def networks(self) -> dict[str, tuple[Network, ...]]:
        raw = self.data.get("networks") or {}
        if not isinstance(raw, dict):
            raise self.error(("networks",), "expected a mapping of name to a list of CIDRs")
        out: dict[str, tuple[Network, ...]] = {}
        for name, cidrs in raw.items():
            if not isinstance(cidrs, list) or not cidrs:
                raise self.error(("networks", name), "expected a non-empty list of CIDRs")
            nets = []
            for i, cidr in enumerate(cidrs):
                try:
                    nets.append(ipaddress.ip_network(str(cidr), strict=True))
                except ValueError as exc:
                    raise self.error(("networks", name, i), f"bad CIDR {cidr!r}: {exc}") from None
            out[str(name)] = tuple(nets)
        return out

    def rules(self, known: dict[str, tuple[Network, ...]]) -> list[Rule]:
        raw = self.data.get("classes") or []
        if not isinstance(raw, list):
            raise self.error(("classes",), "expected a list of {class: NAME, all: [NETWORK]}")
        rules = []
        for i, item in enumerate(raw):
            path: YamlPath = ("classes", i)
            if not isinstance(item, dict) or set(item) != {"class", "all"}:
                raise self.error(path, "expected {class: NAME, all: [NETWORK, ...]}")
            cls, nets = item["class"], item["all"]
            if not isinstance(cls, str) or not _CLASS_RE.match(cls) or cls in (OTHER, UNKNOWN):
                raise self.error(
                    (*path, "class"),
                    f"expected a lower_snake_case name other than {OTHER!r} and {UNKNOWN!r},"
                    f" got {cls!r}",
                )
            if not isinstance(nets, list) or not nets:
                raise self.error((*path, "all"), "expected a non-empty list of network names")
            missing = [n for n in nets if n not in known]
            if missing:
                raise self.error((*path, "all"), f"unknown network {missing[0]!r}")
            rules.append(Rule(cls, frozenset(map(str, nets))))
        return rules


def builtin_text() -> str:
    return resources.files(__package__).joinpath("data/routes-cn.yaml").read_text(encoding="utf-8")


def load_table(path: str | None = None) -> RouteTable:
    """The built-in table, extended or replaced by the file at ``path``."""
    builtin = _Source(builtin_text(), "routes-cn.yaml (built in)")
    networks = builtin.networks()
    rules = builtin.rules(networks)
    if path is not None:
        try:
            text = read_text(path)
        except FileProblem as exc:
            raise RouteTableError(f"cannot read {path}: {exc}") from None
        own = _Source(text, path)
        networks = own.networks() if own.replace else {**networks, **own.networks()}
        own_rules = own.rules(networks)
        rules = own_rules if own.replace else [*own_rules, *rules]
        if not rules:
            raise RouteTableError(f"{path}: a replacing table needs at least one class")
    return RouteTable(networks, tuple(rules))
