"""The caps on engine-derived labels and the exposition faults that fail a parse, on the
parser directly (the same faults over HTTP against a running exporter:
tests/test_engine_faults.py)."""

from __future__ import annotations

import time

import pytest

from exporter import metrics
from exporter.checks.engine.limits import LABEL_REASONS, cap_of
from exporter.checks.engine.parse import (
    HistogramValue,
    ParseError,
    ParseTimeout,
    has_names,
    parse,
)
from exporter.checks.engine.table import SOURCES
from exporter.config.models import EngineLimits

RUNNING = "vllm:num_requests_running"
SUCCESS = "vllm:request_success_total"
TTFT = "vllm:time_to_first_token_seconds"


def lines(template: str, n: int) -> str:
    return "".join(template.format(i=i) + "\n" for i in range(n))


def test_every_engine_label_has_a_cap_and_a_drop_reason() -> None:
    labels = {n for s in SOURCES for n in s.target.labels} - {"target", "engine"}
    assert labels == set(LABEL_REASONS)
    assert set(metrics.ENGINE_DROP_REASONS) == {*LABEL_REASONS, "le", "series"}
    limits = EngineLimits(max_models=3, max_dp_ranks=4, max_label_values=5)
    assert [cap_of(limits, n) for n in ("model", "dp_rank", "finished_reason", "source")] == [
        3, 4, 5, 5]


def test_dp_rank_cap() -> None:
    body = lines(RUNNING + '{{engine="{i}",model_name="m"}} 1', 100)
    snap = parse(body, "vllm", EngineLimits(max_dp_ranks=8))
    assert sorted(snap.series[metrics.ENGINE_REQUESTS_RUNNING]) == sorted(
        ("m", str(i)) for i in range(8))
    assert snap.dropped == {"dp_rank": 92}
    assert snap.kept["dp_rank"] == tuple(str(i) for i in range(8))


def test_finish_reason_cap_counts_per_label_not_per_model() -> None:
    body = "".join(
        f'{SUCCESS}{{engine="0",finished_reason="r{i}",model_name="{m}"}} 1\n'
        for m in ("a", "b") for i in range(10)
    )
    snap = parse(body, "vllm", EngineLimits(max_label_values=4))
    kept = snap.series[metrics.ENGINE_REQUESTS_FINISHED]
    assert {k[2] for k in kept} == {"r0", "r1", "r2", "r3"} and len(kept) == 8
    assert snap.dropped == {"finished_reason": 12}


def test_kept_values_keep_their_place_on_every_capped_label() -> None:
    first = parse(lines(RUNNING + '{{engine="{i}",model_name="m"}} 1', 6), "vllm",
                  EngineLimits(max_dp_ranks=4))
    assert first.kept["dp_rank"] == ("0", "1", "2", "3")
    # A newcomer listed first waits while the four kept ranks are all there...
    body = RUNNING + '{engine="9",model_name="m"} 1\n' + lines(
        RUNNING + '{{engine="{i}",model_name="m"}} 1', 4)
    again = parse(body, "vllm", EngineLimits(max_dp_ranks=4), keep=first.kept)
    assert again.kept["dp_rank"] == ("0", "1", "2", "3") and again.dropped == {"dp_rank": 1}
    # ...and takes the place of one that went away.
    body = RUNNING + '{engine="9",model_name="m"} 1\n' + lines(
        RUNNING + '{{engine="{i}",model_name="m"}} 1', 3)
    after = parse(body, "vllm", EngineLimits(max_dp_ranks=4), keep=again.kept)
    assert after.kept["dp_rank"] == ("0", "1", "2", "9") and after.dropped == {}


def test_a_histogram_with_too_many_bounds_is_dropped_whole() -> None:
    many = lines(TTFT + '_bucket{{engine="0",le="{i}",model_name="big"}} {i}', 500)
    few = lines(TTFT + '_bucket{{engine="0",le="{i}",model_name="ok"}} {i}', 5)
    tail = (f'{TTFT}_count{{engine="0",model_name="big"}} 499\n'
            f'{TTFT}_count{{engine="0",model_name="ok"}} 4\n')
    snap = parse(many + few + tail, "vllm", EngineLimits(max_buckets=10))
    assert list(snap.series[metrics.ENGINE_TTFT]) == [("ok", "0")]
    assert snap.dropped == {"le": 501}  # every line of the big one, _count included


