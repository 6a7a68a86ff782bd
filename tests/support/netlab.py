"""A network lab of Linux network namespaces joined by veth pairs, for the path checks.

Everything lives in namespaces the lab creates: the prober runs in a client namespace of
its own, so no address, route or sysctl of the host namespace is touched and the only
addresses ever probed are those the lab assigned. Carrier namespaces ignore echoes in the
kernel and answer them from ``netlab_responder.py`` (delay, jitter, loss); nftables rules
drop TCP SYNs, or a share of every TCP packet on a port (``tcp_drops``); TCP data is delayed
by ``lab/delay_proxy.py`` (the scenario lab, ``tests/support/lab/``, builds carrier paths on
these primitives). Teardown stops every process by PID and deletes every namespace (which
deletes their veths), whatever happened before.

Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN), ``ip`` and ``nft``. ``require_lab()`` skips
without them, except under CI=true, where a missing capability fails instead.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

#: The lab's userspace stand-ins for a delay qdisc (this responder, ``lab/delay_proxy.py``,
#: ``tun_delay.py``) take real-time priority where allowed (root, as the labs run), as the
#: kernel's netem would run in softirq: a test computing beside them must not make them wake
#: late, which would read as path delay. They sleep nearly always, and the kernel's RT
#: throttling leaves others 5 % of each core regardless.
RESPONDER = Path(__file__).resolve().parent / "netlab_responder.py"
PROXY = Path(__file__).resolve().parent / "lab" / "delay_proxy.py"
CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def lab_unavailable() -> str | None:
    """Why the lab cannot run here, or None."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "the namespace lab needs root (ip netns, veth, raw sockets)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (Debian: iproute2, nftables)"
    probe = f"llecap{os.getpid()}"
    proc = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if proc.returncode != 0:
        return f"cannot create a network namespace: {proc.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def require_lab() -> None:
    reason = lab_unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the network lab cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


#: How late the userspace echo responder may answer on average, on a loaded 2-core runner
#: (it asks for real-time priority, which a container may refuse): 3 ms was seen beside six
#: spinning processes, 5 ms in a loaded CI run.
STAND_IN_LATE = 0.015


def applied_range(delay: float, jitter: float, n: int) -> tuple[float, float]:
    """Where the mean of ``n`` round trips the responder applied for ``delay`` +- uniform
    ``jitter`` lies: within four standard errors of ``delay``, plus up to STAND_IN_LATE above
    it (a userspace stand-in for netem can only answer late)."""
    bound = 4 * jitter / math.sqrt(3 * n)
    return delay - bound, delay + bound + STAND_IN_LATE


def _binomial_pmf(n: int, p: float, k: int) -> float:
    if p in (0.0, 1.0):
        return float(k == round(n * p))
    # In logs: C(n, k) overflows a float from n of about a thousand.
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(p) + (n - k) * math.log1p(-p))


def binomial_interval(n: int, p: float, mass: float = 0.99) -> tuple[int, int]:
    """Central interval of Binomial(n, p) holding at least ``mass`` of the probability."""
    tail = (1 - mass) / 2
    cdf, lo, hi = 0.0, None, n
    for k in range(n + 1):
        cdf += _binomial_pmf(n, p, k)
        if lo is None and cdf > tail:
            lo = k
        if cdf >= 1 - tail:
            hi = k
            break
    return lo or 0, hi


def sh(*args: str, input: str | None = None) -> str:
    proc = subprocess.run(args, capture_output=True, text=True, input=input, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


_libc = ctypes.CDLL(None, use_errno=True)


def in_netns(ns: str, fn: Callable[[], T]) -> T:
    """Run ``fn`` on a fresh thread that has entered namespace ``ns``; sockets it opens,
    and threads it starts, live there. The caller's own thread is untouched."""
    out: dict[str, object] = {}

    def body() -> None:
        try:
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns {ns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=body, name=f"netns-{ns}")
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]  # type: ignore[return-value]


