"""The path and route checks against simulated carrier paths in network namespaces.

Each test builds its own lab (tests/support/netlab.py): a client namespace for the prober and one
namespace per simulated carrier, answered by a userspace responder whose log is the ground
truth. Only addresses the lab assigned inside its namespaces are probed. Root is needed;
without it these tests skip, except under CI=true where they fail.
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.checks.path import check as path
from exporter.checks.path.check import PathCheck
from exporter.checks.path.route import RouteCheck
from exporter.config.load import parse_config
from tests.support import ROOT
from tests.support.netlab import Lab, Responder, applied_range, binomial_interval, in_netns, sh
from tests.support.procs import http_get
from tests.support.samples import Exposed, parse, published_value

# name: (delay s, uniform jitter +- s, loss ratio), the shapes of the benchmark paths
PATHS = {
    "ct": (0.150, 0.005, 0.001),
    "cu": (0.230, 0.025, 0.05),
    "cm": (0.280, 0.040, 0.08),
}
BURST, SPACING, TIMEOUT, BURSTS = 100, "10ms", "600ms", 4


def carrier_lab(lab: Lab) -> tuple[str, dict[str, tuple[str, str, Responder]]]:
    """A client namespace linked to one responder namespace per entry of PATHS."""
    client = lab.netns("c")
    paths = {}
    for i, (name, (delay, jitter, loss)) in enumerate(PATHS.items()):
        ns = lab.netns(name)
        lab.link(client, f"198.18.{i}.1", ns, f"198.18.{i}.2")
        paths[name] = (
            f"198.18.{i}.1",
            f"198.18.{i}.2",
            lab.responder(ns, delay, jitter, loss, seed=i + 1),
        )
    return client, paths


@pytest.mark.parametrize("mode", ["dgram", "raw"])
def test_icmp_rtt_loss_and_jitter_match_the_responder(lab: Lab, mode: str) -> None:
    client, paths = carrier_lab(lab)
    # Ping sockets exist only where ping_group_range admits the group; else raw (root).
    lab.sysctl(client, "net.ipv4.ping_group_range", "0 2147483647" if mode == "dgram" else "1 0")
    targets = "\n".join(
        f"    {name}: [{{name: {name}, host: {addr}, region: lab}}]"
        for name, (_, addr, _) in paths.items()
    )
    cfg = parse_config(
        f"paths:\n  interval: 5s\n  burst: {BURST}\n  spacing: {SPACING}\n  timeout: {TIMEOUT}\n"
        f"  carriers:\n{targets}\n"
    )
    reg = Exposed()
    rfc: dict[str, list[float]] = {name: [] for name in PATHS}

    async def measure() -> str | None:
        checks = [c for c in path.build(cfg) if isinstance(c, PathCheck)]
        reg.add(*checks)
        try:
            for _ in range(BURSTS):
                await asyncio.gather(*(c.run() for c in checks))
                for c in checks:
                    assert c.jitter is not None
                    rfc[c.spec.name].append(c.jitter)
            return checks[0].icmp.mode
        finally:
            for c in checks:
                await c.close()

    assert in_netns(client, lambda: asyncio.run(measure())) == mode

    for name, (delay, jitter, loss) in PATHS.items():
        source, _, responder = paths[name]
        labels = {"carrier": name, "target": name, "region": "lab", "protocol": "icmp"}
        echoes = responder.echoes(source)
        sent = published_value(reg.checks, "llm_path_packets_sent_total", **labels)
        received = published_value(reg.checks, "llm_path_packets_received_total", **labels)
        dropped = sum(not e[4] for e in echoes)
        # Every echo settled: the counters are exactly the responder's truth.
        assert sent == len(echoes) == BURST * BURSTS, name
        assert sent - received == dropped, name
        lo, hi = binomial_interval(BURST * BURSTS, loss)
        assert lo <= dropped <= hi, (name, dropped, lo, hi)

        mean_rtt = published_value(reg.checks, "llm_path_rtt_seconds_sum", **labels) / received
        applied = statistics.fmean(e[5] for e in echoes if e[4])
        assert abs(mean_rtt - applied) < 0.001, (name, mean_rtt, applied)
        # And the responder gave the path's shape: the nominal delay, not 1 ms of it, since
        # its own lateness on a loaded runner is not the prober's error.
        low, high = applied_range(delay, jitter, int(received))
        assert low <= applied <= high, (name, applied, delay)

        # RTT differences of iid uniform(+-j) delays: E|D| = 2j/3, the RFC 3550 fixed point.
        analytic = 2 * jitter / 3
        assert abs(statistics.fmean(rfc[name]) - analytic) < 0.25 * analytic, (name, rfc[name])
        assert published_value(reg.checks, "llm_path_jitter_seconds", **labels, method="rfc3550") == rfc[name][-1]
        mad = published_value(reg.checks, "llm_path_jitter_seconds", **labels, method="mean_abs_diff")
        assert abs(mad - analytic) < 0.25 * analytic, (name, mad)
        last_loss = published_value(reg.checks, "llm_path_loss_ratio", **labels)
        assert last_loss == pytest.approx(sum(not e[4] for e in echoes[-BURST:]) / BURST)


def test_route_class_and_a_route_change(lab: Lab, caplog: pytest.LogCaptureFixture) -> None:
    """Two paths to one target: via a 163 router then a CN2 router (GT), or via CN2 only (GIA).

    Router addresses come from the CIDR table; they exist only inside these namespaces, and
    the client reaches them only through its own veths.
    """
    c, a1, a2, b1, d = (lab.netns(n) for n in ("c", "a1", "a2", "b1", "d"))
    lab.link(c, "202.97.1.1", a1, "202.97.1.2")  # a1 answers from 202.97/16 (163)
    lab.link(a1, "59.43.1.1", a2, "59.43.1.2")  # a2 answers from 59.43/16 (CN2)
    lab.link(a2, "198.18.9.1", d, "198.18.9.2")
    lab.link(c, "59.43.2.1", b1, "59.43.2.2")  # b1 answers from 59.43/16 (CN2)
    lab.link(b1, "198.18.9.5", d, "198.18.9.6")
    target = "198.18.99.1"
    sh("ip", "-n", d, "addr", "add", f"{target}/32", "dev", "lo")
    for router in (a1, a2, b1):
        lab.sysctl(router, "net.ipv4.ip_forward", "1")
    lab.route(c, f"{target}/32", "202.97.1.2")
    lab.route(a1, f"{target}/32", "59.43.1.2")
    lab.route(a2, f"{target}/32", "198.18.9.2")
    lab.route(a2, "202.97.1.0/30", "59.43.1.1")
    lab.route(b1, f"{target}/32", "198.18.9.6")
    lab.route(d, "202.97.1.0/30", "198.18.9.1")
    lab.route(d, "59.43.2.0/30", "198.18.9.5")

    cfg = parse_config(
        "paths:\n  timeout: 1s\n  carriers:\n"
        f"    telecom: [{{name: sh, host: {target}, region: lab}}]\n"
    )
    checks = [c for c in path.build(cfg) if isinstance(c, RouteCheck)]
    reg = Exposed(*checks)
    check = checks[0]
    labels = {"carrier": "telecom", "target": "sh"}

    async def trace_twice() -> None:
        try:
            await check.run()
            assert check.route_class == "cn2_gt"
            assert (
                reg.get_sample_value("llm_path_route_info", {**labels, "route_class": "cn2_gt"})
                == 1
            )
            assert reg.get_sample_value("llm_path_hops", labels) == 3
            lab.route(c, f"{target}/32", "59.43.2.2")  # the carrier moves us to CN2 only
            await check.run()
        finally:
            await check.close()

    with caplog.at_level(logging.INFO, logger="exporter.route"):
        in_netns(c, lambda: asyncio.run(trace_twice()))
    assert check.route_class == "cn2_gia"
    assert reg.get_sample_value("llm_path_route_info", {**labels, "route_class": "cn2_gia"}) == 1
    # The old class's series is gone, not left at 1 beside the new one.
    assert reg.get_sample_value("llm_path_route_info", {**labels, "route_class": "cn2_gt"}) is None
    assert reg.get_sample_value("llm_path_hops", labels) == 2
    assert reg.get_sample_value("llm_path_route_changes_total", labels) == 1
    changes = [r for r in caplog.records if r.getMessage() == "route class changed"]
    assert [(r.old, r.new) for r in changes] == [("cn2_gt", "cn2_gia")]  # type: ignore[attr-defined]


def scrape(ns: str, port: int, path_: str = "/metrics") -> tuple[int, str]:
    return in_netns(ns, lambda: http_get(f"http://127.0.0.1:{port}{path_}", timeout=2))


def path_samples(text: str) -> dict[tuple[str, str, str], float]:
    """(family sample name, target, reason-or-route_class) -> value for llm_path_* samples."""
    out = {}
    for (name, labels), v in parse(text).items():
        found = dict(labels)
        if name.startswith("llm_path_") and "target" in found:  # not the section's own
            extra = found.get("reason") or found.get("route_class") or ""
            out[(name, found["target"], extra)] = v
    return out


@pytest.mark.parametrize("icmp_allowed", [False, True], ids=["no-icmp-permission", "ping-socket"])
def test_exporter_without_cap_net_raw(lab: Lab, tmp_path: Path, icmp_allowed: bool) -> None:
    """CAP_NET_RAW dropped: ICMP works only through ping sockets, and TCP always does."""
    client, far = lab.netns("c"), lab.netns("far")
    lab.link(client, "198.18.0.1", far, "198.18.0.2")
    lab.responder(far, 0.02, tcp_port=8443)
    # Drop 20% of the SYNs to 8443, counted; a probe's deadline (300 ms) ends before the
    # kernel's first SYN retransmit (1 s), so each drop is exactly one lost probe.
    lab.nft(
        far,
        """
        table inet lab {
          chain input {
            type filter hook input priority 0; policy accept;
            tcp dport 8443 tcp flags & (syn | ack) == syn numgen random mod 5 == 0 counter drop
          }
        }""",
    )
    lab.sysctl(client, "net.ipv4.ping_group_range", "0 2147483647" if icmp_allowed else "1 0")
    config = tmp_path / "config.yaml"
    config.write_text(
        "server: {listen_address: '127.0.0.1:9400'}\n"
        "paths:\n  interval: 2s\n  burst: 20\n  spacing: 20ms\n  timeout: 300ms\n"
        "  route_interval: 1m\n  carriers:\n    lab:\n"
        "      - {name: echo, host: 198.18.0.2, region: lab}\n"
        "      - {name: https, host: 198.18.0.2, region: lab, protocol: tcp, port: 8443}\n"
        "      - {name: closed, host: 198.18.0.2, region: lab, protocol: tcp, port: 8444}\n"
    )
    log = tmp_path / "exporter.log"
    with log.open("wb") as out:
        proc = lab.spawn(
            client,
            [
                "setpriv",
                "--bounding-set",
                "-net_raw",
                "--",
                sys.executable,
                "-m",
                "exporter",
                "run",
                "--config",
                str(config),
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    def nft_drops() -> int:
        ruleset = json.loads(sh("ip", "netns", "exec", far, "nft", "-j", "list", "ruleset"))
        return int(
            next(
                e["counter"]["packets"]
                for item in ruleset["nftables"]
                if "rule" in item
                for e in item["rule"]["expr"]
                if "counter" in e
            )
        )

    deadline = time.monotonic() + 40
    values: dict[tuple[str, str, str], float] = {}
    drops, https_lost = -1, -1.0
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        # The drop counter read on both sides of the scrape: equal means no SYN of a new
        # burst was dropped meanwhile, so the scrape and the counter describe one moment.
        before = nft_drops()
        status, text = scrape(client, 9400)
        after = nft_drops()
        values = path_samples(text) if status == 200 else {}
        https_sent = values.get(("llm_path_packets_sent_total", "https", ""), 0)
        https_lost = https_sent - values.get(("llm_path_packets_received_total", "https", ""), 0)
        drops = after
        # Two bursts done, read between bursts (a packet is counted once its fate is known,
        # so whole bursts of 20 mean nothing of the last burst awaits its deadline).
        if (
            before == after
            and https_sent >= 40
            and https_sent % 20 == 0
            and https_lost == drops
            and ("llm_path_route_info", "https", "other") in values
        ):
            break
        time.sleep(0.2)
    else:
        pytest.fail(
            f"no two TCP bursts whose losses match the {drops} nftables drops within 40 s "
            f"(last: {https_lost} lost); log:\n{log.read_text()}"
        )
    assert scrape(client, 9400, "/-/healthy")[0] == 200
    logged = log.read_text()
    assert https_lost == drops and values[("llm_path_packets_received_total", "https", "")] > 0
    closed_sent = values[("llm_path_packets_sent_total", "closed", "")]
    # A reset is an answer: the closed port's path has no loss, only its reason counted.
    assert closed_sent >= 20
    assert values[("llm_path_packets_received_total", "closed", "")] == closed_sent
    assert values[("llm_path_errors_total", "closed", "refused")] == closed_sent
    # The route check needs no privilege either (UDP probes, ICMP answers from the error queue).
    assert values[("llm_path_hops", "https", "")] == 1

    hints = [line for line in logged.splitlines() if "setcap cap_net_raw+ep" in line]
    if icmp_allowed:
        assert "icmp_mode=dgram" in logged and not hints
        assert values[("llm_path_packets_received_total", "echo", "")] > 0
        assert values[("llm_path_errors_total", "echo", "permission")] == 0
    else:
        assert len(hints) == 1 and "ping_group_range" in hints[0], logged
        assert values[("llm_path_errors_total", "echo", "permission")] >= 1
        assert values[("llm_path_packets_sent_total", "echo", "")] == 0