def test_series_cap_bounds_what_a_target_adds_in_all() -> None:
    body = "".join(
        lines(RUNNING + f'{{{{engine="{{i}}",model_name="m{m}"}}}} 1', 60) for m in range(20)
    )  # 1200 series, each under its label caps (20 models, 60 ranks)
    snap = parse(body, "vllm", EngineLimits(max_series=500))
    assert len(snap.series[metrics.ENGINE_REQUESTS_RUNNING]) == 500
    assert snap.dropped == {"series": 700}
    # A histogram costs its buckets plus _count and _sum.
    hist = lines(TTFT + '_bucket{{engine="0",le="{i}",model_name="m"}} {i}', 98) + (
        f'{TTFT}_bucket{{engine="0",le="+Inf",model_name="m"}} 98\n'
        f'{TTFT}_count{{engine="0",model_name="m"}} 98\n{TTFT}_sum{{engine="0",model_name="m"}} 1\n')
    snap = parse(hist + RUNNING + '{engine="0",model_name="m"} 1\n', "vllm",
                 EngineLimits(max_series=101))
    ttft = snap.series[metrics.ENGINE_TTFT][("m", "0")]
    assert isinstance(ttft, HistogramValue) and len(ttft.buckets) == 99
    assert metrics.ENGINE_REQUESTS_RUNNING not in snap.series and snap.dropped == {"series": 1}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (RUNNING + '{engine="0",model_name="m"} 1\n' + RUNNING + '{engine="0",model_name="m"} 2\n',
         "line 2: the same series again"),
        (f'{TTFT}_bucket{{engine="0",le="0.1",model_name="m"}} 1\n'
         f'{TTFT}_bucket{{engine="0",le="NaN",model_name="m"}} 2\n', "line 2: le is NaN"),
        (f'{TTFT}_bucket{{engine="0",le="0.1",model_name="m"}} 5\n'
         f'{TTFT}_bucket{{engine="0",le="0.2",model_name="m"}} 3\n'
         f'{TTFT}_bucket{{engine="0",le="+Inf",model_name="m"}} 5\n',
         "llm_engine_time_to_first_token_seconds: bucket counts decrease"),
        (f'{TTFT}_bucket{{engine="0",le="0.1",model_name="m"}} 5\n'
         f'{TTFT}_count{{engine="0",model_name="m"}} 4\n', "bucket counts decrease"),
    ],
    ids=["duplicate", "nan-le", "non-monotonic", "count-below-a-bucket"],
)
def test_malformed_exposition(body: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse(body, "vllm")


def test_what_is_not_a_duplicate() -> None:
    body = (
        # Series that coincide once a label is dropped (SGLang tp_rank) are summed.
        'sglang:num_requests_total{model_name="m",tp_rank="0"} 1\n'
        'sglang:num_requests_total{model_name="m",tp_rank="1"} 2\n'
    )
    snap = parse(body, "sglang")
    assert snap.series[metrics.ENGINE_REQUESTS_FINISHED] == {("m", "", ""): 3.0}
    # A repeat of a line a cap already turned away is not read, so not looked at.
    capped = lines(RUNNING + '{{engine="{i}",model_name="m"}} 1', 3)
    capped += RUNNING + '{engine="2",model_name="m"} 1\n'
    assert parse(capped, "vllm", EngineLimits(max_dp_ranks=2)).dropped == {"dp_rank": 2}


def test_has_names() -> None:
    assert has_names("Service Unavailable", "vllm") is False
    assert has_names('# HELP x\nvllm:num_requests_running{model_name="m"} 1\n', "vllm")
    assert has_names("sglang_num_queue_reqs 1\n", "sglang")
    assert not has_names("python_gc_objects_collected_total 1\nnot vllm: here\n", "vllm")


def test_a_parse_past_its_deadline_stops() -> None:
    body = lines(RUNNING + '{{engine="{i}",model_name="m"}} 1', 10_000)
    with pytest.raises(ParseTimeout):
        parse(body, "vllm", deadline=time.monotonic() - 1)
    assert parse(body, "vllm", deadline=time.monotonic() + 3600).dropped == {"dp_rank": 9936}


def test_exemplars_do_not_hide_a_duplicate() -> None:
    sample = f'{TTFT}_bucket{{engine="0",le="0.1",model_name="m"}} 1'
    body = f'{sample} # {{trace_id="a"}} 0.05\n{sample} # {{trace_id="b"}} 0.07\n'
    with pytest.raises(ParseError, match="line 2: the same series again"):
        parse(body, "vllm")
