"""A real Prometheus for a test: its command line with a temporary TSDB, a start on a
loopback port that waits for readiness, and the stop by PID that ``Proc`` gives.

The CI image installs it (Debian: prometheus); ``require()`` fails under CI=true when it is
missing, and skips elsewhere.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.procs import Proc, http_get, wait_until


def require(binary: str = "prometheus") -> None:
    if shutil.which(binary) is not None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and `{binary}` is not installed", pytrace=False)
    pytest.skip(f"`{binary}` is not installed")


def command(config: Path, tsdb: Path, listen: str, *extra: str) -> list[str]:
    """``prometheus`` serving ``listen`` (host:port) with its TSDB in ``tsdb``."""
    return ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tsdb}",
            f"--web.listen-address={listen}", *extra]


def ready(base: str) -> bool:
    return http_get(f"{base}/-/ready", timeout=1)[0] == 200


def start(config_text: str, port: int, workdir: Path, timeout: float = 30) -> Proc:
    """Prometheus on 127.0.0.1:``port`` with this config, ready; the caller stops it."""
    config = workdir / "prometheus.yml"
    config.write_text(config_text)
    proc = Proc(command(config, workdir / "tsdb", f"127.0.0.1:{port}"))
    try:
        wait_until(lambda: ready(f"http://127.0.0.1:{port}"), timeout, "prometheus")
    except BaseException:
        proc.stop()
        raise
    return proc
