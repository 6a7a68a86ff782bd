"""Recorded names: exporter/metrics/names.py writes each one out once; here each is held
to ``level:metric:operations``, its metric part to the metric schema, and the module to
what the recording rules record."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from exporter import metrics
from exporter.metrics import ProbeOutcome, names
from exporter.metrics.names import RATE, PeakSeries, Quantiles
from exporter.monitoring import generate
from exporter.monitoring.recording import goodput_windows
from tests.support.generated import example, rules_of

NAME = re.compile(r"(?P<level>[a-z_]+):(?P<metric>[a-z0-9_]+):(?P<operations>[a-z0-9_]+)")
LEVELS = {level.name for level in (names.PROBE, names.MODEL, names.PATH, names.ROUTE,
                                   names.CARRIER)}
OPERATIONS = re.compile(
    rf"(p(50|95|99)_rate{RATE}(_peak|_offpeak)?|p95_offpeak_baseline"
    rf"|rate{RATE}_offpeak|share_rate{RATE}|ratio_rate[0-9]+[smhd](_peak|_offpeak)?"
    r"|ratio_offpeak_baseline|rank)"
)


def declared() -> list[str]:
    """Every name names.py writes out (goodput for the example config's windows)."""
    found: list[str] = []
    for value in vars(names).values():
        if isinstance(value, str) and NAME.fullmatch(value):
            found.append(value)
        elif isinstance(value, Quantiles):
            found += [name for _, name in value.by_quantile()]
        elif isinstance(value, PeakSeries):
            found += [value.peak, value.offpeak_buckets, value.offpeak, value.baseline]
    found += [names.probe_goodput(w) for w in goodput_windows(example())]
    return found


def _packets_lost() -> str:
    sent, received = metrics.PATH_PACKETS_SENT.base, metrics.PATH_PACKETS_RECEIVED.base
    packets = sent.removesuffix("_sent")
    assert received == f"{packets}_received"
    return f"{packets}_lost_per_sent"


def _retransmitted() -> str:
    sent = metrics.CLIENTS_SEGMENTS_SENT.base
    segments = sent.removesuffix("_sent")
    assert metrics.CLIENTS_SEGMENTS_RETRANSMITTED.base == f"{segments}_retransmitted"
    return f"{segments}_retransmitted_per_sent"


def _probe_segments(part: metrics.TcpSegments, whole: metrics.TcpSegments) -> str:
    return f"{metrics.PROBE_TCP_SEGMENTS.base}_{part.value}_per_{whole.value}"


def _inference() -> str:
    prefill = metrics.ENGINE_PREFILL_TIME.name.replace("prefill", "inference")
    assert prefill == metrics.ENGINE_DECODE_TIME.name.replace("decode", "inference")
    return prefill


_REQUESTS = metrics.PROBE_REQUESTS.base
# ..._per_requests: the last word of the family every probe request counts in.
_PER_REQUEST = f"_per_{_REQUESTS.rsplit('_', 1)[-1]}"
#: Metric parts that are no one family: a ratio or a sum of families, spelled from them.
DERIVED = {
    f"{_REQUESTS}_{ProbeOutcome.OK.value}{_PER_REQUEST}": "ok requests over requests",
    f"{metrics.PROBE_SLO_GOOD.base}{_PER_REQUEST}": "requests within the SLO over requests",
    _packets_lost(): "sent minus received over sent",
    _retransmitted(): "retransmitted segments over segments sent",
    _probe_segments(metrics.TcpSegments.RETRANSMITTED, metrics.TcpSegments.SENT):
        "the probes' retransmitted segments over those sent",
    _probe_segments(metrics.TcpSegments.OUT_OF_ORDER, metrics.TcpSegments.RECEIVED):
        "the probes' out-of-order segments over those received",
    _inference(): "prefill plus decode",
}
FAMILIES = {name for f in metrics.SCHEMA.values() for name in (f.name, f.base)}


@pytest.mark.parametrize("name", declared())
def test_each_name_is_level_metric_operations(name: str) -> None:
    m = NAME.fullmatch(name)
    assert m, name
    level, metric = m["level"], m["metric"]
    if level.endswith("_le"):
        # Bucket rates keep le on top of their level's labels.
        level, metric = level.removesuffix("_le"), metric.removesuffix("_bucket")
        assert metrics.SCHEMA[metric].kind is metrics.Kind.HISTOGRAM, name
    assert level in LEVELS, name
    assert metric in FAMILIES or metric in DERIVED, f"{name}: {metric} is in no schema family"
    assert OPERATIONS.fullmatch(m["operations"]), name


def test_quantile_and_peak_names_spell_their_level_and_family() -> None:
    for value in vars(names).values():
        if isinstance(value, Quantiles):
            stem = f"{value.level.name}:{value.family.name}"
            assert value.by_quantile() == tuple(
                (q, f"{stem}:p{q * 100:g}_rate{RATE}") for q in (0.5, 0.95, 0.99)
            )[:len(value.by_quantile())]
        elif isinstance(value, PeakSeries):
            level, family = value.level.name, value.family.name
            assert value.peak == f"{level}:{family}:p95_rate{RATE}_peak"
            assert value.offpeak_buckets == f"{level}_le:{family}_bucket:rate{RATE}_offpeak"
            assert value.offpeak == f"{level}:{family}:p95_rate{RATE}_offpeak"
            assert value.baseline == f"{level}:{family}:p95_offpeak_baseline"


def test_names_declares_exactly_what_is_recorded_once_each() -> None:
    names_ = declared()
    assert not [n for n, count in Counter(names_).items() if count > 1]
    recorded = {r["record"] for r in rules_of(generate.render(example())["rules/recording.yaml"])}
    assert set(names_) == recorded
