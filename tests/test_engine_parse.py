"""The engine mapping table and the exposition parser, without HTTP."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from exporter import metrics
from exporter.checks.engine import table
from exporter.checks.engine.parse import HistogramValue, ParseError, Snapshot, detect, parse
from exporter.checks.engine.table import FORMATS, SOURCES, Source, sources_for
from exporter.config.models import EngineLimits
from tests.support.engine_fixtures import (
    assert_same,
    expected_samples,
    triton_fixture_blocks,
    vllm_fixture,
)
from tests.support.samples import SampleKey, key, snapshot_samples

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def one(snapshot: Snapshot, family: metrics.Family) -> float | HistogramValue:
    series = snapshot.series[family]
    assert len(series) == 1, series
    return next(iter(series.values()))


# --- fixtures ------------------------------------------------------------------------------


def test_vllm_fixture_equals_source_bucket_by_bucket() -> None:
    text = vllm_fixture()
    # The oracle's parser cannot read the line the docs cut short; ours skips it unread.
    oracle_text = "\n".join(line for line in text.splitlines() if ",...}" not in line)
    snap = parse(text.encode(), "vllm")
    assert_same(snapshot_samples(snap), expected_samples(oracle_text, "vllm", "t"))
    # Block 4 (docs/usage/metrics.md) is another server's vllm:iteration_tokens_total, now
    # read as llm_engine_step_tokens.
    assert set(snap.models) == {MODEL, "unsloth/Llama-3.2-1B-Instruct"}
    ttft = one(snap, metrics.ENGINE_TTFT)
    assert isinstance(ttft, HistogramValue)
    # The doc sample has _count but no +Inf bucket and no _sum: +Inf is restored from
    # _count, _sum stays absent rather than becoming 0.
    assert ttft.buckets[math.inf] == 140.0 and ttft.count == 140.0 and ttft.sum is None
    # Families the sample does not carry are absent, not zero.
    for absent in (metrics.ENGINE_KV_CACHE_USAGE, metrics.ENGINE_REQUESTS_WAITING,
                   metrics.ENGINE_PROMPT_TOKENS, metrics.ENGINE_E2E):
        assert absent not in snap.series


@pytest.mark.parametrize("block", ["A", "B"])
def test_triton_fixture_equals_source(block: str) -> None:
    text = triton_fixture_blocks()[block]
    snap = parse(text, "triton")
    assert_same(snapshot_samples(snap), expected_samples(text, "triton", "t"))
    if block == "A":
        # The older backend has neither a waiting count nor a KV fraction: absent.
        assert metrics.ENGINE_REQUESTS_WAITING not in snap.series
        assert metrics.ENGINE_KV_CACHE_USAGE not in snap.series
        assert one(snap, metrics.ENGINE_QUEUE_DURATION) == 0.0
    else:
        assert one(snap, metrics.ENGINE_KV_CACHE_USAGE) == 0.4875
        assert one(snap, metrics.ENGINE_REQUESTS_WAITING) == 1.0


def test_detect_from_names() -> None:
    assert detect(vllm_fixture()) == "vllm"
    assert detect(triton_fixture_blocks()["A"]) == "triton"
    assert detect('# TYPE x gauge\nsglang_token_usage{model_name="m"} 0.5\n') == "sglang"
    assert detect('sglang:num_queue_reqs{model_name="m"} 3\n') == "sglang"
    assert detect("trtllm_num_requests_waiting 2\n") == "trtllm"
    assert detect('nv_inference_request_success{model="m",version="1"} 2\n') == "triton"
    # A prefix inside HELP text or a label value is not a family.
    assert detect('# HELP x mentions vllm:num_requests_running\nx{a="vllm:y"} 1\n') is None
    assert detect("<html><body>vllm:</body></html>") is None


# --- vLLM renames ---------------------------------------------------------------------------

OLD_AND_NEW = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.25
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.26
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1001.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 501.0
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 500.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 3.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 9.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 9.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 0.5
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="m"} 3.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 8.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="m"} 8.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.4
"""


