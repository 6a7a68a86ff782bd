"""The probe's TCP_INFO over a real lossy link: a probe in one network namespace streams
from the simulator in another, first clean, then with nftables dropping a share of the TCP
packets of the simulator's port as they arrive, at both ends. The kernel's own
retransmissions and out-of-order arrivals are what the probe's segment counters must show;
the clean link shows none, nor does one that drops only SYNs (the setup's time). (A namespace of its own: the port is fixed, nothing else binds
there.)"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from exporter.checks.probe.check import ProbeCheck, ProbeFailed
from tests.support.netlab import Lab, in_netns
from tests.support.procs import exporter_cmd, http_get, wait_until
from tests.support.simulator import simulate_args
from tests.support.split import make_probe, value

PORT = 18000
SERVER = "198.18.40.2"
RUNS = 12
DROP_PERCENT = 10


def segments(check: ProbeCheck, kind: str) -> float:
    return value(check, "llm_probe_tcp_segments_total", segments=kind)


def probe_runs(client: str, url: str) -> ProbeCheck:
    """RUNS probe requests from inside ``client``; the check, with what it published."""
    check = make_probe(url, "simulated-model", max_tokens=32,
                       timeouts={"connect": "5s", "first_token": "10s", "total": "20s"})

    async def runs() -> None:
        try:
            for _ in range(RUNS):
                # A failed run (a lost SYN, a timeout) is the link's doing, and still has
                # its TCP_INFO: the counters are what this test reads.
                with contextlib.suppress(ProbeFailed):
                    await check.run()
        finally:
            await check.close()

    in_netns(client, lambda: asyncio.run(runs()))
    return check


@pytest.mark.timeout(180)
def test_a_lossy_link_shows_in_the_probes_segments(lab: Lab, tmp_path: Path) -> None:
    client, server = lab.netns("c"), lab.netns("s")
    lab.link(client, "198.18.40.1", server, SERVER)
    log = (tmp_path / "sim.log").open("wb")
    lab.spawn(server, exporter_cmd(*simulate_args(
        PORT, "--host", SERVER, "--enable-per-request-metrics", fast=True, output_len=64)),
        stdout=log, stderr=log)
    url = f"http://{SERVER}:{PORT}/v1/chat/completions"
    wait_until(lambda: in_netns(client, lambda: http_get(f"http://{SERVER}:{PORT}/health",
                                                         timeout=1)[0]) == 200,
               timeout=30, what="the simulator in its namespace")

    clean = probe_runs(client, url)
    assert value(clean, "llm_probe_requests_total", outcome="ok") == RUNS
    assert segments(clean, "received") >= RUNS * 10  # a segment per token, roughly
    assert segments(clean, "retransmitted") == 0 and segments(clean, "out_of_order") == 0
    # A veth in one host: the kernel's RTT is well under a millisecond at its floor.
    assert 0 < value(clean, "llm_probe_tcp_min_rtt_seconds_sum") / RUNS < 0.005

    # The first SYN of each connection dropped: it opens a second late (the kernel's retry),
    # timed in its setup phase, and the stream, measured from its handshake, lost nothing.
    lab.syn_drops(server, PORT, 1)
    late = probe_runs(client, url)
    assert lab.nft_counters(server) >= 1
    lab.syn_drops(server, PORT, 0)
    new = {"phase": "connect", "connection": "new"}
    opened = value(late, "llm_probe_phase_seconds_count", **new)
    assert opened >= 1 and value(late, "llm_probe_phase_seconds_sum", **new) / opened >= 0.9
    assert value(late, "llm_probe_requests_total", outcome="ok") == RUNS
    assert segments(late, "retransmitted") == 0, published_segments(late)

    # Each end drops a share of what arrives for it: a loss the sender must repair. (A
    # drop on the output hook is no loss: the sender's own stack sees the send fail and
    # sends again, without a retransmission or a gap at the receiver.)
    for ns, match in ((server, f"tcp dport {PORT}"), (client, f"tcp sport {PORT}")):
        lab.nft(ns, f"""
            table inet lossy {{
              chain input {{
                type filter hook input priority 0; policy accept;
                {match} numgen random mod 100 < {DROP_PERCENT} counter drop
              }}
            }}""")
    lossy = probe_runs(client, url)
    dropped = lab.nft_counters(server) + lab.nft_counters(client)
    assert dropped > 0
    print(f"{DROP_PERCENT}% dropped at each end ({dropped} packets):",
          published_segments(lossy))
    lost = segments(lossy, "retransmitted") + segments(lossy, "out_of_order")
    assert lost > 0, (dropped, published_segments(lossy))
    # Out-of-order arrivals are the stream's losses as the client sees them: well over the
    # 2% loss line with a tenth of the packets dropped.
    received = segments(lossy, "received")
    assert received > 0 and segments(lossy, "out_of_order") / received > 0.02, \
        published_segments(lossy)


def published_segments(check: ProbeCheck) -> dict[str, float]:
    return {k: segments(check, k) for k in ("sent", "retransmitted", "received",
                                           "out_of_order")}
