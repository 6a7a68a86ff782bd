"""The verdict hold (exporter/diagnosis/stability.py): sequences of the chain's own diagnoses
and what is shown after each. A new primary verdict shows only after ``confirm`` evaluations
in a row; until then the previous one stays, whole, with the candidate in ``pending``."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from importlib import resources

import jsonschema
import pytest

from exporter.config.load import parse_config
from exporter.diagnosis.chain import diagnose
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.remote import from_json
from exporter.diagnosis.result import Diagnosis
from exporter.diagnosis.stability import Hold, identity
from exporter.diagnosis.text import render
from tests.support.observations import AT, healthy, with_engine, with_path, with_probe

SCHEMA = json.loads(resources.files("exporter.diagnosis").joinpath("schema.json").read_text())
STEP = dt.timedelta(seconds=5)


def _at(obs: Observations, i: int) -> Observations:
    return replace(obs, at=AT + i * STEP)


#: Observations that the chain names as: healthy, engine slow prefill, mobile packet loss.
KINDS: dict[str, Observations] = {
    "H": healthy(),
    "P": with_probe(with_engine(healthy(), ttft_p95=2.2, prefill_seconds=600.0),
                    "chat", ttft_p95=2.4),
    "L": with_probe(with_path(healthy(), "mobile", lost=12), "chat-mobile", ttft_p95=1.8),
}
NAMED = {"H": ("healthy",), "P": ("engine", "slow_prefill", "engine=main"),
         "L": ("network", "packet_loss", "carrier=mobile", "target=gpu-sh")}


def run(sequence: str, confirm: int) -> list[tuple[str, int, str]]:
    """Feed the chain's diagnoses of ``sequence`` (one letter an evaluation) through a hold:
    per evaluation, the letter shown, the index of the evaluation it comes from, and the
    letter pending ("" when none)."""
    by_identity = {NAMED[k]: k for k in NAMED}
    hold = Hold()
    out = []
    for i, kind in enumerate(sequence):
        chained = diagnose(_at(KINDS[kind], i))
        assert identity(chained) == NAMED[kind], chained.verdicts[:1]
        shown = hold.update(chained, confirm)
        jsonschema.validate(shown.to_json(), SCHEMA, cls=jsonschema.Draft202012Validator)
        pending = ""
        if shown.pending is not None:
            p = shown.pending
            key: tuple[str, ...] = (p.status,)
            if p.verdict is not None:
                key = (p.verdict.layer, p.verdict.cause,
                       *(f"{k}={v}" for k, v in p.verdict.scope.items()))
            pending = by_identity[key]
            assert p.confirm == confirm and 1 <= p.evaluations < confirm
        out.append((by_identity[identity(shown)], (shown.at - AT) // STEP, pending))
    return out


def shown(sequence: str, confirm: int) -> str:
    return "".join(s for s, _, _ in run(sequence, confirm))


@pytest.mark.parametrize(("chained", "confirm", "expected"), [
    # healthy -> fault: the fault after three in a row; one wrong evaluation never shows.
    ("HHPPPPP", 3, "HHHHPPP"),
    ("HHPHHPP", 3, "HHHHHHH"),
    # fault -> healthy, and fault A -> fault B, wait the same way.
    ("PPPHHHH", 3, "PPPPPHH"),
    ("PPLLLPP", 3, "PPPPLLL"),
    # A candidate interrupted by another starts its count again.
    ("HPPLLLH", 3, "HHHHHLL"),
    # confirm 1: every evaluation as the chain concluded it.
    ("HPHLH", 1, "HPHLH"),
    # The first evaluation replaces "no evaluation yet" at once.
    ("PPH", 3, "PPP"),
])
def test_a_new_primary_shows_after_confirm_evaluations(chained: str, confirm: int,
                                                        expected: str) -> None:
    assert shown(chained, confirm) == expected


def test_the_held_diagnosis_is_the_previous_one_whole_and_says_what_is_pending() -> None:
    steps = run("HHPPP", 3)
    # While P waits, the shown one is the last healthy evaluation (index 1), not a fresh
    # diagnosis carrying an old verdict; once P holds, the newest evaluation shows.
    assert steps == [("H", 0, ""), ("H", 1, ""), ("H", 1, "P"), ("H", 1, "P"), ("P", 4, "")]
    hold = Hold()
    for i, kind in enumerate("HHP"):
        last: Diagnosis = hold.update(diagnose(_at(KINDS[kind], i)), 3)
    doc = last.to_json()
    assert doc["status"] == "healthy" and doc["verdicts"] == []
    assert doc["pending"]["status"] == "failing"
    assert doc["pending"]["verdict"]["cause"] == "slow_prefill"
    assert doc["pending"]["since"] == "2026-12-01T21:30:10Z"
    assert (doc["pending"]["evaluations"], doc["pending"]["confirm"]) == (1, 3)


def test_diagnose_reads_back_and_renders_what_is_pending() -> None:
    """``diagnose --exporter`` re-emits the API's document whole and says what waits."""
    hold = Hold()
    for i, kind in enumerate("PPL"):
        last = hold.update(diagnose(_at(KINDS[kind], i)), 2)
    assert last.pending is not None
    assert from_json(last.to_json()).to_json() == last.to_json()
    note = render(from_json(last.to_json()))
    assert ("Not yet confirmed: network/packet_loss, 1 of 2 evaluations in a row since "
            "2026-12-01T21:30:10+00:00") in note
    assert "Primary: engine/slow_prefill" in note


def test_the_same_primary_shows_each_evaluation_at_once() -> None:
    """Fresh numbers and a status change under the same primary are not a new verdict."""
    hold = Hold()
    worse = with_probe(KINDS["P"], "chat", ttft_p95=3.5)
    first = hold.update(diagnose(_at(KINDS["P"], 0)), 3)
    second = hold.update(diagnose(_at(worse, 1)), 3)
    assert second.pending is None and second.at == AT + STEP
    assert second.verdicts[0].summary != first.verdicts[0].summary


def test_confirm_is_configured_under_diagnosis() -> None:
    assert parse_config("").diagnosis.confirm == 2
    assert parse_config("diagnosis: {confirm: 1}").diagnosis.confirm == 1
    with pytest.raises(Exception, match="confirm"):
        parse_config("diagnosis: {confirm: 0}")