def test_old_and_new_vllm_names_together_are_not_doubled() -> None:
    snap = parse(OLD_AND_NEW, "vllm")
    # The current name wins whichever comes first; nothing is summed across the two.
    assert one(snap, metrics.ENGINE_KV_CACHE_USAGE) == 0.26
    assert one(snap, metrics.ENGINE_PREFIX_CACHE_QUERIES) == 1001.0
    assert one(snap, metrics.ENGINE_PREFIX_CACHE_HITS) == 501.0
    itl = one(snap, metrics.ENGINE_ITL)
    assert isinstance(itl, HistogramValue)
    assert itl.buckets == {0.01: 3.0, math.inf: 9.0} and itl.count == 9.0 and itl.sum == 0.5


def test_old_vllm_names_alone_are_read() -> None:
    old_only = "\n".join(
        line for line in OLD_AND_NEW.splitlines()
        if "gpu_" in line or "time_per_output" in line
    )
    snap = parse(old_only, "vllm")
    assert one(snap, metrics.ENGINE_KV_CACHE_USAGE) == 0.25
    assert one(snap, metrics.ENGINE_PREFIX_CACHE_QUERIES) == 1000.0
    assert one(snap, metrics.ENGINE_PREFIX_CACHE_HITS) == 500.0
    itl = one(snap, metrics.ENGINE_ITL)
    assert isinstance(itl, HistogramValue)
    assert itl.buckets == {0.01: 3.0, math.inf: 8.0} and itl.sum == 0.4


# --- exposition syntax ----------------------------------------------------------------------


def test_escaped_label_values() -> None:
    body = (
        'vllm:num_requests_running{engine="1",model_name="a\\"b\\\\c\\nd,e}=f"} 3\n'
        'vllm:num_requests_running{model_name="plain, with } and = inside",engine="0"} 4\n'
    )
    snap = parse(body, "vllm")
    assert snap.series[metrics.ENGINE_REQUESTS_RUNNING] == {
        ('a"b\\c\nd,e}=f', "1"): 3.0,
        ("plain, with } and = inside", "0"): 4.0,
    }


def test_special_values_timestamps_exemplars_created_and_eof() -> None:
    body = (
        "# HELP vllm:num_requests_waiting help with vllm:num_requests_running in it\r\n"
        "# TYPE vllm:num_requests_waiting gauge\r\n"
        'vllm:num_requests_waiting{model_name="nan"} NaN\r\n'
        'vllm:num_requests_waiting{model_name="inf"} +Inf 1700000000000\r\n'
        'vllm:num_requests_waiting{model_name="neg"} -Inf\r\n'
        'vllm:num_requests_waiting{model_name="exp"} 1.5e3\r\n'
        "vllm:prompt_tokens_total\t42\n"
        "vllm:prompt_tokens_created 1.7e9\n"
        'vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 2 # {trace_id="x"} 0.7\n'
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 5\n'
        'vllm:e2e_request_latency_seconds_count{model_name="m"} 5\n'
        'vllm:e2e_request_latency_seconds_sum{model_name="m"} 9.5\n'
        'vllm:e2e_request_latency_seconds_created{model_name="m"} 1.7e9\n'
        "# EOF\n"
        'vllm:num_requests_running{model_name="after-eof"} 1\n'
    )
    snap = parse(body, "vllm")
    waiting = snap.series[metrics.ENGINE_REQUESTS_WAITING]
    assert math.isnan(waiting[("nan", "")])  # type: ignore[arg-type]
    assert waiting[("inf", "")] == math.inf
    assert waiting[("neg", "")] == -math.inf
    assert waiting[("exp", "")] == 1500.0
    assert snap.series[metrics.ENGINE_PROMPT_TOKENS] == {("", ""): 42.0}
    e2e = one(snap, metrics.ENGINE_E2E)
    assert isinstance(e2e, HistogramValue)
    assert e2e.buckets == {1.0: 2.0, math.inf: 5.0} and e2e.count == 5.0 and e2e.sum == 9.5
    assert metrics.ENGINE_REQUESTS_RUNNING not in snap.series


