"""``llm-latency-exporter bench`` as a subprocess against the simulator: --json schema,
bad inputs, and --compare catching a TTFT regression injected with slow_first_token."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.bench.compare import compare
from exporter.bench.summary import percentile, summarize
from exporter.cli import main
from tests.support import ROOT
from tests.support.procs import free_port
from tests.support.simulator import Simulator, running_simulator

MODEL = "simulated-model"


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with running_simulator(fast=True) as running:
        yield running


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "bench", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def test_json_schema_and_summary(sim: Simulator, tmp_path: Path) -> None:
    sim.faults(tokens_per_chunk=2)
    out = tmp_path / "run.json"
    proc = bench("--url", sim.base, "--model", MODEL, "--requests", "8", "--concurrency", "3",
                 "--max-tokens", "10", "--prompt-tokens", "40-80", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no progress bar when stderr is not a terminal
    assert "ttft" in proc.stdout and "outcomes      ok 8" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["format"] == "llm-latency-exporter-bench/1"
    assert isinstance(doc["origin_monotonic_s"], float) and doc["run_id"]
    assert doc["config"]["url"] == f"{sim.base}/v1/chat/completions"
    assert doc["config"]["concurrency"] == 3 and doc["config"]["prompt_tokens"] == "40-80"
    records = doc["requests"]
    assert [r["id"] for r in records] == list(range(8))
    for r in records:
        assert r["outcome"] == "ok" and r["connection"] in ("new", "reused")
        assert 0 < r["ttft_s"] <= r["ttfc_s"] <= r["e2e_s"] and r["start_s"] >= 0
        assert r["output_tokens"] == 10 and r["output_tokens_estimated"] is False
        # Two tokens per chunk after the first: fewer gaps than tokens - 1.
        assert 1 <= len(r["itl_s"]) < 9
        assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / 9)
        assert 30 <= r["prompt_tokens"] <= 110 and r["max_tokens"] == 10
    s = doc["summary"]
    assert s["requests"] == 8 and s["ok"] == 8 and s["outcomes"] == {"ok": 8}
    assert s["output_tokens"] == 80 and s["success_ratio"] == 1.0
    for key in ("ttft_s", "ttfc_s", "tpot_s", "itl_s", "e2e_s"):
        d = s["latency"][key]
        assert d["p50"] <= d["p90"] <= d["p95"] <= d["p99"] <= d["max"], key
    assert s["latency"]["itl_s"]["count"] == sum(len(r["itl_s"]) for r in records)
    assert s["request_throughput"] == pytest.approx(8 / s["duration_s"])
    assert s["goodput"]["good"] == 8 and s["goodput"]["ratio"] == 1.0


def test_rate_duration_prompts_file_and_failures(sim: Simulator, tmp_path: Path) -> None:
    sim.faults(error_rate=0.5)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello there", "max_tokens": 3}\n\n{"prompt": "why"}\n')
    out = tmp_path / "run.json"
    proc = bench("--url", sim.base, "--model", MODEL, "--duration", "1s", "--rate", "10",
                 "--prompts", str(prompts), "--max-tokens", "5", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    records = doc["requests"]
    assert 3 <= len(records) <= 30  # Poisson arrivals at 10/s for one second
    assert max(r["start_s"] for r in records) < 1.5
    assert [r["max_tokens"] for r in records[:2]] == [3, 5]
    outcomes = doc["summary"]["outcomes"]
    assert set(outcomes) <= {"ok", "http_5xx"} and sum(outcomes.values()) == len(records)
    failed = [r for r in records if r["outcome"] == "http_5xx"]
    assert failed and all(r["ttft_s"] is None and r["status"] == 500 for r in failed)
    # Failures count against goodput, not in the latency percentiles.
    s = doc["summary"]
    assert s["goodput"]["ratio"] == pytest.approx(s["goodput"]["good"] / len(records))
    assert s["latency"]["ttft_s"]["count"] == s["ok"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", MODEL], "--url is required"),
        (["--url", "ftp://x", "--model", MODEL], "--url"),
        (["--url", "http://127.0.0.1:9", "--model", MODEL, "--requests", "0"], "--requests"),
        (["--url", "http://127.0.0.1:9", "--model", MODEL, "--requests", "5", "--duration",
          "1s"], "not both"),
        (["--url", "http://127.0.0.1:9", "--model", MODEL, "--concurrency", "2", "--rate",
          "1"], "not both"),
        (["--url", "http://127.0.0.1:9", "--model", MODEL, "--duration", "soon"], "--duration"),
        (["--url", "http://127.0.0.1:9", "--model", MODEL, "--max-tokens", "9-3"],
         "--max-tokens"),
        (["--url", "http://127.0.0.1:9", "--model", MODEL, "--rate", "-1"], "--rate"),
        (["--url", "http://127.0.0.1:9", "--model", MODEL, "--api-key-env", "NO_SUCH_VAR_X"],
         "NO_SUCH_VAR_X"),
        (["--url", "http://127.0.0.1:9", "--model", MODEL, "--prompts", "/nonexistent.jsonl"],
         "--prompts"),
        (["--url", "http://127.0.0.1:9", "--model", MODEL, "--compare", "/nonexistent.json"],
         "--compare"),
    ],
)
def test_bad_flags_one_line_exit_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # In-process through the same entry point as the subprocess tests: cheaper per case.
    assert main(["bench", *args]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    assert out == ""


def test_bad_prompts_file_names_the_line(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{"prompt": 3}\n')
    proc = bench("--url", "http://127.0.0.1:9", "--model", MODEL, "--prompts", str(prompts))
    assert proc.returncode == 2 and "line 2" in proc.stderr


def test_nothing_ok_exits_3() -> None:
    proc = bench("--url", f"http://127.0.0.1:{free_port()}", "--model", MODEL, "--requests", "2")
    assert proc.returncode == 3, proc.stderr
    assert "connect_error 2" in proc.stdout


def test_help_has_examples() -> None:
    proc = bench("--help")
    assert proc.returncode == 0
    assert "examples:" in proc.stdout and "--compare before.json" in proc.stdout


def test_compare_flags_an_injected_ttft_regression(sim: Simulator, tmp_path: Path) -> None:
    # TTFT of ~200 ms from the fault, so loopback jitter is a few percent of it; then 25%
    # more, injected the same way. Inter-token gaps are ~6 ms, and a busy 2-core machine moves
    # their p95 by more than 1 ms: the 5 ms floor keeps that noise from gating, not the +50 ms.
    common = ["--url", sim.base, "--model", MODEL, "--requests", "10", "--concurrency", "2",
              "--max-tokens", "4", "--prompt-tokens", "64", "--regression-floor", "5ms"]
    base, again, slow = tmp_path / "base.json", tmp_path / "again.json", tmp_path / "slow.json"
    sim.faults(slow_first_token=0.2)
    first = bench(*common, "--json", str(base))
    assert first.returncode == 0, first.stderr
    same = bench(*common, "--json", str(again), "--compare", str(base))
    assert same.returncode == 0, same.stdout
    assert "no regression" in same.stdout
    sim.faults(slow_first_token=0.25)
    worse = bench(*common, "--json", str(slow), "--compare", str(base), "--max-regression",
                  "0.2")
    assert worse.returncode == 1, worse.stdout
    flagged = [ln for ln in worse.stdout.splitlines() if ln.endswith("REGRESSION")]
    assert any(ln.startswith("ttft p50") for ln in flagged), worse.stdout
    assert any(ln.startswith("ttft p95") for ln in flagged), worse.stdout
    assert not any(ln.startswith(("tpot", "itl")) for ln in flagged), worse.stdout
    base_p50 = json.loads(base.read_text())["summary"]["latency"]["ttft_s"]["p50"]
    slow_p50 = json.loads(slow.read_text())["summary"]["latency"]["ttft_s"]["p50"]
    assert 1.2 < slow_p50 / base_p50 < 1.35
    # The same regression under a looser bar passes.
    looser = bench(*common, "--compare", str(base), "--max-regression", "0.5")
    assert looser.returncode == 0, looser.stdout


# --- pure parts ---------------------------------------------------------------------------


def test_percentile_interpolates_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0


def record(outcome: str = "ok", ttft: float = 0.1, tpot: float | None = 0.01,
           itl: list[float] | None = None, tokens: int = 5) -> dict[str, Any]:
    return {"outcome": outcome, "ttft_s": ttft, "ttfc_s": ttft, "tpot_s": tpot,
            "itl_s": itl if itl is not None else [0.01] * (tokens - 1), "e2e_s": ttft + 0.04,
            "output_tokens": tokens, "output_tokens_estimated": False, "prompt_tokens": 20}


def test_summary_goodput_counts_failures_and_slo() -> None:
    records = [record(), record(ttft=2.0), record(tpot=0.5), record(tokens=1, tpot=None),
               record("http_5xx", ttft=0, tpot=None, itl=[], tokens=0)]
    s = summarize(records, duration=2.0, slo_ttft=1.0, slo_tpot=0.1)
    assert s["ok"] == 4 and s["outcomes"] == {"ok": 4, "http_5xx": 1}
    # Good: the first, and the one-token answer (no TPOT to miss); not the slow ones.
    assert s["goodput"]["good"] == 2 and s["goodput"]["ratio"] == 0.4
    assert s["goodput"]["per_s"] == 1.0
    assert s["latency"]["itl_s"]["count"] == 12
    assert s["output_token_throughput"] == (5 + 5 + 5 + 1) / 2.0


def test_compare_directions_and_floor() -> None:
    base = summarize([record(ttft=0.100, itl=[0.0001] * 4)] * 4, 1.0, 1.0, 0.1)
    # 30% slower TTFT; ITL 0.1 ms -> 0.2 ms is +100% but under the 1 ms floor.
    cur = summarize([record(ttft=0.130, itl=[0.0002] * 4)] * 4, 1.0, 1.0, 0.1)
    changes = {c.metric: c for c in compare(base, cur, 0.2, 0.001)}
    assert changes["ttft p50"].regression and changes["ttft p95"].regression
    assert not changes["ttft p99"].regression  # shown, not gated
    assert not changes["itl p50"].regression
    assert not changes["request throughput"].regression
    # Throughput is worse when it falls: half the requests in the same time.
    fewer = summarize([record(ttft=0.100, itl=[0.0001] * 4)] * 2, 1.0, 1.0, 0.1)
    changes = {c.metric: c for c in compare(base, fewer, 0.2, 0.001)}
    assert changes["request throughput"].regression
    assert changes["request throughput"].change == pytest.approx(-0.5)
