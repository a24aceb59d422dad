"""What one poll of llama-server shows about the slots this entry uses, and which of them lost
their primed prefix since the server was last seen ready (no I/O, so it tests in isolation).

A restart is read from evidence, never from a missing field. What a server reports varies by
build and flags: `/props` `media_marker` is random per process since 2026-04 but absent before
and pinned by LLAMA_MEDIA_MARKER; `/metrics` (with `--metrics`) has counters that only grow
within one process and a Process-Start-Time-Unix header fixed for the process; `/slots` (on
unless `--no-slots`) shows on each slot the latest task it ran, which stays there for the life
of the process (older builds show -1 for a slot that never ran one). Each of them, when both
polls have it, either proves a new process or says nothing; none can fire on a steady server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .payloads import Counters, LlamaData
from .slots import SlotScheduler


@dataclass(frozen=True, slots=True)
class Observation:
    """One poll, as the warm-up sees it."""

    ready: bool
    process: str | None  # llama-server's media marker (None: this build or setup has none)
    tasks: Mapping[int, int | None]  # slot -> latest task id on it (None: none since start)
    sent: Mapping[int, int]  # slot -> requests Voice Stack had sent to it when /slots was read
    busy: frozenset[int]  # slots with one of our requests in flight
    started: str | None = None  # /metrics' process start token (None: no --metrics, or hidden)
    counters: Counters | None = None  # /metrics' counters (None: no --metrics)


def observe(
    data: LlamaData | None, reachable: bool, scheduler: SlotScheduler, slots: set[int]
) -> Observation:
    """Snapshot one poll; our requests are counted as of the moment /slots was asked for."""
    if not (reachable and data is not None and not data.loading and data.props is not None):
        return Observation(False, None, {}, {}, frozenset())
    summary = data.slots
    tasks: dict[int, int | None] = {}
    if summary is not None:
        tasks = {s: _task(info.id_task if (info := summary.slot(s)) else None) for s in slots}
    return Observation(
        ready=True,
        process=data.props.process,
        tasks=tasks,
        sent={s: scheduler.sent_before(s, data.polled_at) for s in slots},
        busy=frozenset(s for s in slots if scheduler.busy(s)),
        started=data.started,
        counters=data.counters,
    )


def _task(id_task: int | None) -> int | None:
    return id_task if id_task is not None and id_task >= 0 else None


def _changed(before: str | None, now: str | None) -> bool:
    return before is not None and now is not None and before != now


def _task_lost(before: Mapping[int, int | None], now: Mapping[int, int | None]) -> bool:
    """A slot that had run a task shows none: only a new process forgets it."""
    return any(
        task is not None and slot in now and now[slot] is None for slot, task in before.items()
    )


def is_new_process(last_ready: Observation | None, now: Observation) -> bool:
    """The server started again since it was last seen ready (its KV cache is gone)."""
    if last_ready is None or not now.ready:
        return False
    counters_back = (
        last_ready.counters is not None
        and now.counters is not None
        and now.counters.went_back(last_ready.counters)
    )
    return (
        _changed(last_ready.process, now.process)
        or _changed(last_ready.started, now.started)
        or counters_back
        or _task_lost(last_ready.tasks, now.tasks)
    )


def slots_to_warm(last_ready: Observation | None, now: Observation, slots: set[int]) -> set[int]:
    """The slots that lost (or never had) their primed prefix since the last ready poll.

    A server that was merely unreachable (a proxy restart, the network) keeps its cache: only
    a new process, or a task on a slot that Voice Stack did not send, calls for a warm-up.
    """
    if not now.ready:
        return set()
    if last_ready is None or is_new_process(last_ready, now):
        return set(slots)
    return {
        slot
        for slot in slots
        if now.tasks.get(slot) != last_ready.tasks.get(slot)
        and now.sent.get(slot) == last_ready.sent.get(slot)
        and slot not in last_ready.busy | now.busy
    }
