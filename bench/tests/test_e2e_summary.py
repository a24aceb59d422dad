"""voice_stack_bench.e2e.summary: medians, floors, ratios and goals of the end-to-end benchmark."""

from __future__ import annotations

from voice_stack_bench.e2e.summary import (
    FLOOR,
    OURS,
    STOCK,
    TOTAL,
    Sample,
    floor_total,
    single_requests,
    slot_counts,
)


def _sample(stack: str, kind: str, total: float, stt: float, floor: float, slot: int) -> Sample:
    parts = {TOTAL: total, "silence_hold_ms": 700.0, "stt_wait_ms": stt}
    return Sample(stack, kind, parts, {FLOOR: floor}, {"slot": slot, "prompt_tokens": 40.0})


def _run() -> list[Sample]:
    return [
        _sample(OURS, "new", 1000, 20, 1100, 0),
        _sample(OURS, "new", 1200, 40, 1100, 0),
        _sample(OURS, "follow_up", 1100, 30, 1000, 0),
        _sample(STOCK, "new", 2000, 400, 1100, 2),
        _sample(STOCK, "new", 2400, 400, 1100, 0),
        _sample(STOCK, "follow_up", 2200, 300, 1000, 3),
    ]


def test_floor_is_the_sum_of_its_parts_and_unknown_while_one_is_missing() -> None:
    parts = {"silence_hold_ms": 700.0, "asr_ms": 300.0, "llm_first_sentence_ms": 250.5}
    assert floor_total(parts) is None
    assert floor_total({**parts, "tts_first_byte_ms": 90.0}) == 1340.5


def test_blocks_per_stack_and_kind_with_ratios_to_stock_and_to_the_floor() -> None:
    report = single_requests(_run())
    ours = report[OURS]
    assert ours["all"][TOTAL] == {"median": 1100.0, "p90": 1200.0, "n": 3}
    assert ours["new"][TOTAL]["n"] == 2
    assert ours["follow_up"][TOTAL]["median"] == 1100.0
    assert ours["all"]["vs_floor"]["median"] == 1.0  # 1100 / 1100
    assert report[STOCK]["all"]["slots"] == {"0": 1, "2": 1, "3": 1}
    vs_stock = report["voice_stack_vs_stock"]["all"]
    assert vs_stock[TOTAL]["median"] == 0.5  # 1100 / 2200
    assert vs_stock["stt_wait_ms"]["median"] == 0.075  # 30 / 400
    assert vs_stock["agent_first_token_ms"] == {"median": None, "p90": None}  # not measured


def test_goals_are_met_only_within_their_limits() -> None:
    goals = single_requests(_run())["goals"]
    assert goals["first_audio_vs_stock"] == {"ratio": 0.5, "limit": 0.5, "met": True}
    assert goals["first_audio_vs_floor"]["met"] is True
    assert goals["stt_wait_vs_wyoming_openai"]["met"] is True
    slower = [_sample(OURS, "new", 1300, 60, 1100, 0), *(s for s in _run() if s.stack == STOCK)]
    goals = single_requests(slower)["goals"]
    assert goals["first_audio_vs_stock"] == {"ratio": 0.591, "limit": 0.5, "met": False}
    assert goals["first_audio_vs_floor"] == {"ratio": 1.182, "limit": 1.1, "met": False}
    assert goals["stt_wait_vs_wyoming_openai"] == {"ratio": 0.15, "limit": 0.1, "met": False}


def test_a_stack_without_samples_reports_no_ratio_and_misses_its_goals() -> None:
    report = single_requests([s for s in _run() if s.stack == OURS])
    assert report[STOCK]["all"][TOTAL] is None
    assert report["goals"]["first_audio_vs_stock"] == {"ratio": None, "limit": 0.5, "met": False}


def test_slots_it_could_not_see_are_counted_apart() -> None:
    samples = [Sample(OURS, "new", {}, {}, {"slot": None}), Sample(OURS, "new", {}, {}, {})]
    assert slot_counts(samples) == {"?": 2}
