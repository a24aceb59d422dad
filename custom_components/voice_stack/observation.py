"""What one poll of llama-server shows about the slots this entry uses, and which of them lost
their primed prefix since the server was last seen ready (no I/O, so it tests in isolation)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .llama_data import LlamaData
from .slots import SlotScheduler


@dataclass(frozen=True, slots=True)
class Observation:
    """One poll, as the warm-up sees it."""

    ready: bool
    process: str | None  # llama-server's media marker: new at every start
    tasks: Mapping[int, int | None]  # slot -> latest task id on it
    sent: Mapping[int, int]  # slot -> requests Voice Stack had sent to it when /slots was read
    busy: frozenset[int]  # slots with one of our requests in flight


def observe(
    data: LlamaData | None, reachable: bool, scheduler: SlotScheduler, slots: set[int]
) -> Observation:
    """Snapshot one poll; our requests are counted as of the moment /slots was asked for."""
    if not (reachable and data is not None and not data.loading and data.props is not None):
        return Observation(False, None, {}, {}, frozenset())
    summary = data.slots
    tasks: dict[int, int | None] = {}
    if summary is not None:
        tasks = {s: (info.id_task if (info := summary.slot(s)) else None) for s in slots}
    return Observation(
        ready=True,
        process=data.props.process,
        tasks=tasks,
        sent={s: scheduler.sent_before(s, data.polled_at) for s in slots},
        busy=frozenset(s for s in slots if scheduler.busy(s)),
    )


def is_new_process(last_ready: Observation | None, now: Observation) -> bool:
    """The server started again since it was last seen ready (its KV cache is gone)."""
    if last_ready is None or not now.ready:
        return False
    return now.process is None or now.process != last_ready.process


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
