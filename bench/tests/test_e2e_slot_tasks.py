"""voice_stack_bench.e2e.slot_tasks: which slot ran which agent request, from /slots listings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from voice_stack_bench.e2e.slot_tasks import SlotSample, max_task, task_spans

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def _slot(slot: int, task: int, n_predict: int) -> dict[str, object]:
    return {"id": slot, "id_task": task, "params": {"n_predict": n_predict, "max_tokens": 1}}


def test_newest_task_of_a_listing() -> None:
    assert max_task([_slot(0, 7, 64), _slot(1, 12, 4), {"id": 2, "id_task": None}]) == 12
    assert max_task([]) == -1


def test_agent_tasks_newer_than_before_in_arrival_order_with_first_sight() -> None:
    samples = [
        SlotSample(T0, [_slot(0, 5, 64), _slot(1, 9, 4)]),
        SlotSample(T0 + timedelta(milliseconds=100), [_slot(0, 11, 64), _slot(1, 10, 0)]),
        SlotSample(T0 + timedelta(milliseconds=200), [_slot(0, 11, 64), _slot(1, 12, 64)]),
        SlotSample(T0 + timedelta(milliseconds=300), [_slot(0, 13, 64), _slot(1, 12, 64)]),
    ]
    spans = task_spans(samples, after_task=9, n_predict=64)
    # task 5 is older, 10 is a warm-up prime (n_predict 0): neither is an agent request here
    assert [(s.task, s.slot) for s in spans] == [(11, 0), (12, 1), (13, 0)]
    assert spans[1].first_seen == T0 + timedelta(milliseconds=200)


def test_max_tokens_stands_in_for_n_predict_and_junk_is_skipped() -> None:
    listing: list[dict[str, object]] = [
        {"id": 3, "id_task": 20, "params": {"max_tokens": 64}},
        {"id": "x", "id_task": 21, "params": {"n_predict": 64}},
        {"id": 1, "id_task": "22", "params": {"n_predict": 64}},
    ]
    spans = task_spans([SlotSample(T0, listing)], after_task=0, n_predict=64)
    assert [(s.task, s.slot) for s in spans] == [(20, 3)]
