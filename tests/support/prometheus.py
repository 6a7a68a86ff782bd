"""A real Prometheus for the tests: its config written to a temporary directory, started on
a free loopback port by PID, ready (``/-/ready``) when returned.

    prom = start_prometheus(tmp, scrape_config(exporter_port, rules), spawn)
    api(prom.url, "query", query="up")

``command()`` is the bare command line, for a Prometheus started elsewhere (inside a network
namespace, as the fleet lab does); ``require()`` fails under CI=true without the binary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.procs import Proc, free_port, http_get, wait_until

#: Scrape and evaluate every second: two samples are enough for rate(), so a run of about a
#: minute fills the rules' [5m] windows.
SCRAPE = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
{external}rule_files: {rules}
scrape_configs:
  - job_name: llm
    static_configs: [{{targets: ["127.0.0.1:{exporter}"]}}]
"""


#: ``run("promtool", "check", "rules", FILE, input=None)``: the ``prom_cli`` fixture of
#: conftest.py, which runs one of the Prometheus tools (promtool, amtool) with output captured.
PromCli = Callable[..., subprocess.CompletedProcess[str]]


@dataclass(frozen=True)
class Prometheus:
    proc: Proc
    url: str


def scrape_config(exporter_port: int, rules: Path | None = None,
                  external_labels: Mapping[str, str] | None = None) -> str:
    """Scrape one exporter every second, with the rule files ``generate`` wrote to
    ``rules`` (none when None) and, for a fleet's edge, its external labels."""
    files = json.dumps([str(rules / f) for f in ("recording.yaml", "alerts.yaml")]
                       if rules is not None else [])
    external = (f"  external_labels: {json.dumps(dict(external_labels))}\n"
                if external_labels else "")
    return SCRAPE.format(exporter=exporter_port, rules=files, external=external)


def require(binary: str = "prometheus") -> None:
    """Skip without ``binary`` (a Debian package of the suite); fail under CI=true."""
    if shutil.which(binary) is not None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and `{binary}` is not installed", pytrace=False)
    pytest.skip(f"`{binary}` is not installed")


def command(config: Path, tsdb: Path, listen: str, *extra: str) -> list[str]:
    """``prometheus`` serving ``listen`` (host:port) with its data in ``tsdb``."""
    return ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
            f"--web.listen-address={listen}", *extra]


def start_prometheus(tmp: Path, config: str, start: Callable[[list[str]], Proc] = Proc,
                     name: str = "prometheus") -> Prometheus:
    """Prometheus with ``config`` and its data under ``tmp``; ``start`` runs the command
    (the ``spawn`` fixture, or Proc for a fixture that stops it itself)."""
    port = free_port()
    path = tmp / f"{name}.yml"
    path.write_text(config)
    proc = start(command(path, tmp / name, f"127.0.0.1:{port}"))
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.popen.poll() is not None:
            raise AssertionError(f"{name} exited with {proc.popen.returncode}:\n"
                                 f"{proc.output()[-2000:]}")
        return http_get(f"{url}/-/ready")[0] == 200

    try:
        wait_until(ready, timeout=30, what=f"{name} ready")
    except AssertionError:
        proc.stop()  # a caller that never got it back cannot stop it
        raise
    return Prometheus(proc, url)


def api(base: str, path: str, **params: str | float) -> Any:
    """The ``data`` of a successful ``/api/v1/<path>`` answer."""
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]
