"""The clients check against real loopback TCP connections (IPv4 and IPv6), read through the
kernel's sock_diag and held to the kernel's own TCP_INFO of the same sockets; its CIDR files
(longest prefix, errors, reload); its config errors; and the delegation-file builder."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest

from exporter import metrics
from exporter.checks.base import Check
from exporter.checks.clients import check as clients
from exporter.checks.clients import diag
from exporter.checks.clients.check import ClientsCheck
from exporter.checks.clients.cidrs import CidrError, load_carriers
from exporter.checks.clients.delegation import blocks, select
from exporter.config.load import load_config, parse_config
from exporter.config.yamlfile import ConfigError
from exporter.runtime.app import App
from tests.support import ROOT
from tests.support.procs import free_port
from tests.support.samples import find, published, value

# The oracle: TCP_INFO read with getsockopt on the server's own sockets (offsets from
# include/uapi/linux/tcp.h, independent of exporter/checks/clients/diag.py).
TCP_INFO = struct.Struct("=68xI28xI52xI")  # tcpi_rtt, tcpi_total_retrans, tcpi_data_segs_out


def tcp_info(sock: socket.socket) -> tuple[float, int, int]:
    rtt, retrans, segs = TCP_INFO.unpack_from(sock.getsockopt(socket.IPPROTO_TCP,
                                                              socket.TCP_INFO, 232))
    return rtt / 1e6, retrans, segs


class Server:
    """A listening socket on a free loopback port and the connections it accepted."""

    def __init__(self, family: socket.AddressFamily, host: str, stack: ExitStack) -> None:
        self.host, self.family, self.stack = host, family, stack
        self.listener = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
        self.listener.bind((host, free_port()))
        self.listener.listen(64)
        self.port: int = self.listener.getsockname()[1]
        self.pairs: list[tuple[socket.socket, socket.socket]] = []  # (client, accepted)

    def connect(self, n: int, host: str | None = None) -> list[tuple[socket.socket, socket.socket]]:
        new = []
        for _ in range(n):
            client = self.stack.enter_context(socket.create_connection((host or self.host,
                                                                        self.port)))
            accepted = self.stack.enter_context(self.listener.accept()[0])
            new.append((client, accepted))
        self.pairs += new
        return new

    def stream(self, nbytes: int, pairs: list[tuple[socket.socket, socket.socket]] | None = None
               ) -> None:
        """Each accepted socket sends ``nbytes``; each client reads them all."""
        for client, accepted in pairs or self.pairs:
            accepted.sendall(b"x" * nbytes)
            got = 0
            while got < nbytes:
                got += len(client.recv(1 << 20))


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def write(path: Path, *lines: str) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def config_for(tmp_path: Path, ports: list[int], files: dict[str, list[str]],
               extra: str = "") -> Path:
    for name, lines in files.items():
        write(tmp_path / f"{name}.txt", *lines)
    carriers = "".join(f"    {name}: {name}.txt\n" for name in files)
    cfg = tmp_path / "cfg.yaml"
    # The host check off: the tests read the one clients check.
    cfg.write_text(f"host: {{enabled: false}}\nclients:\n  interval: 5s\n  ports: {ports}\n"
                   f"{extra}  carriers:\n{carriers}")
    return cfg


def the_check(cfg: Path) -> ClientsCheck:
    (check,) = clients.build(load_config(cfg))
    assert isinstance(check, ClientsCheck)
    return check


def sample(check: Check, name: str, **labels: str) -> float:
    found = value(published(check), name, **labels)
    assert found is not None, f"{name}{labels} is absent"
    return found


@pytest.mark.parametrize(("family", "host", "cidr"),
                         [(socket.AF_INET, "127.0.0.1", "127.0.0.0/8"),
                          (socket.AF_INET6, "::1", "::1/128")])
async def test_counts_rtt_and_segments_match_the_kernels_tcp_info(
        tmp_path: Path, stack: ExitStack, family: socket.AddressFamily, host: str,
        cidr: str) -> None:
    server = Server(family, host, stack)
    server.connect(5)
    check = the_check(config_for(tmp_path, [server.port], {"telecom": [cidr],
                                                            "unicom": ["192.0.2.0/24"]}))
    port = str(server.port)
    await check.run()  # takes stock: counted as established, not as opened or as segments
    assert sample(check, "llm_clients_connections", carrier="telecom", port=port) == 5
    assert sample(check, "llm_clients_connections_opened_total", carrier="telecom") == 0
    assert sample(check, "llm_clients_segments_sent_total", carrier="telecom") == 0
    before = [tcp_info(accepted) for _, accepted in server.pairs]

    server.stream(1_000_000)
    await check.run()
    after = [tcp_info(accepted) for _, accepted in server.pairs]
    sent = sum(a[2] - b[2] for a, b in zip(after, before, strict=True))
    retrans = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
    assert sent >= 5 * 15  # 1 MB in loopback-sized segments (64 KiB MSS) per connection
    assert sample(check, "llm_clients_segments_sent_total", carrier="telecom", port=port) == sent
    assert sample(check, "llm_clients_segments_retransmitted_total", carrier="telecom",
                  port=port) == retrans
    # Each connection sent, so each gave one RTT observation: the kernel's srtt of it.
    assert sample(check, "llm_clients_rtt_seconds_count", carrier="telecom", port=port) == 5
    rtt_sum = sample(check, "llm_clients_rtt_seconds_sum", carrier="telecom", port=port)
    assert rtt_sum == pytest.approx(sum(a[0] for a in after), rel=0.5, abs=5e-4)
    rates = find(published(check), "llm_clients_delivery_rate_bytes_per_second_count",
                 carrier="telecom", port=port)
    assert sum(v for _, v in rates) == 5
    # Nothing elsewhere: the other carrier and "other" stay at zero.
    for carrier in ("unicom", metrics.CLIENTS_OTHER_CARRIER):
        assert sample(check, "llm_clients_connections", carrier=carrier) == 0
        assert sample(check, "llm_clients_segments_sent_total", carrier=carrier) == 0

    # Idle connections: still established, no new segments, no RTT observation.
    await check.run()
    assert sample(check, "llm_clients_segments_sent_total", carrier="telecom") == sent
    assert sample(check, "llm_clients_rtt_seconds_count", carrier="telecom") == 5


async def test_opened_closed_and_counters_never_go_back(tmp_path: Path, stack: ExitStack) -> None:
    server = Server(socket.AF_INET, "127.0.0.1", stack)
    server.connect(3)
    check = the_check(config_for(tmp_path, [server.port], {"telecom": ["127.0.0.0/8"]}))
    await check.run()
    (new,) = server.connect(1)
    server.stream(200_000, [new])
    await check.run()
    assert sample(check, "llm_clients_connections_opened_total", carrier="telecom") == 1
    # A new connection's segments since it opened are all counted: it opened after the run.
    assert sample(check, "llm_clients_segments_sent_total", carrier="telecom") == tcp_info(new[1])[2]
    assert check.tracked == 4
    sent = sample(check, "llm_clients_segments_sent_total", carrier="telecom")

    for client, accepted in server.pairs[:2]:
        accepted.sendall(b"y" * 100_000)  # sent after the last run, then the connection goes
        client.close()
        accepted.close()
    await check.run()
    assert sample(check, "llm_clients_connections_closed_total", carrier="telecom") == 2
    assert sample(check, "llm_clients_connections", carrier="telecom") == 2
    assert check.tracked == 2  # closed connections leave the map
    assert sample(check, "llm_clients_segments_sent_total", carrier="telecom") >= sent


async def test_only_watched_ports_and_v4_mapped_peers_are_ipv4(tmp_path: Path,
                                                               stack: ExitStack) -> None:
    dual = stack.enter_context(socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
    dual.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    dual.bind(("::", free_port()))
    dual.listen(8)
    port = dual.getsockname()[1]
    for host in ("127.0.0.1", "::1"):
        stack.enter_context(socket.create_connection((host, port)))
        stack.enter_context(dual.accept()[0])
    unwatched = Server(socket.AF_INET, "127.0.0.1", stack)
    unwatched.connect(2)
    check = the_check(config_for(tmp_path, [port], {"v4": ["127.0.0.0/8"], "v6": ["::1/128"]}))
    await check.run()
    # 127.0.0.1 arrives on the IPv6 socket as ::ffff:127.0.0.1 and is classified as IPv4.
    assert sample(check, "llm_clients_connections", carrier="v4", port=str(port)) == 1
    assert sample(check, "llm_clients_connections", carrier="v6", port=str(port)) == 1
    assert not find(published(check), "llm_clients_connections", port=str(unwatched.port))


async def test_series_count_does_not_grow_with_clients(tmp_path: Path, stack: ExitStack) -> None:
    server = Server(socket.AF_INET, "127.0.0.1", stack)
    check = the_check(config_for(tmp_path, [server.port, free_port()],
                                 {"telecom": ["127.0.0.0/8"], "unicom": ["192.0.2.0/24"]}))
    counts = []
    for more in (1, 40):
        server.stream(50_000, server.connect(more))
        await check.run()
        counts.append(len(published(check)))
    assert counts[0] == counts[1]
    assert sample(check, "llm_clients_connections", carrier="telecom", port=str(server.port)) == 41


async def test_a_dump_past_max_connections_is_cut_and_counted(tmp_path: Path,
                                                              stack: ExitStack) -> None:
    server = Server(socket.AF_INET, "127.0.0.1", stack)
    server.connect(6)
    check = the_check(config_for(tmp_path, [server.port], {"telecom": ["127.0.0.0/8"]},
                                 "  max_connections: 4\n"))
    await check.run()
    await check.run()
    assert sample(check, "llm_clients_connections", carrier="telecom") == 4
    assert sample(check, "llm_clients_truncated_runs_total") == 2
    assert sample(check, "llm_clients_connections_closed_total", carrier="telecom") == 0


def test_the_port_filter_is_bytecode_the_kernel_accepts() -> None:
    # A filter it refused would fail the dump (EINVAL); one that accepted everything would
    # return this test's own listener on an unwatched port.
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
        s.listen()
        client = socket.create_connection(s.getsockname())
        accepted = s.accept()[0]
        with client, accepted:
            ports = [1, 2, s.getsockname()[1], 65535]
            got = list(diag.established(ports, 2.0))
            assert [c.port for c in got] == [s.getsockname()[1]]
            assert list(diag.established([1], 2.0)) == []


# --- CIDR files and their reload -----------------------------------------------------------


def test_longest_prefix_wins_and_both_families_are_read(tmp_path: Path) -> None:
    carriers = load_carriers({
        "telecom": write(tmp_path / "t.txt", "# a comment", "", "10.0.0.0/8", "2001:db8::/32"),
        "unicom": write(tmp_path / "u.txt", "10.1.0.0/16  # more specific", "2001:db8:1::/48"),
    })
    assert carriers.prefixes == (2, 2)
    other = len(carriers.names)
    for addr, want in (("10.2.3.4", 0), ("10.1.2.3", 1), ("11.0.0.1", other),
                       ("2001:db8:2::1", 0), ("2001:db8:1::1", 1), ("2001:db9::1", other)):
        assert carriers.lookup(socket.inet_pton(
            socket.AF_INET6 if ":" in addr else socket.AF_INET, addr)) == want, addr


@pytest.mark.parametrize(("lines", "problem"), [
    (["10.0.0.0/8", "10.0.0.1/8"], "t.txt line 2: bad CIDR '10.0.0.1/8': 10.0.0.1/8 has host bits set"),
    (["banana"], "t.txt line 1: bad CIDR 'banana'"),
    (["# only comments"], "t.txt: no CIDR in the file"),
])
def test_a_bad_cidr_file_is_one_line_naming_config_and_file_lines(
        tmp_path: Path, lines: list[str], problem: str) -> None:
    write(tmp_path / "t.txt", *lines)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("clients:\n  ports: [8000]\n  carriers:\n    telecom: t.txt\n")
    with pytest.raises(ConfigError) as err:
        clients.build(load_config(cfg))
    (message,) = err.value.messages
    assert message.startswith(f"{cfg}: clients.carriers.telecom (line 4): ")
    assert problem in message


def test_a_prefix_in_two_files_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CidrError, match=r"u.txt: 10.0.0.0/8 is also in carrier 'telecom'"):
        load_carriers({"telecom": write(tmp_path / "t.txt", "10.0.0.0/8"),
                       "unicom": write(tmp_path / "u.txt", "10.0.0.0/8")})
    with pytest.raises(CidrError, match=r"cannot read .*nope.txt: No such file"):
        load_carriers({"telecom": str(tmp_path / "nope.txt")})


def test_every_missing_cidr_file_is_named_at_once(tmp_path: Path) -> None:
    # A config copied away from its files misses all of them: one run of check-config says so.
    write(tmp_path / "u.txt", "10.0.0.0/8")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("clients:\n  ports: [8000]\n  carriers:\n"
                   "    telecom: t.txt\n    unicom: u.txt\n    mobile: m.txt\n")
    with pytest.raises(ConfigError) as err:
        clients.build(load_config(cfg))
    assert err.value.messages == [
        f"{cfg}: clients.carriers.telecom (line 4): cannot read {tmp_path}/t.txt: "
        "No such file or directory",
        f"{cfg}: clients.carriers.mobile (line 6): cannot read {tmp_path}/m.txt: "
        "No such file or directory"]


async def test_sighup_rereads_the_cidr_files_and_a_bad_one_keeps_the_running_lists(
        tmp_path: Path, stack: ExitStack) -> None:
    server = Server(socket.AF_INET, "127.0.0.1", stack)
    server.connect(2)
    cfg = config_for(tmp_path, [server.port], {"telecom": ["127.0.0.0/8"],
                                               "unicom": ["192.0.2.0/24"]})
    app = App(load_config(cfg), str(cfg))

    async def carriers_now() -> dict[str, float]:
        (check,) = app.gen.scheduler.checks
        await app.gen.scheduler.run_once(check)
        return {c: sample(check, "llm_clients_connections", carrier=c)
                for c in ("telecom", "unicom", "other")}

    try:
        assert await carriers_now() == {"telecom": 2, "unicom": 0, "other": 0}
        write(tmp_path / "telecom.txt", "198.51.100.0/24")
        write(tmp_path / "unicom.txt", "192.0.2.0/24", "127.0.0.0/24")
        assert await app.reload()
        assert await carriers_now() == {"telecom": 0, "unicom": 2, "other": 0}
        (check,) = app.gen.scheduler.checks
        assert sample(check, "llm_clients_carrier_prefixes", carrier="unicom") == 2
        write(tmp_path / "unicom.txt", "127.0.0.0/33")
        assert not await app.reload(), "a bad CIDR file keeps the running generation"
        assert await carriers_now() == {"telecom": 0, "unicom": 2, "other": 0}
    finally:
        await app.shutdown()


# --- config -----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("clients:\n  ports: []\n  carriers: {telecom: t.txt}\n",
     "cfg.yaml: clients.ports (line 2): list should have at least 1 item"),
    ("clients:\n  ports: [8000, 70000]\n  carriers: {telecom: t.txt}\n",
     "cfg.yaml: clients.ports[1] (line 2): input should be less than or equal to 65535"),
    ("clients:\n  ports: [443, 443]\n  carriers: {telecom: t.txt}\n",
     "cfg.yaml: clients.ports (line 2): port 443 is listed twice"),
    ("clients:\n  ports: [443]\n  carriers: {other: t.txt}\n",
     "cfg.yaml: clients.carriers (line 3): 'other' is the carrier of unlisted addresses"),
    ("clients:\n  ports: [443]\n  carriers: {}\n",
     "cfg.yaml: clients.carriers (line 3): dictionary should have at least 1 item"),
    ("clients:\n  ports: [443]\n  interval: soon\n  carriers: {telecom: t.txt}\n",
     "cfg.yaml: clients.interval (line 3): expected a duration like 15s, got 'soon'"),
    ("clients:\n  ports: [443]\n  carriers: {telecom: t.txt}\n  max_connections: 0\n",
     "cfg.yaml: clients.max_connections (line 4): input should be greater than or equal to 1"),
    ("clients:\n  ports: [443]\n  carriers: {telecom: t.txt}\n  rtt_buckets: [1s, 100ms]\n",
     "cfg.yaml: clients.rtt_buckets (line 4): bucket bounds must be positive and increasing"),
    ("clients:\n  ports: [443]\n  carriers: {telecom: t.txt}\n  max_conections: 5\n",
     "cfg.yaml: clients.max_conections (line 4): unknown key 'max_conections' (did you mean"),
])
def test_bad_config_is_one_line_with_path_and_line(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "cfg.yaml")
    assert [m[: len(expected)] for m in err.value.messages] == [expected]


def test_check_config_exits_2_on_a_bad_cidr_file(tmp_path: Path) -> None:
    write(tmp_path / "t.txt", "300.1.2.0/24")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("clients:\n  ports: [8000]\n  carriers:\n    telecom: t.txt\n")
    proc = subprocess.run([sys.executable, "-m", "exporter", "check-config", str(cfg)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {cfg}: clients.carriers.telecom (line 4): {tmp_path / 't.txt'} line 1: bad CIDR"
        " '300.1.2.0/24': '300.1.2.0/24' does not appear to be an IPv4 or IPv6 network"]


def test_the_example_cidr_set_loads() -> None:
    carriers = load_carriers({n: str(ROOT / "deploy" / "clients" / f"{n}.txt")
                              for n in ("telecom", "unicom", "mobile")})
    # The carriers' own DNS resolvers of deploy/carriers-cn.yaml are in their lists.
    for addr, want in (("219.141.140.10", 0), ("202.106.195.68", 1), ("211.136.112.200", 2),
                       ("8.8.8.8", 3)):
        assert carriers.lookup(socket.inet_aton(addr)) == want


# --- building lists from a delegation file -----------------------------------------------

DELEGATION = """\
2|apnic|20261201|5|19830613|20261130|+1000
apnic|*|ipv4|*|3|summary
apnic|CN|asn|4134|1|20020101|allocated|A1
apnic|CN|ipv4|198.51.100.0|256|20020101|allocated|A1
apnic|CN|ipv4|203.0.113.0|192|20020101|allocated|A1
apnic|CN|ipv4|192.0.2.0|256|20020101|allocated|B2
apnic|JP|ipv4|100.64.0.0|1024|20020101|allocated|A1
apnic|CN|ipv6|2001:db8::|32|20020101|allocated|A1
apnic|CN|ipv4|233.252.0.0|256|20020101|reserved|
"""


def test_delegation_blocks_of_a_holder_become_a_cidr_file(tmp_path: Path) -> None:
    kept, holders = select(blocks(DELEGATION), "CN", [ipaddress.ip_address("198.51.100.7")])
    assert holders == {"A1": 3}
    nets = [str(n) for b in kept for n in b.networks]
    # 192 addresses from 203.0.113.0 are a /25 and a /26.
    assert nets == ["198.51.100.0/24", "203.0.113.0/25", "203.0.113.128/26", "2001:db8::/32"]
    src = write(tmp_path / "delegated", *DELEGATION.splitlines())
    proc = subprocess.run([sys.executable, "-m", "exporter.checks.clients.delegation", src,
                           "--cc", "CN", "--holder-of", "198.51.100.7"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "telecom.txt"
    out.write_text(proc.stdout)
    assert load_carriers({"telecom": str(out)}).prefixes == (4,)
    assert "# holder A1: 3 blocks" in proc.stderr
    bad = write(tmp_path / "bad", "apnic|CN|ipv4|198.51.100.0|many|20020101|allocated|A1")
    proc = subprocess.run([sys.executable, "-m", "exporter.checks.clients.delegation", bad],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (proc.returncode, proc.stderr.strip()) == (
        2, f"{bad}: line 1: invalid literal for int() with base 10: 'many'")


def test_the_event_loop_is_free_while_a_run_reads(tmp_path: Path, stack: ExitStack) -> None:
    """The dump runs on a worker thread: a loop timer keeps firing while a slow reader
    (the real dump, made slow) holds the run."""
    server = Server(socket.AF_INET, "127.0.0.1", stack)
    server.connect(2)
    config = load_config(config_for(tmp_path, [server.port], {"telecom": ["127.0.0.0/8"]}))
    assert config.clients is not None

    def slow(ports: Sequence[int], timeout: float) -> Iterator[diag.Connection]:
        for conn in diag.established(ports, timeout):
            time.sleep(0.2)
            yield conn

    check = ClientsCheck(config.clients, load_carriers(clients.carrier_files(config)), slow)

    async def main() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        await check.run()
        ticker.cancel()
        return ticks

    assert asyncio.run(main()) >= 20
