"""voice_stack_bench.endpoint.report: the cut-off corpus bench's arithmetic, here with a turn
that failed: it is listed and counted, and left out of every figure and goal."""

from __future__ import annotations

from typing import Any

from voice_stack_bench.endpoint.corpus import Entry, Spoken
from voice_stack_bench.endpoint.report import report

CLASSES = {"complete": "a", "pause_cannot_end": "b", "pause_looks_complete": "c"}


def _spoken(id_: str, kind: str, pause_ms: int) -> Spoken:
    parts = ("Turn on the", "kitchen light.") if pause_ms else ("Turn on the kitchen light.",)
    spans = ((0.0, 500.0), (500.0 + pause_ms, 1000.0 + pause_ms)) if pause_ms else ((0.0, 900.0),)
    return Spoken(Entry(id_, kind, parts, pause_ms), b"", spans, tuple((0.0, 0.0) for _ in parts))


def _row(ended_ms: float, cut: bool, by: str = "ha_hold") -> dict[str, Any]:
    return {"ended_ms": ended_ms, "after_pause_ms": ended_ms + 500, "transcript_ms": ended_ms + 100,
            "by": by, "cut_short": cut, "transcript": "x", "exact": False, "wer": 1.0}  # fmt: skip


def test_a_failed_turn_is_listed_and_left_out() -> None:
    spoken = [_spoken("a01", "complete", 0), _spoken("a02", "complete", 0),
              _spoken("b01", "pause_cannot_end", 900), _spoken("b02", "pause_cannot_end", 1200),
              _spoken("c01", "pause_looks_complete", 900)]  # fmt: skip
    error = {"error": "RuntimeError: the gateway answered an error: backend-timeout"}
    results = {
        "a01": {"ha_0.7": _row(1200, False), "gateway_400": _row(400, False, "gateway")},
        "a02": {"ha_0.7": _row(1300, False), "gateway_400": error},
        "b01": {"ha_0.7": _row(-100, True), "gateway_400": _row(-100, True)},
        # HA's hold cut b02, the gateway's turn failed: HA's cut is left out of the comparison
        "b02": {"ha_0.7": _row(-200, True), "gateway_400": error},
        "c01": {"ha_0.7": _row(-100, True), "gateway_400": _row(-300, True, "gateway")},
    }
    settings = {"ha_0.7": "HA's hold", "gateway_400": "the gateway"}
    doc = report(spoken, results, settings, CLASSES, 300)
    assert doc["errors"] == [
        {"id": "a02", "setting": "gateway_400", "error": error["error"]},
        {"id": "b02", "setting": "gateway_400", "error": error["error"]},
    ]
    assert doc["goals"]["errors"] == 2
    complete = doc["by_class"]["gateway_400"]["complete"]
    assert (complete["n"], complete["errors"], complete["ended_ms"]["median"]) == (1, 1, 400)
    ratio = doc["goals"]["complete_last_word_to_transcript_ratio"]["gateway_400"]
    assert ratio["median_ms"] == 500  # the completed turn's transcript, over HA's median
    assert ratio["vs_ha_0.7_then_stt"] == round(500 / 1350, 3)
    cuts = doc["goals"]["cannot_end_cut_short"]
    assert cuts["cut_short"] == {"ha_0.7": 2, "gateway_400": 1}
    assert cuts["errors"] == {"gateway_400": 1}
    assert cuts["gateway_400_on_the_same"] == {"n": 1, "cut_short": 1, "ha_0.7": 1}
    assert cuts["gateway_400_met"] is True


def test_a_class_with_every_turn_failed() -> None:
    spoken = [_spoken("a01", "complete", 0)]
    results = {"a01": {"ha_0.7": _row(1200, False), "gateway_400": {"error": "TimeoutError: "}}}
    doc = report(spoken, results, {"ha_0.7": "", "gateway_400": ""}, CLASSES, 300)
    assert doc["by_class"]["gateway_400"]["complete"] == {"n": 0, "errors": 1}
    ratio = doc["goals"]["complete_last_word_to_transcript_ratio"]["gateway_400"]
    assert (ratio["median_ms"], ratio["met"]) == (None, False)