@pytest.mark.parametrize(
    "line",
    [
        'vllm:num_requests_running{model_name="m" 3',
        'vllm:num_requests_running{model_name="m"}',
        'vllm:num_requests_running{model_name="m"} three',
        'vllm:num_requests_running{model_name="m"} 3 yesterday',
        'vllm:num_requests_running{model_name=m} 3',
        'vllm:num_requests_running{model_name="m} 3',
        'vllm:num_requests_running{model_name="m",,engine="0"} 3',
        'vllm:e2e_request_latency_seconds_bucket{model_name="m"} 3',
        'vllm:e2e_request_latency_seconds_bucket{le="soon",model_name="m"} 3',
        'vllm:num_requests_running{model_name="a\\"} 3',
    ],
)
def test_malformed_mapped_line_fails_the_parse(line: str) -> None:
    with pytest.raises(ParseError, match="line 2"):
        parse(f"# TYPE x gauge\n{line}\n", "vllm")


def test_unmapped_lines_are_not_read() -> None:
    body = (
        'vllm:cache_config_info{block_size="16",...} 1.0\n'
        "garbage that is { not exposition\n"
        'vllm:num_requests_running{model_name="m"} 2\n'
    )
    assert parse(body, "vllm").series[metrics.ENGINE_REQUESTS_RUNNING] == {("m", ""): 2.0}


def test_invalid_utf8_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="UTF-8"):
        parse(b'vllm:num_requests_running{model_name="\xff"} 1\n', "vllm")


# --- normalization ---------------------------------------------------------------------------


def test_triton_microseconds_become_seconds() -> None:
    body = (
        'nv_inference_queue_duration_us{model="llm",version="1"} 1500000\n'
        'nv_inference_request_duration_us{model="llm",version="1"} 12345678\n'
        'nv_inference_compute_infer_duration_us{model="llm",version="1"} 7\n'
        'nv_inference_request_success{model="llm",version="1"} 9\n'
        'nv_inference_request_failure{model="llm",reason="REJECTED",version="1"} 2\n'
        'nv_inference_request_failure{model="llm",reason="CANCELED",version="1"} 3\n'
        'nv_trt_llm_request_metrics{model="llm",request_type="max",version="1"} 512\n'
    )
    snap = parse(body, "triton")
    assert math.isclose(one(snap, metrics.ENGINE_QUEUE_DURATION), 1.5)  # type: ignore[arg-type]
    assert math.isclose(
        one(snap, metrics.ENGINE_REQUEST_DURATION), 12.345678  # type: ignore[arg-type]
    )
    assert math.isclose(one(snap, metrics.ENGINE_COMPUTE_DURATION), 7e-6)  # type: ignore[arg-type]
    assert one(snap, metrics.ENGINE_REQUESTS_SUCCEEDED) == 9.0
    assert one(snap, metrics.ENGINE_REQUESTS_FAILED) == 5.0  # summed over reason
    # request_type="max" is a capacity, not a running count.
    assert metrics.ENGINE_REQUESTS_RUNNING not in snap.series


