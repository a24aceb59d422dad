"""llama-server's reserved slot, read from its /slots: when the slot began its first task after
a restart, and every prime the integration's warm-up sent it, so that the report can tell a
warm-up a restart called for from one that nothing did."""

from __future__ import annotations

import asyncio
import time

from voice_stack_dev.demo.observe import llama_slots
from voice_stack_dev.demo.services import RESERVED_SLOTS, Role

from .state import Fault, Soak, pause

WARM_UP_LIMIT_S = 120.0
PRIME_POLL_S = 0.25  # a prime followed at once by a voice turn may still be missed


async def first_task_s(soak: Soak, since: float) -> float | None:
    """Seconds from `since` until llama-server's reserved slot began its first task: the
    warm-up's prime, or a voice turn that came first (the prime gives way to a waiting turn by
    design, and the turn caches the same prefix); None within WARM_UP_LIMIT_S."""
    url, key = soak.servers.url(Role.LLAMA), soak.servers.state.llama_key
    deadline = time.monotonic() + WARM_UP_LIMIT_S
    while time.monotonic() < deadline:
        slots = {s.get("id"): s for s in await llama_slots(url, key)}
        task = (slots.get(RESERVED_SLOTS[0]) or {}).get("id_task")
        if isinstance(task, int) and task >= 0:  # a new process's slot shows -1 or nothing
            return round(soak.now() - since, 1)
        await asyncio.sleep(0.2)
    return None


async def watch_primes(soak: Soak) -> None:
    """The warm-up's primes on the reserved slot (a task with n_predict 0, what the
    integration's warm-up sends), from llama-server's /slots every PRIME_POLL_S."""
    url, key = soak.servers.url(Role.LLAMA), soak.servers.state.llama_key
    seen: set[tuple[int, int]] = set()  # (llama-server's pid, task): ids restart with it
    while not soak.done.is_set():
        service = soak.servers.stack.services.get(Role.LLAMA)
        pid = service.proc.pid if service is not None and service.proc is not None else 0
        for slot in await llama_slots(url, key):
            params = slot.get("params") or {}
            task = slot.get("id_task")
            if slot.get("id") not in RESERVED_SLOTS or not isinstance(task, int) or task < 0:
                continue
            if params.get("n_predict", params.get("max_tokens")) == 0 and (pid, task) not in seen:
                seen.add((pid, task))
                soak.primes.append(round(soak.now(), 1))
        await pause(soak, PRIME_POLL_S)


def primed_after(primes: list[float], fault: Fault) -> float | None:
    """Seconds from llama-server's return until the warm-up primed the agent's slot."""
    if fault.back is None:
        return None
    back = fault.back
    first = min((p for p in primes if back <= p <= back + WARM_UP_LIMIT_S), default=None)
    return None if first is None else round(first - back, 1)
