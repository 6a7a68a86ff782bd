"""The engine simulator as the tests run it: ``llm-latency-exporter simulate`` in a subprocess
on a free loopback port, ready once it has printed its URLs and answers ``/health``, stopped
by PID (its own process group).

    sim = start_simulator(fmt="triton", fast=True, max_num_seqs=2, model=("big", "small"))

Keyword options become the CLI flags of the same name (``max_num_seqs=2`` ->
``--max-num-seqs 2``; a tuple repeats the flag, ``True`` is a bare flag); ``flags`` are passed
as they are. The ``simulator`` fixture in conftest.py wraps :func:`start_simulator` and stops
every simulator it started when the test ends, pass or fail; :func:`running_simulator` does
the same for a fixture of a wider scope.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from exporter.simulator.faults import Faults
from tests.support.procs import Proc, exporter_cmd, free_port, http_get, wait_until

#: Engine speed for tests: fast enough to be quick, slow enough that batching and queueing
#: are visible. ``fast=True`` applies it; options of the same name override it.
FAST: dict[str, float] = {"decode_step_ms": 5, "decode_step_per_seq_ms": 0.5,
                          "prefill_tps": 100_000}

# The URL lines the CLI prints once every listener is up: "<what, padded> <url>".
_URL_LINE = re.compile(r"^([a-z][a-z ]*?)\s+(https?://\S+)$")


class Simulator:
    """A started simulator process and its URLs."""

    def __init__(self, proc: Proc, port: int) -> None:
        self.proc = proc
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        #: The chat completions endpoint (what a probe or bench targets).
        self.url = f"{self.base}/v1/chat/completions"
        #: host:port, as the probe's endpoint label shows it.
        self.target = f"127.0.0.1:{port}"

    @property
    def urls(self) -> dict[str, str]:
        """What the CLI printed: api, admin, metrics (and trtllm's iteration stats)."""
        found = {}
        for line in self.proc.output().splitlines():
            m = _URL_LINE.match(line.strip())
            if m:
                found[m.group(1)] = m.group(2)
        return found

    @property
    def metrics_url(self) -> str:
        """Where this format serves its Prometheus text (Triton: a port of its own)."""
        return self.urls["metrics"]

    def faults(self, **changes: Any) -> None:
        """Reset every fault to its default, then apply ``changes``."""
        body = json.dumps({**Faults().as_dict(), **changes}).encode()
        req = urllib.request.Request(f"{self.base}/admin/faults", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200

    def _ready(self) -> bool:
        if self.proc.popen.poll() is not None:
            raise AssertionError(
                f"simulator exited with {self.proc.popen.returncode}:\n{self.proc.output()}"
            )
        return "metrics" in self.urls and http_get(f"{self.base}/health", timeout=1)[0] == 200

    def stop(self) -> int | None:
        """Stop the process by PID (SIGTERM, then SIGKILL of its group); its exit status."""
        code = self.proc.stop()
        self.proc.stderr_path.unlink(missing_ok=True)
        return code


def simulate_args(port: int, *flags: str, fmt: str | None = None, fast: bool = False,
                  **options: Any) -> list[str]:
    """The ``simulate`` command line for these options."""
    merged = {**FAST, **options} if fast else dict(options)
    if fmt == "triton" and "metrics_port" not in merged and "--metrics-port" not in flags:
        merged["metrics_port"] = free_port()  # not port + 2, which may be taken
    args = ["simulate", "--port", str(port)]
    if fmt is not None:
        args += ["--format", fmt]
    for name, value in merged.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list | tuple):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, str(value)]
    return [*args, *flags]


def start_simulator(*flags: str, fmt: str | None = None, fast: bool = False,
                    timeout: float = 20.0, **options: Any) -> Simulator:
    """Start a simulator on a free loopback port and wait until it serves; a simulator that
    does not get ready is stopped before the error is raised."""
    port = free_port()
    proc = Proc(exporter_cmd(*simulate_args(port, *flags, fmt=fmt, fast=fast, **options)))
    sim = Simulator(proc, port)
    try:
        wait_until(sim._ready, timeout=timeout, what=f"simulator on port {port}")
    except BaseException:
        output = proc.output()
        sim.stop()
        if output:
            print(f"simulator output:\n{output}")
        raise
    return sim


@contextmanager
def running_simulator(*flags: str, **kw: Any) -> Iterator[Simulator]:
    """:func:`start_simulator` for a ``with`` block (module-scoped fixtures)."""
    sim = start_simulator(*flags, **kw)
    try:
        yield sim
    finally:
        sim.stop()


#: The ``simulator`` fixture's type: start_simulator's signature.
StartSimulator = Callable[..., Simulator]
