"""The protected listener: the web config file (exporter-toolkit's format), TLS, client
certificates, bcrypt basic auth, response headers; the connection cap, the header, idle and
response deadlines; and, end to end, a real Prometheus scraping over TLS with basic auth and
an exporter under a 1024 open-file limit holding 1100 idle connections."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import resource
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from exporter.cli import _flag_overrides, build_parser
from exporter.config.load import parse_config
from exporter.config.web import load_web_config
from exporter.config.yamlfile import ConfigError
from exporter.runtime import auth
from exporter.runtime.app import App
from exporter.runtime.listener import Gate, GatedSite, Limits, make_runner
from tests.support import ROOT
from tests.support.pki import Pki, bcrypt_hash, make_pki
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until
from tests.support.prometheus import Prometheus
from tests.support.samples import series, value

PASSWORD = "correct horse battery"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def write_web(folder: Path, pki: Pki, body: str) -> Path:
    """A web config beside copies of the certificates, named relative to it (as
    exporter-toolkit resolves them)."""
    for name in ("server.crt", "server.key", "ca.crt"):
        (folder / name).write_bytes(pki.path(name).read_bytes())
    path = folder / "web.yml"
    path.write_text(body)
    return path


def tls_web(pki: Pki, folder: Path, extra: str = "", users: bool = True) -> Path:
    text = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n" + extra
    if users:
        text += f"basic_auth_users:\n  prometheus: {bcrypt_hash(PASSWORD)}\n"
    return write_web(folder, pki, text)


def client_tls(pki: Pki, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert:
        ctx.load_cert_chain(pki.path(f"{cert}.crt"), pki.path(f"{cert}.key"))
    return ctx


# --- the file -------------------------------------------------------------------------------

BAD = [
    ("basic_auth_users: {alice: hunter2-plain}", r"basic_auth_users\.alice \(line 1\): not a bcrypt hash"),
    ("basic_auth_users: {alice: 12345}", r"basic_auth_users\.alice \(line 1\): not a bcrypt hash"),
    ("http_server_config: {headers: {X-Powered-By: me}}", r"header 'X-Powered-By' can not be configured"),
    ("http_server_config: {headers: {X-Frame-Options: allow}}", r"X-Frame-Options: expected one of deny, sameorigin"),
    ("tls_server_config: {cert_file: server.crt}", r"both cert_file and key_file are needed for TLS"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, cipher_suites: [TLS_AES_128_GCM_SHA256]}", r"cipher_suites names Go's TLS settings"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, client_auth_type: RequireAnyClientCert}", r"RequireAnyClientCert accepts any certificate"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, client_ca_file: ca.crt}", r"client_ca_file is set but client_auth_type NoClientCert never checks it"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, client_auth_type: RequireAndVerifyClientCert}", r"needs client_ca_file"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, min_version: TLS13, max_version: TLS12}", r"min_version TLS13 is above max_version TLS12"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, client_auth_type: Whatever}", r"client_auth_type \(line 1\): input should be 'NoClientCert'"),
    ("tls_server_config: {cert_file: missing.crt, key_file: server.key}", r"tls_server_config\.cert_file \(line 1\): .*missing\.crt: cannot read: No such file"),
    ("tls_server_config: {cert_file: server.crt, key_file: ca.crt}", r"tls_server_config\.key_file \(line 1\): .*ca\.crt: not a PEM private key matching cert_file"),
    ("tls_server_configs: {}", r"unknown key 'tls_server_configs' \(did you mean 'tls_server_config'\?\)"),
    ("auth_excluded_paths: [metrics]", r"'metrics' is not a path"),
    ("- just\n- a list", r"expected a mapping at the top level"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_a_bad_web_config_is_one_line_naming_where(
    pki: Pki, tmp_path: Path, text: str, message: str
) -> None:
    path = write_web(tmp_path, pki, text + "\n")
    with pytest.raises(ConfigError) as err:
        load_web_config(path)
    assert len(err.value.messages) == 1, err.value.messages
    assert err.value.messages[0].startswith(str(path)), err.value.messages
    assert re.search(message, err.value.messages[0]), err.value.messages
    assert "hunter2" not in err.value.messages[0]


def test_the_documented_web_config_loads(pki: Pki, tmp_path: Path) -> None:
    doc = (ROOT / "docs" / "security.md").read_text()
    example = re.search(r"```yaml\n(tls_server_config:.*?)```", doc, re.S)
    assert example, "docs/security.md has the web.yml example"
    web = load_web_config(write_web(tmp_path, pki, example.group(1)))
    assert web.tls is not None and web.tls.minimum_version == ssl.TLSVersion.TLSv1_2
    assert auth._checkpw("replace-me", web.config.basic_auth_users["prometheus"])
    assert web.config.auth_excluded_paths == ["/-/healthy", "/-/ready"]


def test_a_fifo_web_config_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "web.yml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_web_config(fifo)


@pytest.mark.parametrize("command", ["run", "check-config"])
def test_a_bad_web_config_exits_2_with_one_line(pki: Pki, tmp_path: Path, command: str) -> None:
    web_path = write_web(tmp_path, pki, "tls_server_config: {cert_file: server.crt}\n")
    config = tmp_path / "config.yaml"
    config.write_text(f"server: {{listen_address: '127.0.0.1:{free_port()}'}}\n")
    where = ["--config", str(config)] if command == "run" else [str(config)]
    result = subprocess.run(
        exporter_cmd(command, *where, "--allow-empty", "--web.config.file", str(web_path)),
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert "both cert_file and key_file are needed for TLS" in result.stderr


def test_check_config_summarizes_the_web_config(pki: Pki, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("server: {listen_address: '127.0.0.1:9400'}\n")
    result = subprocess.run(
        exporter_cmd("check-config", str(config), "--allow-empty", "--web.config.file",
                     str(tls_web(pki, tmp_path))),
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "web           https, TLS12-TLS13, 1 basic-auth users" in result.stdout


def test_max_connections_above_the_open_file_limit_is_refused(tmp_path: Path) -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    config = parse_config(f"server: {{listen_address: '127.0.0.1:{free_port()}',"
                          f" max_connections: {soft}}}\n")
    with pytest.raises(ConfigError, match=rf"max_connections {soft}: above what the open-file"):
        App(config, "test.yaml")


def test_flags_override_the_server_section_and_keep_its_durations() -> None:
    args = build_parser().parse_args(["run", "--log.level", "debug", "--allow-empty"])
    config = _flag_overrides(args)(parse_config("server: {header_timeout: 3s, idle_timeout: 1m}"))
    assert config.server.log_level == "debug"
    assert (config.server.header_timeout, config.server.idle_timeout) == (3.0, 60.0)
    args = build_parser().parse_args(["run", "--web.listen-address", "nowhere", "--allow-empty"])
    with pytest.raises(ConfigError, match=r"--web.listen-address: expected host:port"):
        _flag_overrides(args)(parse_config(""))


# --- TLS, certificates and basic auth, in process ------------------------------------------

@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Callable[..., asyncio.Future[str]]]:
    """Start an App (no checks) on a free port with a web config; yields its base URL."""
    apps: list[App] = []

    async def start(web_config: Path | None, server: str = "") -> str:
        port = free_port()
        app = App(parse_config(f"server: {{listen_address: '127.0.0.1:{port}'{server}}}\n"),
                  "test.yaml", web_config=str(web_config) if web_config else None)
        await app.start()
        apps.append(app)
        scheme = app.web.scheme if app.web else "http"
        return f"{scheme}://127.0.0.1:{port}"

    yield start  # type: ignore[misc]
    for app in apps:
        await app.shutdown()


async def get(url: str, ctx: ssl.SSLContext | None = None, user: str | None = None,
              password: str = PASSWORD) -> tuple[int, dict[str, str], str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    headers = {"Authorization": f"Basic {token}"} if user else {}
    async with aiohttp.ClientSession() as session, session.get(
        url, ssl=ctx if ctx else False, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
    ) as resp:
        return resp.status, dict(resp.headers), await resp.text()


async def test_tls_basic_auth_and_headers(pki: Pki, tmp_path: Path, serve: Callable[..., asyncio.Future[str]]) -> None:
    web_path = tls_web(pki, tmp_path, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
                       "    X-Content-Type-Options: nosniff\nauth_excluded_paths: [/-/healthy]\n")
    base = await serve(web_path)
    assert base.startswith("https://")
    ctx = client_tls(pki)
    status, headers, _ = await get(f"{base}/metrics", ctx)
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert headers["X-Frame-Options"] == "deny", "headers go on refusals too"
    assert (await get(f"{base}/metrics", ctx, "prometheus", "wrong"))[0] == 401
    assert (await get(f"{base}/metrics", ctx, "nobody"))[0] == 401
    status, headers, body = await get(f"{base}/metrics", ctx, "prometheus")
    assert status == 200 and "llm_exporter_http_connections_open" in body
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert (await get(f"{base}/-/healthy", ctx))[0] == 200, "an excluded path needs no password"
    # Plain HTTP to the TLS port is a failed handshake, not a served request.
    with pytest.raises(aiohttp.ClientError):
        await get(base.replace("https", "http") + "/metrics")


async def test_client_certificate_required(pki: Pki, tmp_path: Path, serve: Callable[..., asyncio.Future[str]]) -> None:
    web_path = tls_web(pki, tmp_path, "  client_auth_type: RequireAndVerifyClientCert\n"
                       "  client_ca_file: ca.crt\n", users=False)
    base = await serve(web_path)
    assert (await get(f"{base}/metrics", client_tls(pki, "client")))[0] == 200
    for cert in (None, "stranger"):  # no certificate; one from a CA the server does not trust
        with pytest.raises(aiohttp.ClientError):
            await get(f"{base}/metrics", client_tls(pki, cert))
    _, _, body = await get(f"{base}/metrics", client_tls(pki, "client"))
    assert (value(body, "llm_exporter_http_connections_refused_total", reason="tls_handshake")
            or 0) >= 2


async def test_client_allowed_sans(pki: Pki, tmp_path: Path, serve: Callable[..., asyncio.Future[str]]) -> None:
    extra = ("  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"
             "  client_allowed_sans: [{}]\n")
    base = await serve(tls_web(pki, tmp_path, extra.format("scraper"), users=False))
    assert (await get(f"{base}/metrics", client_tls(pki, "client")))[0] == 200
    other = tmp_path / "other"
    other.mkdir()
    base = await serve(tls_web(pki, other, extra.format("someone-else"), users=False))
    assert (await get(f"{base}/metrics", client_tls(pki, "client")))[0] == 401


async def test_bcrypt_runs_off_the_loop_and_success_is_cached(
    pki: Pki, tmp_path: Path, serve: Callable[..., asyncio.Future[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Cost 12: ~200 ms a check. On the event loop, 40 wrong passwords would stall it for
    # seconds; on bcrypt's own threads, capped at MAX_PENDING queued, the loop keeps ticking.
    path = write_web(tmp_path, pki, f"basic_auth_users:\n  prometheus: {bcrypt_hash(PASSWORD, 12)}\n")
    base = await serve(path)
    checks = 0
    real = auth._checkpw

    def counting(password: str, hashed: str) -> bool:
        nonlocal checks
        checks += 1
        return real(password, hashed)

    monkeypatch.setattr(auth, "_checkpw", counting)
    for _ in range(3):
        assert (await get(f"{base}/metrics", user="prometheus"))[0] == 200
    assert checks == 1, "a verified password is remembered"

    lag = 0.0

    async def ticker() -> None:
        nonlocal lag
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            lag = max(lag, time.monotonic() - before - 0.01)

    tick = asyncio.create_task(ticker())
    results = await asyncio.gather(*(get(f"{base}/metrics", user="prometheus", password=f"x{i}")
                                     for i in range(40)))
    tick.cancel()
    assert {status for status, _, _ in results} == {401}
    assert checks <= 1 + 40
    assert lag < 0.5, f"the event loop stalled {lag:.2f}s during a wrong-password flood"
    assert (await get(f"{base}/metrics", user="prometheus"))[0] == 200


async def test_web_config_is_reread_on_reload(pki: Pki, tmp_path: Path) -> None:
    port = free_port()
    config_path = tmp_path / "config.yaml"
    config_path.write_text(f"server: {{listen_address: '127.0.0.1:{port}'}}\n")
    web_path = write_web(tmp_path, pki, f"basic_auth_users:\n  old: {bcrypt_hash(PASSWORD)}\n")
    app = App(parse_config(config_path.read_text()), str(config_path), web_config=str(web_path))
    await app.start()
    try:
        base = f"http://127.0.0.1:{port}"
        assert (await get(f"{base}/metrics", user="old"))[0] == 200
        web_path.write_text(f"basic_auth_users:\n  new: {bcrypt_hash(PASSWORD)}\n")
        assert await app.reload()
        assert (await get(f"{base}/metrics", user="old"))[0] == 401
        assert (await get(f"{base}/metrics", user="new"))[0] == 200
        web_path.write_text("basic_auth_users: {new: not-a-hash}\n")
        assert not await app.reload(), "a broken web config keeps the running one"
        assert (await get(f"{base}/metrics", user="new"))[0] == 200
    finally:
        await app.shutdown()


# --- the connection gate, in process --------------------------------------------------------

#: (port, the gate's registry, the event that lets /slow answer)
Gated = tuple[int, CollectorRegistry, asyncio.Event]
StartGated = Callable[..., asyncio.Future[Gated]]


@pytest.fixture
async def gated() -> AsyncIterator[StartGated]:
    """A Gate in front of a tiny app whose /slow answers when the test says so."""
    runners: list[web.AppRunner] = []

    async def start(**limits: float) -> Gated:
        release = asyncio.Event()

        async def slow(request: web.Request) -> web.Response:
            await release.wait()
            return web.Response(text="done\n")

        async def fast(request: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        app = web.Application()
        app.router.add_get("/slow", slow)
        app.router.add_get("/fast", fast)
        runner = make_runner(app)
        registry = CollectorRegistry()

        def handler() -> web.RequestHandler:
            assert runner.server is not None
            return runner.server()

        defaults = {"max_connections": 2, "header_timeout": 5.0, "idle_timeout": 60.0}
        gate = Gate(registry, Limits(**{**defaults, **limits}), handler, lambda: None)  # type: ignore[arg-type]
        app.middlewares.append(gate.middleware)
        await runner.setup()
        port = free_port()
        await GatedSite(runner, "127.0.0.1", port, gate).start()
        runners.append(runner)
        return port, registry, release

    yield start  # type: ignore[misc]
    for runner in runners:
        await runner.cleanup()


def refused(registry: CollectorRegistry, reason: str) -> float:
    found = value(generate_latest(registry).decode(), "llm_exporter_http_connections_refused_total",
                  reason=reason)
    assert found is not None
    return found


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), within) == b""
    except (ConnectionResetError, asyncio.IncompleteReadError):
        return True
    except TimeoutError:
        return False


async def test_at_the_cap_idle_is_evicted_and_busy_is_kept(gated: StartGated) -> None:
    port, registry, release = await gated(max_connections=2)
    idle_r, _ = await asyncio.open_connection("127.0.0.1", port)
    busy = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    assert await closed_by_server(idle_r, 2), "the idle connection made room"
    assert refused(registry, "evicted") == 1
    for _, writer in busy:
        writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
    await asyncio.sleep(0.2)
    # Both slots answer requests now: a new connection is refused, the busy ones are kept.
    new_r, _ = await asyncio.open_connection("127.0.0.1", port)
    assert await closed_by_server(new_r, 2)
    assert refused(registry, "limit") == 1
    release.set()
    for reader, _ in busy:
        assert b"200 OK" in await asyncio.wait_for(reader.readuntil(b"done\n"), 5)


async def test_slowloris_is_cut_at_the_header_timeout(gated: StartGated) -> None:
    port, registry, _ = await gated(max_connections=10, header_timeout=1.0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = time.monotonic()
    writer.write(b"GET /fast HTTP/1.1\r\n")
    closed = False
    for i in range(40):  # one header byte every 100 ms: never a complete request
        try:
            writer.write(b"X-a: b\r\n"[i % 8:i % 8 + 1])
            await writer.drain()
        except ConnectionError:
            closed = True
            break
        if reader.at_eof() or await closed_by_server(reader, 0.1):
            closed = True
            break
    elapsed = time.monotonic() - start
    assert closed, "a connection that never completes its headers is cut"
    assert 0.9 <= elapsed < 3.5, elapsed
    assert refused(registry, "header_timeout") == 1


async def test_a_kept_alive_connection_is_closed_after_the_idle_timeout(gated: StartGated) -> None:
    port, registry, _ = await gated(max_connections=10, idle_timeout=1.0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    assert b"200 OK" in await asyncio.wait_for(reader.readuntil(b"ok\n"), 5)
    start = time.monotonic()
    assert await closed_by_server(reader, 5)
    assert 0.9 <= time.monotonic() - start < 4
    assert refused(registry, "header_timeout") == 0, "an ordinary end of keep-alive, not a cut"


async def test_malformed_requests_log_at_debug_and_throttled(
    gated: StartGated, caplog: pytest.LogCaptureFixture
) -> None:
    port, _, _ = await gated(max_connections=50)
    caplog.set_level(logging.DEBUG)
    for i in range(20):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        bad = b"GET /fast HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n" if i % 2 else b"\x16\x03\x01junk\r\n\r\n"
        writer.write(bad)
        await writer.drain()
        assert b"400" in await asyncio.wait_for(reader.read(), 5)
        writer.close()
    served = [r for r in caplog.records if r.name.startswith(("aiohttp", "exporter.http"))]
    assert [r for r in served if r.levelno >= logging.WARNING] == [], "anyone can send these"
    assert 1 <= len([r for r in served if r.name == "exporter.http"]) <= 10, "throttled"


async def test_a_request_busy_past_the_request_timeout_is_cut(gated: StartGated) -> None:
    port, registry, release = await gated(max_connections=10, request_timeout=0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    assert await closed_by_server(reader, 3)
    assert refused(registry, "request_timeout") == 1
    release.set()


# --- end to end: a real Prometheus; 1100 idle connections under LimitNOFILE=1024 -----------

PROMETHEUS = """
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: good
    scheme: https
    tls_config: {{ca_file: {ca}}}
    basic_auth: {{username: prometheus, password: "{password}"}}
    static_configs: [{{targets: ["127.0.0.1:{port}"]}}]
  - job_name: wrong
    scheme: https
    tls_config: {{ca_file: {ca}}}
    basic_auth: {{username: prometheus, password: wrong}}
    static_configs: [{{targets: ["127.0.0.1:{port}"]}}]