@dataclass
class Responder:
    proc: subprocess.Popen[bytes]
    log: Path

    def echoes(self, source: str | None = None) -> list[tuple[str, int, int, int, bool, float]]:
        """(source, ident, seq, received_ns, replied, applied_delay_s) per echo so far."""
        out = []
        for line in self.log.read_text().splitlines():
            src, ident, seq, rx, status, applied = line.split()
            if source is None or src == source:
                out.append(
                    (src, int(ident), int(seq), int(rx), status == "replied", int(applied) / 1e9)
                )
        return out


class Lab:
    def __init__(self, workdir: Path) -> None:
        # Names carry the PID: parallel runs and a crashed earlier run never collide.
        self.tag = f"lle{os.getpid() % 100000}"
        self.workdir = workdir
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self._veths = 0

    def netns(self, name: str) -> str:
        full = f"{self.tag}-{name}"
        sh("ip", "netns", "add", full)
        self.namespaces.append(full)
        sh("ip", "-n", full, "link", "set", "lo", "up")
        return full

    def link(self, a: str, addr_a: str, b: str, addr_b: str, prefix: int = 30) -> None:
        """A veth pair between namespaces a and b with an address on each end."""
        self._veths += 1
        ia, ib = f"{self.tag}v{self._veths}a", f"{self.tag}v{self._veths}b"
        sh("ip", "link", "add", ia, "netns", a, "type", "veth", "peer", "name", ib, "netns", b)
        for ns, dev, addr in ((a, ia, addr_a), (b, ib, addr_b)):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/{prefix}", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")

    def route(self, ns: str, dst: str, via: str) -> None:
        sh("ip", "-n", ns, "route", "replace", dst, "via", via)

    def sysctl(self, ns: str, key: str, value: str) -> None:
        sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={value}")

    def nft(self, ns: str, ruleset: str) -> None:
        sh("ip", "netns", "exec", ns, "nft", "-f", "-", input=ruleset)

    def spawn(self, ns: str, args: list[str], **kw: object) -> subprocess.Popen[bytes]:
        """A process inside ``ns``, in its own process group, stopped by PID at teardown."""
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            ["ip", "netns", "exec", ns, *args],
            start_new_session=True,
            **kw,  # type: ignore[call-overload]
        )
        self.procs.append(proc)
        return proc

    def responder(
        self,
        ns: str,
        delay: float,
        jitter: float = 0.0,
        loss: float = 0.0,
        seed: int = 1,
        tcp_port: int | None = None,
    ) -> Responder:
        """Make ``ns`` answer echoes from userspace with the given delay, jitter and loss."""
        self.sysctl(ns, "net.ipv4.icmp_echo_ignore_all", "1")
        log = self.workdir / f"{ns}-echoes.log"
        args = [
            sys.executable,
            str(RESPONDER),
            "--delay",
            str(delay),
            "--jitter",
            str(jitter),
            "--loss",
            str(loss),
            "--seed",
            str(seed),
            "--log",
            str(log),
        ]
        if tcp_port:
            args += ["--tcp-port", str(tcp_port)]
        return Responder(self.spawn_ready(ns, args, "responder"), log)

    def delay_proxy(
        self,
        ns: str,
        listen: str,
        upstream: str,
        delay: float,
        jitter: float = 0.0,
        seed: int = 1,
        stall: float = 0.0,
        stall_after: int = 3,
    ) -> subprocess.Popen[bytes]:
        """Relay TCP from ``listen`` (host:port inside ``ns``) to ``upstream``, each
        direction's data held for half of ``delay`` +- half of ``jitter`` (a round trip of
        ``delay``, like the responder's echoes)."""
        args = [
            sys.executable, str(PROXY), "--listen", listen, "--upstream", upstream,
            "--delay", str(delay), "--jitter", str(jitter), "--seed", str(seed),
            "--stall", str(stall), "--stall-after", str(stall_after),
        ]
        return self.spawn_ready(ns, args, "delay proxy")

    def tcp_drops(self, ns: str, port: int, percent: int) -> None:
        """Drop ``percent`` % of the TCP packets to and from ``port`` in ``ns``, both ways
        and every packet (SYNs, data, ACKs), counted; replaces an earlier setting. The
        kernel's retransmissions then do what a lossy path does to a stream."""
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "lossy"],
                       capture_output=True)
        if percent <= 0:
            return
        self.nft(ns, f"""
            table inet lossy {{
              chain input {{
                type filter hook input priority 0; policy accept;
                tcp dport {port} numgen random mod 100 < {percent} counter drop
              }}
              chain output {{
                type filter hook output priority 0; policy accept;
                tcp sport {port} numgen random mod 100 < {percent} counter drop
              }}
            }}""")

    def syn_drops(self, ns: str, port: int, drops: int) -> None:
        """Drop the first ``drops`` SYNs of every connection to ``port`` as they arrive in
        ``ns`` (a SYN-flood guard, a full accept queue, a greylisting firewall), counted;
        replaces an earlier setting. The client's kernel retries each about a second
        later (Linux 6.7+ spaces its first retries linearly; older kernels double the
        wait: 1 s, then 2 s more), so each new connection opens ``drops`` seconds late or
        more while echoes and the stream, once connected, are clean."""
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "syndrop"],
                       capture_output=True)
        if drops <= 0:
            return
        syn = f"tcp dport {port} tcp flags & (syn | ack) == syn"
        flow = "ip saddr . tcp sport"
        # One set per SYN already dropped: the n-th passes once n-1 are in the sets.
        sets = "".join(
            f"set seen{i} {{ type ipv4_addr . inet_service; flags dynamic, timeout; "
            f"timeout 60s; }}\n" for i in range(drops))
        rules = [f"{syn} {flow} @seen{drops - 1} accept"]
        rules += [f"{syn} {flow} @seen{i - 1} add @seen{i} {{ {flow} }} counter drop"
                  for i in range(drops - 1, 0, -1)]
        rules.append(f"{syn} add @seen0 {{ {flow} }} counter drop")
        body = "\n".join(rules)
        self.nft(ns, f"""
            table inet syndrop {{
              {sets}
              chain input {{
                type filter hook input priority 0; policy accept;
                {body}
              }}
            }}""")

    def arrival_drops(self, ns: str, table: str, match: str, percent: int) -> None:
        """Drop ``percent`` % of the packets ``match`` (an nftables match) selects as they
        arrive in ``ns``, counted, in table ``table`` (replacing an earlier one of that
        name). A drop on arrival is a loss the sender must repair (a retransmission, a gap
        at the receiver), unlike one on the output hook, which its own stack retries."""
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", table],
                       capture_output=True)
        if percent <= 0:
            return
        self.nft(ns, f"""
            table inet {table} {{
              chain input {{
                type filter hook input priority 0; policy accept;
                {match} numgen random mod 100 < {percent} counter drop
              }}
            }}""")

    def nft_counters(self, ns: str) -> int:
        """Packets counted by every nftables counter in ``ns`` (0 without rules)."""
        ruleset = json.loads(sh("ip", "netns", "exec", ns, "nft", "-j", "list", "ruleset"))
        return sum(
            int(e["counter"]["packets"])
            for item in ruleset["nftables"]
            if "rule" in item
            for e in item["rule"]["expr"]
            if isinstance(e, dict) and "counter" in e
        )

    def spawn_ready(self, ns: str, args: list[str], what: str) -> subprocess.Popen[bytes]:
        """``spawn``, then wait for the process's ``ready`` line."""
        proc = self.spawn(ns, args, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":  # listening before anyone probes
            raise RuntimeError(f"{what} in {ns} did not start (exit {proc.poll()})")
        return proc

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """Stop one process this lab started, by PID (its own process group)."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            except ProcessLookupError:
                pass
        if proc.stdout is not None:
            proc.stdout.close()

    def close(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)
        self.procs.clear()
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces.clear()
