"""Path checks at scale, on loopback in a namespace of their own: the one shared ICMP
socket demultiplexes hundreds of targets without cross-talk, raw and datagram alike, and
traceroute rounds are counted (and a late one said) across parallel workers.

Every 127.0.0.0/8 address is local, so each is a distinct target answered by the kernel;
nftables drops the echoes to some of them, which must then, and only then, show loss.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from exporter.checks.path import check as path
from exporter.checks.path.check import PathCheck
from exporter.checks.path.route import RouteCheck, Tracer
from exporter.checks.path.routes import load_table
from exporter.config.load import parse_config
from tests.support.netlab import Lab, in_netns
from tests.support.samples import Exposed, published_value

TARGETS, BURST = 200, 5
SILENT = {f"127.0.1.{i}" for i in range(1, TARGETS + 1) if i % 10 == 0}


def targets_config(extra: str = "", n: int = TARGETS) -> str:
    rows = "\n".join(
        f"      - {{name: t{i}, host: 127.0.1.{i}, region: lo}}" for i in range(1, n + 1)
    )
    return (
        "paths:\n  interval: 5s\n  burst: 5\n  spacing: 20ms\n  timeout: 1s\n"
        f"{extra}  carriers:\n    lab:\n{rows}\n"
    )


@pytest.mark.parametrize("mode", ["raw", "dgram"])
def test_one_shared_socket_no_cross_talk(lab: Lab, mode: str) -> None:
    ns = lab.netns("c")
    # Ping sockets exist only where ping_group_range admits the group; root opens raw ones.
    lab.sysctl(ns, "net.ipv4.ping_group_range", "0 2147483647" if mode == "dgram" else "1 0")
    lab.nft(ns, f"""
        table inet silent {{
          chain input {{
            type filter hook input priority 0; policy accept;
            ip daddr {{ {", ".join(sorted(SILENT))} }} icmp type echo-request drop
          }}
        }}""")
    cfg = parse_config(targets_config(f"  icmp_socket: {mode}\n"))
    reg = Exposed()

    async def measure() -> tuple[int, str | None]:
        checks = [c for c in path.build(cfg) if isinstance(c, PathCheck)]
        reg.add(*checks)
        try:
            for _ in range(2):
                results = await asyncio.gather(*(c.run() for c in checks), return_exceptions=True)
                failed = {c.spec.host for c, r in zip(checks, results, strict=True) if r}
                assert failed == SILENT
            sockets = {id(c._socket) for c in checks}
            return len(sockets), checks[0].icmp.mode
        finally:
            for c in checks:
                await c.close()
            assert checks[0].icmp._socket is None  # closed with the last target

    assert in_netns(ns, lambda: asyncio.run(measure())) == (1, mode)
    by_target = {
        (name, dict(labels)["target"]): v
        for (name, labels), v in reg.samples().items()
        if "target" in dict(labels)
    }
    for i in range(1, TARGETS + 1):
        sent = by_target["llm_path_packets_sent_total", f"t{i}"]
        received = by_target["llm_path_packets_received_total", f"t{i}"]
        assert sent == 2 * BURST, i
        # Exactly the truth: every echo of an answering address is answered, none of a
        # silent one (a reply credited to the wrong target would break one or the other).
        assert received == (0 if f"127.0.1.{i}" in SILENT else 2 * BURST), i
        if received:
            assert 0 < by_target["llm_path_rtt_seconds_sum", f"t{i}"] / received < 0.05, i


def test_tcp_connects_are_capped(lab: Lab) -> None:
    """Black-holed TCP targets hold their connects for the whole timeout; beyond the cap a
    probe is skipped as busy, never sent nor lost."""
    ns = lab.netns("c")
    lab.nft(ns, "table inet hole {\n chain input {\n type filter hook input priority 0;\n"
                " tcp dport 9 drop\n }\n}\n")
    rows = "\n".join(
        f"      - {{name: t{i}, host: 127.0.2.{i}, region: lo, protocol: tcp, port: 9}}"
        for i in range(1, 11)
    )
    cfg = parse_config(
        "paths:\n  interval: 5s\n  burst: 5\n  spacing: 10ms\n  timeout: 500ms\n"
        f"  max_tcp_connects: 20\n  carriers:\n    lab:\n{rows}\n"
    )
    reg = Exposed()

    async def measure() -> int:
        checks = [c for c in path.build(cfg) if isinstance(c, PathCheck)]
        reg.add(*checks)
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, checks[0].tcp.in_flight)
                await asyncio.sleep(0.005)

        watcher = asyncio.ensure_future(watch())
        await asyncio.gather(*(c.run() for c in checks), return_exceptions=True)
        watcher.cancel()
        return peak

    assert in_netns(ns, lambda: asyncio.run(measure())) == 20
    total = {"sent": 0.0, "busy": 0.0}
    for i in range(1, 11):
        labels = {"carrier": "lab", "target": f"t{i}", "region": "lo", "protocol": "tcp"}
        total["sent"] += published_value(reg.checks, "llm_path_packets_sent_total", **labels)
        total["busy"] += published_value(reg.checks, "llm_path_errors_total", **labels, reason="busy")
    assert total == {"sent": 20, "busy": 30}


def test_traceroute_rounds_parallel_and_late(
    lab: Lab, caplog: pytest.LogCaptureFixture
) -> None:
    """Silent targets (their UDP dropped) cost a full wait per wave: with one worker a round
    of 6 cannot finish in its interval, which is counted and said; with 6 workers it can.
    The interval is 4 times a trace (a loaded CI machine slows threads) and 2/3 of 6."""
    ns = lab.netns("c")
    lab.nft(ns, "table inet quiet {\n chain input {\n type filter hook input priority 0;\n"
                " udp dport 33434-33600 drop\n }\n}\n")
    cfg = parse_config(targets_config(n=6).replace("timeout: 1s", "timeout: 100ms"))
    assert cfg.paths is not None
    paths = cfg.paths

    def round_of(parallelism: int) -> Exposed:
        reg = Exposed()

        async def one_round() -> None:
            # Each trace: 4 waves of 100 ms (nothing answers) + a 50 ms gap.
            tracer = Tracer(parallelism, route_interval=1.8, gap=0.05)
            checks = [
                RouteCheck("lab", t, 1.8, paths.timeout, load_table(), tracer)
                for t in paths.carriers["lab"]
            ]
            reg.add(*checks)
            await asyncio.gather(*(c.run() for c in checks), return_exceptions=True)
            await asyncio.sleep(0.1)
            tracer.close()

        in_netns(ns, lambda: asyncio.run(one_round()))
        return reg

    with caplog.at_level(logging.INFO, logger="exporter.route"):
        serial = round_of(1)  # 6 x 0.45 s: late at 1.8 s, done at ~2.7 s
    assert published_value(serial.checks, "llm_path_route_rounds_late_total") == 1
    assert published_value(serial.checks, "llm_path_route_round_duration_seconds") > 2.4
    [late] = [r for r in caplog.records if r.getMessage().startswith("traceroute round not")]
    assert late.levelno == logging.WARNING
    assert late.targets == 6 and late.route_parallelism == 1  # type: ignore[attr-defined]
    assert "raise paths.route_parallelism to" in late.hint  # type: ignore[attr-defined]

    parallel = round_of(6)
    assert published_value(parallel.checks, "llm_path_route_rounds_late_total") == 0
    assert published_value(parallel.checks, "llm_path_route_round_duration_seconds") < 1.8
