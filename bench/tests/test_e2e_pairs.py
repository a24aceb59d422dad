"""voice_stack_bench.e2e.pairs: two satellites at once, their slots, overlap and the second's
wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from voice_stack_bench.e2e.pairs import (
    Satellite,
    pair_outcome,
    pairs_summary,
    two_satellites_goal,
)
from voice_stack_bench.e2e.slot_tasks import TaskSpan

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def _at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _satellite(start: float, first: float, end: float) -> Satellite:
    return Satellite(_at(start), _at(first), _at(end), first - start, 1000 + first)


def test_pooled_pair_runs_apart_and_overlaps() -> None:
    first, second = _satellite(0, 250, 1200), _satellite(350, 650, 1500)
    spans = [TaskSpan(40, 0, _at(20)), TaskSpan(41, 1, _at(400))]
    # given in any order: the one the agent got first is "first"
    out = pair_outcome([second, first], spans)
    assert out["first"]["slot"] == 0
    assert out["second"]["slot"] == 1
    assert out["second"]["wait_ms"] == 50.0
    assert out["different_slots"] is True
    assert out["second_started_while_first_streaming"] is True
    assert out["ttft_second_vs_first"] == 1.2


def test_one_slot_pair_waits_for_the_first_reply() -> None:
    first, second = _satellite(0, 250, 1200), _satellite(350, 1500, 2300)
    spans = [TaskSpan(40, 0, _at(20)), TaskSpan(41, 0, _at(1220))]
    out = pair_outcome([first, second], spans)
    assert out["different_slots"] is False
    assert out["second_started_while_first_streaming"] is False
    assert out["second"]["wait_ms"] == 870.0


def test_unseen_tasks_leave_slots_and_wait_unknown() -> None:
    out = pair_outcome([_satellite(0, 250, 1200), _satellite(350, 650, 1500)], [])
    assert out["first"]["slot"] is None
    assert out["second"]["wait_ms"] is None
    assert out["different_slots"] is False


def test_summary_and_goal_need_every_pair_apart_and_overlapping() -> None:
    good = pair_outcome(
        [_satellite(0, 250, 1200), _satellite(350, 650, 1500)],
        [TaskSpan(1, 0, _at(20)), TaskSpan(2, 1, _at(400))],
    )
    bad = pair_outcome(
        [_satellite(0, 250, 1200), _satellite(350, 1500, 2300)],
        [TaskSpan(3, 0, _at(20)), TaskSpan(4, 0, _at(1220))],
    )
    summary = pairs_summary([good, bad])
    assert summary["pairs"] == 2
    assert summary["on_different_slots"] == 1
    assert summary["second_wait_ms"] == 460.0  # median of 50 and 870
    assert two_satellites_goal(pairs_summary([good, good]))["met"] is True
    assert two_satellites_goal(summary)["met"] is False
    assert two_satellites_goal(pairs_summary([]))["met"] is False