def test_sglang_dropped_labels_merge_and_alias_prefix() -> None:
    body = (
        'sglang_num_running_reqs{model_name="q",tp_rank="0",dp_rank="1"} 7\n'
        'sglang_num_running_reqs{model_name="q",tp_rank="1",dp_rank="1"} 7\n'
        'sglang:token_usage{model_name="q",tp_rank="0"} 0.5\n'
        'sglang:token_usage{model_name="q",tp_rank="1"} 0.6\n'
        'sglang:cached_tokens_total{model_name="q",cache_source="device"} 100\n'
        'sglang:cached_tokens_total{model_name="q",cache_source="host"} 20\n'
        'sglang:time_to_first_token_seconds_bucket{model_name="q",is_streaming="true",le="0.1"} 1\n'
        'sglang:time_to_first_token_seconds_bucket{model_name="q",is_streaming="true",le="+Inf"} 4\n'
        'sglang:time_to_first_token_seconds_count{model_name="q",is_streaming="true"} 4\n'
        'sglang:time_to_first_token_seconds_sum{model_name="q",is_streaming="true"} 1.0\n'
        'sglang:time_to_first_token_seconds_bucket{model_name="q",is_streaming="false",le="0.1"} 2\n'
        'sglang:time_to_first_token_seconds_bucket{model_name="q",is_streaming="false",le="+Inf"} 3\n'
        'sglang:time_to_first_token_seconds_count{model_name="q",is_streaming="false"} 3\n'
        'sglang:time_to_first_token_seconds_sum{model_name="q",is_streaming="false"} 0.5\n'
    )
    snap = parse(body, "sglang")
    # Ranks of one TP group report the same scheduler state: max, not sum.
    assert snap.series[metrics.ENGINE_REQUESTS_RUNNING] == {("q", "1"): 7.0}
    assert snap.series[metrics.ENGINE_KV_CACHE_USAGE] == {("q", ""): 0.6}
    # Counters and histograms split by a dropped label are partitions: summed.
    assert snap.series[metrics.ENGINE_PREFIX_CACHE_HITS] == {("q", ""): 120.0}
    ttft = one(snap, metrics.ENGINE_TTFT)
    assert isinstance(ttft, HistogramValue)
    assert ttft.buckets == {0.1: 3.0, math.inf: 7.0} and ttft.count == 7.0 and ttft.sum == 1.5


def _models_body(models: list[str]) -> str:
    return "".join(
        f'vllm:num_requests_running{{engine="0",model_name="{m}"}} 1\n'
        f'vllm:num_requests_waiting{{engine="0",model_name="{m}"}} 2\n'
        for m in models
    )


def test_model_cap_keeps_admitted_models_and_counts_drops() -> None:
    first = [f"m{i:02d}" for i in range(25)]
    snap = parse(_models_body(first), "vllm")
    assert snap.models == tuple(first[:20])
    assert snap.dropped["model"] == 5 * 2  # 5 models x 2 families
    assert set(snap.series[metrics.ENGINE_REQUESTS_RUNNING]) == {(m, "0") for m in first[:20]}
    # A newcomer that sorts first does not displace a model that already has history...
    second = ["a-new", *first[:20]]
    again = parse(_models_body(second), "vllm", keep=snap.kept)
    assert again.models == snap.models and again.dropped == {"model": 2}
    # ...but takes the place of one that went away.
    third = ["a-new", *first[1:20]]
    after = parse(_models_body(third), "vllm", keep=again.kept)
    assert "a-new" in after.models and "m00" not in after.models and after.dropped == {}


# --- the table ------------------------------------------------------------------------------


def test_table_rows_are_consistent() -> None:
    seen = Counter((s.engine, s.name, tuple(sorted(s.match.items()))) for s in SOURCES)
    assert [k for k, n in seen.items() if n > 1] == []
    for src in SOURCES:
        assert src.kind == src.target.kind, src
        assert src.target is metrics.SCHEMA[src.target.name], src
        assert src.target.section == "engine", src
        assert set(src.labels.values()) <= set(src.target.labels) - {"target", "engine"}, src
        # A row without the engine's prefix is its API server's own process family: one
        # series, no model; every other row is per model.
        if src.name.startswith(table.PREFIXES[src.engine]):
            assert "model" in src.labels.values(), src
        else:
            assert src.name.startswith("process_") and not src.labels, src
        assert src.scale > 0
        if src.kind is metrics.Kind.HISTOGRAM:
            assert not src.name.endswith(("_bucket", "_sum", "_count")), src


