"""Path and route check pieces without a lab: CIDR classes, jitter math, loss accounting of
the burst engine, TCP probes and re-resolution on loopback, and the paths config files."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from exporter.checks.path import check as path
from exporter.checks.path.check import PathCheck, PathError, run_burst
from exporter.checks.path.icmp import IcmpAccess
from exporter.checks.path.jitter import mean_abs_diff, rfc3550, rtt_diffs
from exporter.checks.path.routes import OTHER, UNKNOWN, RouteTableError, load_table
from exporter.config.load import load_config, parse_config
from exporter.config.yamlfile import ConfigError
from tests.support.procs import free_port
from tests.support.samples import Exposed, find, published

ROOT = Path(__file__).resolve().parent.parent

# --- route classes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hops", "expected"),
    [
        (["10.0.0.1", "59.43.182.1", "202.97.12.5"], "cn2_gt"),
        (["59.43.0.1", "203.0.113.9"], "cn2_gia"),
        (["202.97.80.9"], "chinanet_163"),
        (["202.97.80.9", "219.158.3.1"], "cu_4837"),  # 163 interconnect onto Unicom 169
        (["218.105.2.1"], "cu_9929"),
        (["210.51.7.1"], "cu_9929"),
        (["223.120.19.7"], "cmin2"),
        (["223.120.16.1", "223.120.17.200"], "cmin2"),
        (["223.120.131.4"], "cmin2"),
        # A string prefix '223.120.19' would call these CMIN2; the CIDRs say CMI.
        (["223.120.190.7"], "cmi"),
        (["223.120.160.1"], "cmi"),
        (["223.118.5.5", "221.183.9.9"], "cmi"),
        (["221.183.9.9"], "cmnet"),
        (["69.194.1.1", "59.43.1.1"], "ctgnet"),
        (["203.22.7.1"], "ctgnet"),
        (["203.220.7.1"], OTHER),  # not 203.22/16
        (["59.430.1.1", "8.8.8.8"], OTHER),  # not an address, and one outside every table
        ([], UNKNOWN),
    ],
)
def test_cidr_classes(hops: list[str], expected: str) -> None:
    assert load_table().classify(hops) == expected


def test_every_builtin_class_is_reachable() -> None:
    table = load_table()
    first = {net: str(cidrs[0].network_address + 1) for net, cidrs in table.networks.items()}
    got = {table.classify(first[n] for n in rule.networks) for rule in table.rules}
    assert got == set(table.classes) - {OTHER, UNKNOWN}
    assert set(table.classes) >= {
        "cn2_gia",
        "cn2_gt",
        "chinanet_163",
        "cu_9929",
        "cu_4837",
        "cmin2",
        "cmi",
        "cmnet",
        "ctgnet",
        "other",
        "unknown",
    }


def test_user_table_extends_or_replaces(tmp_path: Path) -> None:
    own = tmp_path / "routes.yaml"
    own.write_text(
        "networks:\n  lab_ix: [198.18.0.0/15]\n  cn2: [59.43.0.0/17]\n"
        "classes:\n  - {class: lab_exchange, all: [lab_ix]}\n"
    )
    table = load_table(str(own))
    assert table.classify(["198.19.1.1", "59.43.1.1"]) == "lab_exchange"  # tried first
    assert table.classify(["59.43.1.1"]) == "cn2_gia"
    assert table.classify(["59.43.200.1"]) == OTHER  # cn2 narrowed by the user's file
    assert table.classify(["202.97.1.1"]) == "chinanet_163"  # built-in rules stay
    own.write_text("replace: true\n" + own.read_text())
    table = load_table(str(own))
    assert table.classes == ["lab_exchange", OTHER, UNKNOWN]
    assert table.classify(["202.97.1.1"]) == OTHER


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("networks:\n  x: [59.43.0.0/33]\n", "networks.x[0] (line 2): bad CIDR '59.43.0.0/33'"),
        ("networks:\n  x: [59.43.1.0/16]\n", "networks.x[0] (line 2): bad CIDR"),  # host bits set
        (
            "classes:\n  - {class: x, all: [nope]}\n",
            "classes[0].all (line 2): unknown network 'nope'",
        ),
        (
            "classes:\n  - {class: other, all: [cn2]}\n",
            "classes[0].class (line 2): expected a lower_snake_case",
        ),
        ("netwerks: {}\n", "netwerks (line 1): unknown key 'netwerks'"),
    ],
)
def test_table_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    own = tmp_path / "routes.yaml"
    own.write_text(text)
    with pytest.raises(RouteTableError) as info:
        load_table(str(own))
    assert str(info.value).startswith(f"{own}: {message}")


# --- jitter ------------------------------------------------------------------------------


def test_diffs_follow_send_order_and_skip_lost() -> None:
    rtts = [0.100, None, 0.130, 0.110, None, None, 0.150]
    assert rtt_diffs(rtts) == pytest.approx([0.030, 0.020, 0.040])
    assert mean_abs_diff(rtts) == pytest.approx(0.030)
    assert mean_abs_diff([0.1, None]) is None and rtt_diffs([]) == []


def test_rfc3550_estimator() -> None:
    # Seeded by the first |D|, then J += (|D| - J) / 16, carried from call to call.
    j = rfc3550(None, [0.016])
    assert j == pytest.approx(0.016)
    j = rfc3550(j, [0.032])
    assert j == pytest.approx(0.016 + (0.032 - 0.016) / 16)
    assert rfc3550(None, []) is None and rfc3550(0.5, []) == 0.5
    # Uniform(+-a) delays: |D| of two iid draws has mean 2a/3, the estimator's fixed point.
    rng = random.Random(7)
    a = 0.025
    rtts = [0.2 + rng.uniform(-a, a) for _ in range(20000)]
    samples: list[float] = []
    j = None
    for burst in range(0, len(rtts), 20):
        j = rfc3550(j, rtt_diffs(rtts[burst : burst + 20]))
        assert j is not None  # a burst of 20 has diffs
        samples.append(j)
    assert statistics.fmean(samples) == pytest.approx(2 * a / 3, rel=0.03)


# --- the burst engine --------------------------------------------------------------------


class FakePath:
    """Answers probe i after delays[i] seconds (None: never), or fails it with an error."""

    def __init__(self, delays: list[float | None], errors: dict[int, OSError] | None = None):
        self.delays, self.errors = delays, errors or {}
        self.sent_at: list[float] = []

    def send(self) -> asyncio.Future[float]:
        loop = asyncio.get_running_loop()
        i = len(self.sent_at)
        self.sent_at.append(loop.time())
        fut: asyncio.Future[float] = loop.create_future()
        if i in self.errors:
            fut.set_exception(self.errors[i])
        elif (delay := self.delays[i]) is not None:

            def settle() -> None:
                if not fut.done():
                    fut.set_result(delay)

            loop.call_later(delay, settle)
        return fut


async def test_burst_is_pipelined_and_counts_only_settled_packets() -> None:
    loop = asyncio.get_running_loop()
    delays: list[float | None] = [0.3] * 10
    delays[4] = None  # lost
    delays[7] = 0.45  # answered after its deadline: lost too
    fake = FakePath(delays)
    log: list[tuple[float, int, float | None]] = []
    start = loop.time()
    task = asyncio.ensure_future(
        run_burst(fake.send, 10, 0.02, 0.4, lambda i, rtt, _: log.append((loop.time(), i, rtt)))
    )
    await asyncio.sleep(0.25)
    # Every echo is out (sent on schedule, replies notwithstanding) and none has settled:
    # in-flight packets are neither sent nor lost in the counters' eyes.
    assert len(fake.sent_at) == 10 and log == []
    rtts = await task
    elapsed = loop.time() - start
    # Stop-and-wait would need ~10 x 0.3 s; pipelined it is the last send plus one timeout.
    assert elapsed < 9 * 0.02 + 0.4 + 0.1
    # On a schedule anchored at the first send, so late wake-ups do not accumulate.
    assert [t - fake.sent_at[0] for t in fake.sent_at] == pytest.approx(
        [i * 0.02 for i in range(10)], abs=0.01
    )
    assert rtts[4] is None and rtts[7] is None
    assert [r for r in rtts if r is not None] == pytest.approx([0.3] * 8)
    assert sorted(i for _, i, _ in log) == list(range(10))
    for at, i, rtt in log:
        if rtt is None:  # lost only once its own deadline had passed
            assert at - fake.sent_at[i] >= 0.4 - 0.005


async def test_send_errors_are_lost_with_a_reason() -> None:
    fake = FakePath(
        [0.01] * 4,
        {
            1: OSError(errno.ENETUNREACH, "unreachable"),
            2: ConnectionRefusedError(),  # without a measured reset: nothing to count as RTT
            3: OSError(errno.EMSGSIZE, "x"),
        },
    )
    seen: list[tuple[int, float | None, str | None]] = []
    rtts = await run_burst(fake.send, 4, 0.001, 0.2, lambda *a: seen.append(a))
    assert rtts[0] == pytest.approx(0.01) and rtts[1:] == [None, None, None]
    assert sorted(seen)[1:] == [(1, None, "unreachable"), (2, None, "refused"), (3, None, "send")]


async def test_cancelled_burst_counts_nothing_unsettled() -> None:
    fake = FakePath([0.01, None, None])
    seen: list[int] = []
    task = asyncio.ensure_future(run_burst(fake.send, 3, 0.001, 5.0, lambda i, *_: seen.append(i)))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.01)
    assert seen == [0]


# --- the check on loopback (TCP needs no privilege) ----------------------------------------


@pytest.fixture
def listeners() -> Iterator[Callable[[str], int]]:
    """TCP listeners on loopback addresses, sharing one port; closed afterwards."""
    socks: list[socket.socket] = []
    port = 0

    def listen(addr: str) -> int:
        nonlocal port
        s = socket.create_server((addr, port), backlog=128)
        port = cast(int, s.getsockname()[1])  # the socket module types its address as Any
        socks.append(s)
        return port

    yield listen
    for s in socks:
        s.close()


def tcp_check(port: int, resolve: path.Resolver | None = None) -> tuple[PathCheck, Exposed]:
    cfg = parse_config(
        "paths:\n  burst: 5\n  spacing: 5ms\n  timeout: 500ms\n  carriers:\n"
        f"    lab: [{{name: web, host: lab.invalid, region: here, protocol: tcp, port: {port}}}]\n"
    )
    assert cfg.paths is not None
    check = PathCheck(
        "lab",
        cfg.paths.carriers["lab"][0],
        cfg.paths,
        IcmpAccess(),
        resolve=resolve or (lambda _h: asyncio.sleep(0, "127.0.0.1")),
    )
    return check, Exposed(check)


LABELS = {"carrier": "lab", "target": "web", "region": "here", "protocol": "tcp"}


async def test_tcp_connect_and_refused(listeners: Callable[[str], int]) -> None:
    port = listeners("127.0.0.1")
    check, reg = tcp_check(port)
    await check.run()
    assert reg.get_sample_value("llm_path_packets_received_total", LABELS) == 5
    assert reg.get_sample_value("llm_path_loss_ratio", LABELS) == 0
    assert reg.get_sample_value("llm_path_last_success_timestamp_seconds", LABELS) == pytest.approx(
        time.time(), abs=5
    )

    # A closed port answers with a reset: reachable, no loss, the reason counted.
    closed_check, reg2 = tcp_check(free_port())
    await closed_check.run()
    assert reg2.get_sample_value("llm_path_packets_sent_total", LABELS) == 5
    assert reg2.get_sample_value("llm_path_packets_received_total", LABELS) == 5
    assert reg2.get_sample_value("llm_path_errors_total", {**LABELS, "reason": "refused"}) == 5
    assert reg2.get_sample_value("llm_path_loss_ratio", LABELS) == 0
    assert reg2.get_sample_value("llm_path_rtt_seconds_count", LABELS) == 5


async def test_host_is_re_resolved_every_run(
    listeners: Callable[[str], int], caplog: pytest.LogCaptureFixture
) -> None:
    port = listeners("127.0.0.1")
    listeners("127.0.0.2")
    answers = iter(["127.0.0.1", "127.0.0.1", "127.0.0.2"])

    async def resolve(host: str) -> str:
        assert host == "lab.invalid"
        return next(answers)

    check, reg = tcp_check(port, resolve)
    with caplog.at_level(logging.INFO, logger="exporter.path"):
        for _ in range(3):
            await check.run()
    moved = [r for r in caplog.records if r.getMessage() == "path target address changed"]
    assert [(r.old, r.new) for r in moved] == [("127.0.0.1", "127.0.0.2")]  # type: ignore[attr-defined]
    assert reg.get_sample_value("llm_path_packets_received_total", LABELS) == 15


async def test_resolve_failure_is_counted() -> None:
    async def resolve(host: str) -> str:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    check, reg = tcp_check(1, resolve)
    with pytest.raises(PathError, match=r"cannot resolve lab\.invalid"):
        await check.run()
    assert reg.get_sample_value("llm_path_errors_total", {**LABELS, "reason": "resolve"}) == 1
    assert reg.get_sample_value("llm_path_packets_sent_total", LABELS) == 0


def test_no_icmp_socket_means_permission_with_both_fixes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def denied(*_: object) -> socket.socket:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(socket, "socket", denied)  # the module IcmpAccess opens sockets from
    access = IcmpAccess()
    with caplog.at_level(logging.INFO, logger="exporter.path"):
        assert access.mode is None and access.mode is None
    [record] = caplog.records  # once, not once per target or burst
    assert "setcap cap_net_raw+ep" in record.getMessage()
    assert "net.ipv4.ping_group_range" in record.getMessage()


# --- config: the paths files -------------------------------------------------------------


def test_carrier_presets_include(tmp_path: Path) -> None:
    cfg_file = tmp_path / "config.yaml"
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "cn.yaml").write_text(
        (ROOT / "deploy" / "carriers-cn.yaml").read_text()
    )
    cfg_file.write_text(
        "paths:\n  include: presets/cn.yaml\n  carriers:\n"
        "    telecom: [{name: lab, host: 127.0.0.1, region: here}]\n    lab: [{name: x, host: 127.0.0.1, region: here}]\n"
    )
    cfg = load_config(cfg_file)  # relative to the config's folder, not the working directory
    assert cfg.paths is not None
    names = {c: [t.name for t in ts] for c, ts in cfg.paths.carriers.items()}
    assert names["telecom"] == ["lab", "bj-ct", "sh-ct", "gz-ct", "cd-ct"]
    assert names["unicom"] == ["bj-cu", "sh-cu", "gz-cu", "cd-cu"]
    assert names["mobile"] == ["bj-cm", "sh-cm", "gz-cm", "cd-cm"]
    assert names["lab"] == ["x"]
    assert {t.region for ts in cfg.paths.carriers.values() for t in ts} >= {
        "beijing",
        "shanghai",
        "guangzhou",
        "chengdu",
    }


@pytest.mark.parametrize(
    ("included", "main_extra", "message"),
    [
        (
            "carriers:\n  telecom:\n    - {name: a, host: h}\n",
            "",
            "{inc}: carriers.telecom[0].region (line 3): required key is missing (included by {cfg} line 2)",
        ),
        (
            "carriers:\n  telecom:\n    - {name: a, host: h, region: r}\n    - {name: dup, host: h, region: r}\n",
            "  carriers:\n    telecom: [{name: dup, host: h, region: r}]\n",
            "{inc}: carriers.telecom[1] (line 4): target name 'dup' is also in paths.carriers.telecom (included by {cfg} line 2)",
        ),
        ("carriers: [\n", "", "{inc} (line 2, column 1): invalid YAML"),
    ],
)
def test_include_errors_name_file_and_line(
    tmp_path: Path, included: str, main_extra: str, message: str
) -> None:
    inc, cfg_file = tmp_path / "inc.yaml", tmp_path / "config.yaml"
    inc.write_text(included)
    cfg_file.write_text(f"paths:\n  include: inc.yaml\n{main_extra}")
    with pytest.raises(ConfigError) as info:
        load_config(cfg_file)
    assert any(m.startswith(message.format(inc=inc, cfg=cfg_file)) for m in info.value.messages), (
        info.value.messages
    )


def test_missing_include_names_the_config_line(tmp_path: Path) -> None:
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text("paths:\n  interval: 30s\n  include: nope.yaml\n")
    with pytest.raises(ConfigError) as info:
        load_config(cfg_file)
    assert info.value.messages == [
        f"{cfg_file}: paths.include (line 3): cannot read {tmp_path / 'nope.yaml'}: No such file or directory"
    ]


def test_route_table_key_is_validated(tmp_path: Path) -> None:
    (tmp_path / "routes.yaml").write_text("networks:\n  x: [1.2.3.0/40]\n")
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(
        "paths:\n  route_table: routes.yaml\n  carriers: {a: [{name: b, host: h, region: r}]}\n"
    )
    # The config itself is valid; the path check reads the table it names when it is built
    # (check-config and run both build the checks), and names both files and lines.
    config = load_config(cfg_file)
    with pytest.raises(ConfigError) as info:
        path.build(config)
    [msg] = info.value.messages
    assert msg.startswith(
        f"{cfg_file}: paths.route_table (line 2): {tmp_path / 'routes.yaml'}: networks.x[0] (line 2): bad CIDR"
    )
    checked = subprocess.run([sys.executable, "-m", "exporter", "check-config", str(cfg_file)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 2, checked.stderr
    assert checked.stderr.startswith(f"error: {msg}") and "Traceback" not in checked.stderr


def test_burst_must_fit_the_interval() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            "paths:\n  interval: 4s\n  carriers: {a: [{name: b, host: h, region: r}]}\n", "cfg.yaml"
        )
    assert info.value.messages == [
        "cfg.yaml: paths (line 1): a burst takes up to 5.8s ((burst - 1) x spacing + timeout),"
        " which must be less than interval 4s"
    ]


def test_lab_skips_without_root_except_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support import netlab

    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the os module netlab asks
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        netlab.require_lab()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and the network lab cannot run"):
        netlab.require_lab()


def test_rtt_buckets_are_configurable_and_checked() -> None:
    cfg = parse_config(
        "paths:\n  rtt_buckets: [10ms, 100ms, 1s]\n"
        "  carriers: {a: [{name: b, host: 127.0.0.1, region: r}]}\n"
    )
    assert cfg.paths is not None and cfg.paths.rtt_buckets == [0.01, 0.1, 1.0]
    bounds = {labels["le"] for labels, _ in find(published(path.build(cfg)),
                                                  "llm_path_rtt_seconds_bucket")}
    assert bounds == {"0.01", "0.1", "1.0", "+Inf"}
    with pytest.raises(ConfigError, match="bucket bounds must be positive and increasing"):
        parse_config(
            "paths:\n  rtt_buckets: [100ms, 10ms]\n"
            "  carriers: {a: [{name: b, host: h, region: r}]}\n"
        )


async def test_tcp_slots_skip_beyond_the_cap(listeners: Callable[[str], int]) -> None:
    port = listeners("127.0.0.1")
    slots = path.TcpSlots(1)
    first, second = slots.send("127.0.0.1", port), slots.send("127.0.0.1", port)
    with pytest.raises(path.Busy):
        await second
    assert await first > 0 and slots.in_flight == 0
    assert await slots.send("127.0.0.1", port) > 0  # the slot is free again
