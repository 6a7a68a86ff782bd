"""What a scenario run (``runner.LabRun``) and the fleet (``fleet.Fleet``) share: the carrier
lab they build on, processes started in its namespaces with a log file each, GETs from
inside a namespace, readiness waits that quote the log, files the exporter never reads half
written, ``diagnose --prometheus`` run inside a namespace, and a ``close()`` that runs
whatever happened (a failed start, Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from tests.support import ROOT
from tests.support.lab.topology import CarrierLab
from tests.support.netlab import in_netns
from tests.support.procs import http_get


class NetRun:
    """A run over a carrier lab. Use as a context manager; ``close()`` always cleans up."""

    #: The one-line error of a run that could not do its part (not a test's verdict).
    error: type[Exception] = RuntimeError

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.carrier_lab: CarrierLab | None = None
        self.logs: dict[str, Path] = {}

    def start(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def net(self) -> CarrierLab:
        assert self.carrier_lab is not None, "the lab is not started"
        return self.carrier_lab

    def spawn(self, ns: str, what: str, args: list[str],
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """``args`` in namespace ``ns`` (``env`` over the environment), its output in
        ``logs[what]``, stopped by close()."""
        log = self.logs[what] = self.workdir / f"{what}.log"
        with log.open("wb") as out:
            return self.net.spawn(ns, args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                  env={**os.environ, **(env or {})})

    def get(self, ns: str, url: str, timeout: float = 10) -> tuple[int, str]:
        return in_netns(ns, lambda: http_get(url, timeout=timeout))

    def wait(self, pred: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``pred``; on timeout, raise ``error`` with the end of ``logs[what]``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            time.sleep(0.1)
        log = self.logs.get(what)
        tail = "" if log is None else (
            " (log: " + log.read_text(errors="replace")[-400:].strip() + ")")
        raise self.error(f"timed out after {timeout:.0f}s waiting for {what}{tail}")

    @staticmethod
    def write_json(path: Path, doc: Any) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(path)  # the exporter never reads half a file

    def diagnose_in(self, ns: str, prometheus: str, config: Path, *args: str,
                 timeout: float = 60) -> dict[str, Any]:
        """``diagnose --prometheus URL --config FILE --json`` from inside ``ns``, as a
        person runs it; exit 0, 1 and 3 are verdicts, anything else raises ``error``. A
        Prometheus too busy to answer in time (the lab's two cores saturated by the tier) is
        asked once more: the verdict, not the store's latency, is what a lab checks."""
        command = ["ip", "netns", "exec", ns, sys.executable, "-m", "exporter", "diagnose",
                   "--prometheus", prometheus, "--config", str(config), *args, "--json"]
        for attempt in (1, 2):
            try:
                proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                                      timeout=timeout)
            except subprocess.TimeoutExpired:
                if attempt == 2:
                    raise
                continue
            if attempt == 1 and not proc.stdout.strip() and "no answer within" in proc.stderr:
                continue
            break
        if proc.returncode not in (0, 1, 3):
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise self.error(f"diagnose --prometheus exited {proc.returncode}: {last}")
        try:
            result: dict[str, Any] = json.loads(proc.stdout)
        except ValueError:
            said = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines()
                    or ["nothing"])[-1]
            raise self.error(f"diagnose --prometheus --json (exit {proc.returncode}) printed "
                             f"no JSON: {said[:300]}") from None
        return result

    def close(self) -> None:
        if self.carrier_lab is not None:
            self.carrier_lab.close()
            self.carrier_lab = None