"""


def start_exporter(spawn: Callable[..., Proc], tmp_path: Path, port: int, *args: str,
                   prefix: tuple[str, ...] = ()) -> Proc:
    config = tmp_path / "config.yaml"
    config.write_text(f"server: {{listen_address: '127.0.0.1:{port}', header_timeout: 30s}}\n")
    return spawn([*prefix, *exporter_cmd("run", "--config", str(config), "--allow-empty",
                                         *args)])


def test_real_prometheus_scrapes_over_tls_with_basic_auth(
    pki: Pki, tmp_path: Path, spawn: Callable[..., Proc], prometheus: Callable[..., Prometheus]
) -> None:
    port = free_port()
    exporter = start_exporter(spawn, tmp_path, port, "--web.config.file",
                              str(tls_web(pki, tmp_path)))
    ctx = client_tls(pki)
    wait_until(lambda: fetch(f"https://127.0.0.1:{port}/-/healthy", ctx)[0] == 200,
               timeout=30, what="exporter over TLS")
    prom = prometheus(PROMETHEUS.format(ca=pki.ca, password=PASSWORD, port=port)).url
    health: dict[str, dict[str, str]] = {}

    def scraped() -> bool:
        status, body = http_get(f"{prom}/api/v1/targets")
        if status != 200:
            return False
        for target in json.loads(body)["data"]["activeTargets"]:
            health[target["labels"]["job"]] = target
        return all(health.get(job, {}).get("health") in ("up", "down") for job in ("good", "wrong"))

    wait_until(scraped, timeout=30, what="both targets scraped")
    assert health["good"]["health"] == "up", health["good"]
    assert health["wrong"]["health"] == "down"
    assert "401" in health["wrong"]["lastError"], health["wrong"]["lastError"]
    status, body = http_get(f"{prom}/api/v1/query?query=llm_exporter_http_connections_limit")
    assert status == 200 and '"job":"good"' in body, body
    assert "Traceback" not in exporter.output()
    assert PASSWORD not in exporter.output()


@pytest.fixture
def many_fds() -> Iterator[None]:
    """This test process holds 1100 sockets besides its own files."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 4096)
    assert want >= 1500, f"the test needs an open-file limit of 1500, the hard limit is {hard}"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


