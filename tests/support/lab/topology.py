"""The scenario lab's network: a client namespace (the exporter), a GPU site namespace (the
simulator) and one namespace per carrier between them, each reached through a chain of
router namespaces whose addresses come from the route table's CIDRs.

    client ──(direct link)────────────────────────────────────────────── site :SIM
      │                                                                   │
      └── router(s) ── carrier ns: ICMP responder, delay proxy :8000 ─────┘
            (hops)      nftables drops on :8000 (loss, SYNs); target address T
                        (stream_loss: drops on arrival here and in the client)

A probe tagged with a carrier targets the carrier's address T: its TCP crosses the routers,
is dropped by nftables and delayed by the proxy in the carrier namespace, then reaches the
simulator over the carrier's link to the site. The path check pings T (the responder gives
the same delay, jitter and loss to echoes) and traceroutes it through the routers, so one
carrier's fault shows in both. The engine check and the untagged probe use the direct link.

A route change builds a second router chain and moves the client's route (and the carrier's
return route) onto it, as test_path_lab does by hand. Only addresses the lab assigned inside
its own namespaces are ever used.
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from exporter.checks.path.routes import load_table
from tests.support.lab.scenario import CARRIERS, CarrierPath, hop_networks
from tests.support.netlab import Lab, Responder, sh

#: The TCP port each carrier's proxy listens on (inside its own namespace).
PROXY_PORT = 8000
CLIENT_ADDR, SITE_ADDR = "198.18.0.1", "198.18.0.2"


@dataclass
class Carrier:
    name: str
    index: int
    ns: str
    #: Where this carrier's probes and path checks start: the lab's client namespace, or
    #: the carrier's own vantage point namespace in a fleet (``vantage_points=True``).
    client: str
    #: The address probes and path checks target.
    target: str
    #: The carrier's own address on its link to the site, and the site's.
    uplink: str
    site_side: str
    path: CarrierPath = field(default_factory=CarrierPath)
    hops: list[str] = field(default_factory=list)  # router addresses, client side first
    #: Its echo log is the ground truth of the delay each echo was given.
    responder: Responder | None = None
    proxy: subprocess.Popen[bytes] | None = None
    routes: int = 0  # router chains built so far


class CarrierLab:
    """Builds and drives the namespaces; ``close()`` (via the Lab) removes all of them.

    With ``vantage_points`` each carrier's routers start from a namespace of its own
    (``vp-<carrier>``) instead of the shared client: a vantage point inside that carrier's
    network, which reaches the site through that carrier only."""

    def __init__(self, workdir: Path, sim_port: int, vantage_points: bool = False) -> None:
        self.lab = Lab(workdir)
        self.sim_port = sim_port
        self.table = load_table()
        self._next_host: dict[str, int] = defaultdict(int)
        self.client = self.lab.netns("client")
        self.site = self.lab.netns("site")
        self.lab.link(self.client, CLIENT_ADDR, self.site, SITE_ADDR)
        # No ping sockets by default in a new namespace; the exporter's path check may
        # use them instead of raw sockets, as a deployment without CAP_NET_RAW would.
        self.lab.sysctl(self.client, "net.ipv4.ping_group_range", "0 2147483647")
        self.carriers: dict[str, Carrier] = {}
        for i, name in enumerate(CARRIERS):
            ns = self.lab.netns(name)
            client = self.client
            if vantage_points:
                client = self.lab.netns(f"vp-{name}")
                self.lab.sysctl(client, "net.ipv4.ping_group_range", "0 2147483647")
            c = Carrier(name, i, ns, client, target=f"198.18.{10 + i}.1",
                        uplink=f"198.18.{20 + i}.1", site_side=f"198.18.{20 + i}.2")
            sh("ip", "-n", ns, "addr", "add", f"{c.target}/32", "dev", "lo")
            self.lab.link(ns, c.uplink, self.site, c.site_side)
            self.carriers[name] = c

    def close(self) -> None:
        self.lab.close()

    # --- addresses ------------------------------------------------------------------------
    def hop_address(self, hop: str) -> str:
        """A fresh router address for one hop: the literal address, or the next unused
        /31 of the network's first CIDR (so carriers and route versions never collide)."""
        try:
            return str(ipaddress.IPv4Address(hop))
        except ValueError:
            pass
        net = self.table.networks[hop][0]
        n = self._next_host[hop] = self._next_host[hop] + 1
        return str(net.network_address + 2 * n + 1)

    def route_addresses(self, hops: list[str]) -> list[str]:
        return [self.hop_address(n) for hop in hops for n in hop_networks(hop)]

    # --- carriers -------------------------------------------------------------------------
    def set_route(self, carrier: str, hops: list[str]) -> list[str]:
        """Route the client's traffic to the carrier through new routers at these hops, and
        the carrier's answers back through them; earlier routers stay, unused."""
        c = self.carriers[carrier]
        c.routes += 1
        addrs = self.route_addresses(hops)
        routers = [self.lab.netns(f"{c.name[:2]}{c.routes}r{j}") for j in range(len(addrs))]
        prev_ns = c.client
        for ns, addr in zip(routers, addrs, strict=True):
            peer = str(ipaddress.IPv4Address(int(ipaddress.IPv4Address(addr)) ^ 1))  # its /31 peer
            self.lab.link(prev_ns, peer, ns, addr, prefix=31)
            self.lab.sysctl(ns, "net.ipv4.ip_forward", "1")
            self.lab.sysctl(ns, "net.ipv4.conf.all.rp_filter", "0")
            # Back toward the client: the way it came (ICMP time-exceeded goes this way).
            sh("ip", "-n", ns, "route", "replace", "default", "via", peer)
            if prev_ns != c.client:
                self.lab.route(prev_ns, f"{c.target}/32", addr)
            prev_ns = ns
        # The last link reaches the carrier namespace itself.
        last = f"198.18.{30 + c.index}.{4 * c.routes}"
        near, far = str(ipaddress.IPv4Address(last)), str(ipaddress.IPv4Address(last) + 1)
        self.lab.link(prev_ns, near, c.ns, far, prefix=31)
        if prev_ns != c.client:
            self.lab.route(prev_ns, f"{c.target}/32", far)
        self.lab.sysctl(c.ns, "net.ipv4.conf.all.rp_filter", "0")
        sh("ip", "-n", c.ns, "route", "replace", "default", "via", near)
        # Switch last: the client's route to the target moves in one step.
        self.lab.route(c.client, f"{c.target}/32", addrs[0] if addrs else far)
        c.hops = addrs
        return addrs

    def shape(self, carrier: str, path: CarrierPath, seed: int) -> None:
        """Give the carrier this delay, jitter, loss, stream loss, SYN drops and stall (restarting the responder and
        the proxy, which take their settings at start; open connections are cut)."""
        c = self.carriers[carrier]
        for proc in (c.responder.proc if c.responder else None, c.proxy):
            if proc is not None:
                self.lab.stop(proc)
        seed = seed * 10 + c.index
        c.responder = self.lab.responder(c.ns, path.delay, path.jitter, path.loss, seed=seed)
        c.proxy = self.lab.delay_proxy(
            c.ns, f"0.0.0.0:{PROXY_PORT}", f"{c.site_side}:{self.sim_port}",
            path.delay, path.jitter, seed=seed, stall=path.stall, stall_after=path.stall_after)
        self.lab.tcp_drops(c.ns, PROXY_PORT, path.loss_percent)
        self.lab.syn_drops(c.ns, PROXY_PORT, path.syn_drops)
        # Stream-only loss at both ends of the probe's connection (the client namespace is
        # shared by the carriers: its table is this carrier's, matched on its address).
        self.lab.arrival_drops(c.ns, "streamloss", f"tcp dport {PROXY_PORT}",
                               path.stream_loss_percent)
        self.lab.arrival_drops(c.client, f"streamloss_{c.name}",
                               f"ip saddr {c.target} tcp sport {PROXY_PORT}",
                               path.stream_loss_percent)
        c.path = path

    def probe_url(self, carrier: str) -> str:
        return f"http://{self.carriers[carrier].target}:{PROXY_PORT}/v1/chat/completions"

    def spawn(self, ns: str, args: list[str], **kw: object) -> subprocess.Popen[bytes]:
        return self.lab.spawn(ns, args, **kw)