def test_sources_for_gives_one_row_per_family_per_format() -> None:
    for fmt in FORMATS:
        rows = sources_for(fmt)
        targets = [s.target.name for s in rows]
        assert len(targets) == len(set(targets)), (fmt, targets)
    names = {fmt: {s.name for s in sources_for(fmt)} for fmt in FORMATS}
    legacy = {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries_total",
              "vllm:gpu_prefix_cache_hits_total", "vllm:time_per_output_token_seconds"}
    assert legacy <= names["vllm-legacy"] and not legacy & names["vllm"]
    assert {"vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds"} <= names["vllm"]
    assert "vllm:num_requests_running" in names["vllm-legacy"]
    assert len(sources_for("vllm")) == len(sources_for("vllm-legacy"))
    with pytest.raises(ValueError):
        sources_for("tgi")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _line(name: str, labels: dict[str, str], value: float) -> str:
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{text}}} {value!r}"


def _render(rows: list[Source], models: list[str]) -> tuple[str, dict[SampleKey, float]]:
    """Invert the rows the way the simulator does: value / scale, labels renamed back,
    ``match`` labels added. Returns the exposition and the normalized samples it encodes."""
    lines: list[str] = []
    want: dict[SampleKey, float] = {}
    for i, src in enumerate(rows):
        back = {norm: source for source, norm in src.labels.items()}
        ranks = ["0", "1"] if "dp_rank" in back else [""]
        # A label beyond model and dp_rank (finished_reason, reason, source): two values.
        extra = next((n for n in src.target.labels if n not in metrics.ENGINE_SERIES_LABELS),
                     "finished_reason")
        reasons = ["stop", "length"] if extra in back else [""]
        # The API server's own process families carry no model: one series.
        served = models if "model" in back else [""]
        lines.append(f"# TYPE {src.name} {src.kind}")
        for j, (model, rank, reason) in enumerate(
            (m, r, f) for m in served for r in ranks for f in reasons
        ):
            norm = {"model": model, "dp_rank": rank}
            if reason:
                norm[extra] = reason
            source = {back[k]: v for k, v in norm.items() if k in back and v}
            source.update(src.match)
            labels = {"target": "t", "engine": src.engine, **norm}
            if extra in src.target.labels and not reason:
                labels[extra] = ""

            base = 100.0 * i + j + 0.25
            if src.kind is metrics.Kind.HISTOGRAM:
                name = src.target.name
                for le, count in ((0.1, base), (2.5, base + 3), (math.inf, base + 5)):
                    le_text = "+Inf" if le == math.inf else repr(le)
                    lines.append(_line(src.name + "_bucket", {**source, "le": le_text}, count))
                    want[key(name + "_bucket", {**labels, "le": repr(le * src.scale)})] = count
                lines.append(_line(src.name + "_count", source, base + 5))
                lines.append(_line(src.name + "_sum", source, base * 7 / src.scale))
                want[key(name + "_count", labels)] = base + 5
                want[key(name + "_sum", labels)] = base * 7
            else:
                lines.append(_line(src.name, source, base / src.scale))
                want[key(src.target.name, labels)] = base
        if src.match:
            # A sibling series of the same source family that no row selects.
            other = {k: f"not-{v}" for k, v in src.match.items()}
            text = ",".join(f'{k}="{v}"' for k, v in {**other, back["model"]: "x"}.items())
            lines.append(f"{src.name}{{{text}}} 999")
    return "\n".join(lines) + "\n", want


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_round_trips_through_the_table(fmt: str) -> None:
    rows = sources_for(fmt)
    body, want = _render(rows, ["model-a", 'odd "model"\\b'])
    engine = fmt.removesuffix("-legacy")
    assert detect(body) == engine
    snap = parse(body, engine, EngineLimits(max_models=10))
    got = snapshot_samples(snap)
    assert got.keys() == want.keys()
    for k, value in want.items():
        assert math.isclose(got[k], value, rel_tol=1e-12), (k, got[k], value)
    # Every normalized family the format provides came through.
    assert {f.name for f in snap.series} == {s.target.name for s in rows}
