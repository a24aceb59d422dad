"""Which llama-server slot ran which request, from its own `/slots` listings.

Every request llama-server takes gets the next task id (`id_task`), and a slot shows the task it
runs or ran last with its sampling parameters. The agents' requests are told apart from the
browsers' and from warm-up primes by their `n_predict` (the agents' maximum reply length).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

type Json = dict[str, Any]


@dataclass(frozen=True)
class SlotSample:
    """One `/slots` listing and when it was read."""

    at: datetime
    slots: list[Json]


@dataclass(frozen=True)
class TaskSpan:
    """A task of an agent: its slot and the first listing that showed it there."""

    task: int
    slot: int
    first_seen: datetime


def max_task(slots: list[Json]) -> int:
    """The newest task id in a listing (-1 when no slot has run anything)."""
    tasks = [s["id_task"] for s in slots if isinstance(s.get("id_task"), int)]
    return max(tasks, default=-1)


def _n_predict(slot: Json) -> int | None:
    params = slot.get("params") or {}
    value = params.get("n_predict", params.get("max_tokens"))
    return value if isinstance(value, int) else None


def task_spans(samples: list[SlotSample], after_task: int, n_predict: int) -> list[TaskSpan]:
    """The agents' tasks newer than `after_task`, oldest first (the order they arrived in)."""
    spans: dict[int, TaskSpan] = {}
    for sample in samples:
        for slot in sample.slots:
            task = slot.get("id_task")
            if not isinstance(task, int) or task <= after_task or task in spans:
                continue
            if _n_predict(slot) == n_predict and isinstance(slot.get("id"), int):
                spans[task] = TaskSpan(task, slot["id"], sample.at)
    return sorted(spans.values(), key=lambda span: span.task)