IDLE = 1100


def fetch(url: str, ctx: ssl.SSLContext | None, timeout: float = 10) -> tuple[int, str]:
    """GET over HTTP or HTTPS (with basic auth when TLS is on, as the web config has it)."""
    token = base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
    req = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_1100_idle_connections_under_1024_open_files(
    pki: Pki, tmp_path: Path, spawn: Callable[..., Proc], many_fds: None, scheme: str
) -> None:
    """Over HTTPS the idle connections never start a handshake, the case a cap counted
    after the handshake would miss."""
    assert subprocess.run(["prlimit", "--version"], capture_output=True).returncode == 0
    port = free_port()
    web = ("--web.config.file", str(tls_web(pki, tmp_path))) if scheme == "https" else ()
    ctx = client_tls(pki) if scheme == "https" else None
    exporter = start_exporter(spawn, tmp_path, port, *web,
                              prefix=("prlimit", "--nofile=1024:1024"))
    url = f"{scheme}://127.0.0.1:{port}/metrics"
    wait_until(lambda: fetch(url, ctx)[0] == 200, timeout=30, what="exporter")
    limit = value(fetch(url, ctx)[1], "llm_exporter_http_connections_limit")
    assert limit is not None
    assert limit < 1024 - 100, limit
    held: list[socket.socket] = []
    try:
        for _ in range(IDLE):
            sock = socket.socket()
            sock.settimeout(10)
            sock.connect(("127.0.0.1", port))
            held.append(sock)
        # Every one of them is accepted or cut; /metrics still answers, promptly.
        start = time.monotonic()
        status, body = fetch(url, ctx)
        assert status == 200, exporter.output()[-2000:]
        assert time.monotonic() - start < 5
        cut = {labels[0][1]: v for labels, v in
               series(body, "llm_exporter_http_connections_refused_total").items()}
        assert cut["evicted"] + cut["limit"] >= IDLE - limit, cut
        assert (value(body, "llm_exporter_http_connections_open") or 0) <= limit
        # prlimit execs the exporter, so the PID is the exporter's own.
        assert len(os.listdir(f"/proc/{exporter.pid}/fd")) < 1024
        # A scrape keeps working while they are held.
        for _ in range(5):
            assert fetch(url, ctx)[0] == 200
    finally:
        for sock in held:
            sock.close()
    log = exporter.output()
    assert "out of system resource" not in log and "Too many open files" not in log
    assert len(log) < 20_000, "no flood of log lines"
