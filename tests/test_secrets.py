"""A canary secret, configured every way a secret reaches the exporter, appears nowhere:
not in logs at debug, not on `/`, not in /metrics, not in check-config, not in bench output
— even when the server echoes it back in its errors."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from exporter import redact
from tests.support import ROOT
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until

CANARY_KEY = "sk-canary-7f3a9c"  # the probe's API key, from the environment
CANARY_TOKEN = "tok-canary-51e2"  # the engine's bearer token, from a file
CANARY_PASSWORD = "pw-canary-88d0"  # URL user-info
CANARY_QUERY = "q-canary-2b7c"  # a query-string token
CANARIES = (CANARY_KEY, CANARY_TOKEN, CANARY_PASSWORD, CANARY_QUERY)


def runs(body: str, check: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith("llm_exporter_check_runs_total{") and f'check="{check}"' in line)


def leaked(text: str) -> list[str]:
    return [c for c in CANARIES if c in text]


def test_canary_secrets_appear_nowhere(tmp_path: Path, spawn: Callable[..., Proc]) -> None:
    echo_port, port = free_port(), free_port()
    spawn([sys.executable, "-m", "tests.support.echo_server", str(echo_port)])
    wait_until(lambda: http_get(f"http://127.0.0.1:{echo_port}/health")[0] == 200, 20,
               "echo server")
    token_file = tmp_path / "engine-token"
    token_file.write_text(CANARY_TOKEN + "\n")
    plain = f"http://127.0.0.1:{echo_port}"
    with_password = f"http://user:{CANARY_PASSWORD}@127.0.0.1:{echo_port}"
    base = plain
    cfg = tmp_path / "config.yaml"
    # aiohttp refuses an Authorization header beside URL credentials, so the password rides
    # one engine and the bearer token another.
    cfg.write_text(
        f"server: {{listen_address: '127.0.0.1:{port}'}}\n"
        "engines:\n"
        f"  - {{name: basic, url: '{with_password}/metrics?token={CANARY_QUERY}', type: vllm,"
        " interval: 300ms, timeout: 300ms}\n"
        f"  - {{name: bearer, url: '{plain}/metrics', type: vllm, interval: 300ms,"
        f" timeout: 300ms, bearer_token: {{file: {token_file}}}}}\n"
        f"probes: [{{name: chat, url: '{plain}/v1/chat/completions?key={CANARY_QUERY}',"
        " model: m, interval: 300ms, min_spacing: 10ms, api_key: {env: CANARY_KEY}}]\n"
    )
    env = {"CANARY_KEY": CANARY_KEY}
    proc = spawn(exporter_cmd("run", "--config.file", str(cfg), "--log.level", "debug"),
                 env=env)
    metrics_url = f"http://127.0.0.1:{port}/metrics"
    wait_until(lambda: runs(http_get(metrics_url)[1], "probe/chat") >= 3, 30,
               "probe runs against the echoing server")
    wait_until(lambda: "llm_engine_scrape_errors_total" in http_get(metrics_url)[1], 30,
               "engine scrape errors")
    for where, body in (("/metrics", http_get(metrics_url)[1]),
                        ("/", http_get(f"http://127.0.0.1:{port}/")[1]),
                        ("logs", proc.output())):
        assert body and not leaked(body), f"{where} leaks {leaked(body)}"
    # The echoes did arrive (so the test would see a leak): redacted, not absent.
    assert "<redacted>" in proc.output(), proc.output()
    checked = subprocess.run(exporter_cmd("check-config", str(cfg)), cwd=ROOT, text=True,
                             capture_output=True, timeout=60, env={**os.environ, **env})
    assert checked.returncode == 0, checked.stderr
    assert not leaked(checked.stdout + checked.stderr)
    bench = subprocess.run(
        exporter_cmd("bench", "--url", f"{base}/v1/chat/completions?key={CANARY_QUERY}",
                     "--model", "m", "--requests", "2", "--api-key-env", "CANARY_KEY"),
        cwd=ROOT, text=True, capture_output=True, timeout=60, env={**os.environ, **env})
    assert not leaked(bench.stdout + bench.stderr), leaked(bench.stdout + bench.stderr)


def test_bad_url_error_never_prints_the_password(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"engines: [{{name: e, url: 'ftp://u:{CANARY_PASSWORD}@h/x?t={CANARY_QUERY}'}}]\n")
    proc = subprocess.run(exporter_cmd("check-config", str(cfg)), cwd=ROOT, text=True,
                          capture_output=True, timeout=60)
    assert proc.returncode == 2 and "expected an http:// or https:// URL" in proc.stderr
    assert not leaked(proc.stderr)


def test_url_credentials_are_remembered_in_every_form_a_server_can_echo() -> None:
    redact.remember_url(f"http://user:{CANARY_PASSWORD}@h/x?token={CANARY_QUERY}&b=a%2Fb%2Fcd")
    basic = base64.b64encode(f"user:{CANARY_PASSWORD}".encode()).decode()
    echoed = f"auth=Basic {basic} query=token={CANARY_QUERY}&b=a%2Fb%2Fcd decoded=a/b/cd"
    assert redact.text(echoed) == ("auth=Basic <redacted> query=token=<redacted>&b=<redacted>"
                                   " decoded=<redacted>")
