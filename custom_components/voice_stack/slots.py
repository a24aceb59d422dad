"""Which of an agent's slots a request runs on, from the requests Voice Stack has in flight.

llama-server queues a request pinned to a busy slot without a word, so two satellites
speaking at once to an agent with one slot are served one after the other. An agent may own
a pool of slots instead; each request takes the slot that last served its conversation if
that slot is idle (its history is cached there), else the lowest idle slot of the pool
(every pool slot holds the warm system prompt), else waits for the first of its slots to
free. It never uses a slot outside the pool. A warm-up (a background lease) gives way to a
user request waiting for the same slot. The state is what this integration sent; the server's
/slots is not polled on the request path.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

_MAX_CONVERSATIONS: Final = 256
_RECENT_STARTS: Final = 64


class SlotScheduler:
    """The slots of one server that this integration's requests occupy right now."""

    def __init__(self) -> None:
        """Nothing in flight."""
        self._busy: Counter[int] = Counter()
        self._wanted: Counter[int] = Counter()  # slots user requests are waiting for
        self._waiters: list[asyncio.Future[None]] = []  # leases waiting for a change
        self._last_slot: OrderedDict[str, int] = OrderedDict()
        self.sent: Counter[int] = Counter()  # requests ever sent per slot (warm-ups included)
        self._starts: dict[int, deque[float]] = {}  # recent lease start times per slot

    def busy(self, slot: int) -> bool:
        """Whether one of our requests is running on `slot`."""
        return self._busy[slot] > 0

    def wanted(self, slot: int) -> bool:
        """Whether a user request is waiting for `slot`."""
        return self._wanted[slot] > 0

    def sent_before(self, slot: int, at: float) -> int:
        """Requests sent to `slot` that had started by monotonic time `at`."""
        later = sum(1 for start in self._starts.get(slot, ()) if start > at)
        return self.sent[slot] - later

    def _pick(
        self, pool: Sequence[int], conversation_id: str | None, background: bool
    ) -> int | None:
        def free(slot: int) -> bool:
            return not self.busy(slot) and not (background and self.wanted(slot))

        preferred = self._last_slot.get(conversation_id) if conversation_id else None
        if preferred is not None and preferred in pool and free(preferred):
            return preferred
        return next((slot for slot in sorted(pool) if free(slot)), None)

    def _changed(self) -> None:
        """Wake every waiting lease to look again (synchronous: it cannot be cancelled)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _wait_for_change(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    async def _acquire(
        self, pool: Sequence[int], conversation_id: str | None, background: bool
    ) -> int:
        """Wait for a free slot of the pool and take it.

        The bookkeeping between two waits is synchronous, so it needs no lock: the event loop
        runs nothing else in between.
        """
        if not background:
            self._wanted.update(pool)
        try:
            while (slot := self._pick(pool, conversation_id, background)) is None:
                await self._wait_for_change()
        finally:
            if not background:
                self._wanted.subtract(pool)
                self._changed()  # a warm-up that waited behind us may go now
        self._busy[slot] += 1
        self.sent[slot] += 1
        self._starts.setdefault(slot, deque(maxlen=_RECENT_STARTS)).append(time.monotonic())
        return slot

    @asynccontextmanager
    async def lease(
        self,
        pool: Sequence[int],
        conversation_id: str | None = None,
        *,
        background: bool = False,
    ) -> AsyncIterator[int]:
        """Hold a slot of `pool` for one request (or one turn's tool loop).

        It waits as long as it takes: the caller's own deadline bounds the wait.
        """
        if not pool:
            raise ValueError("an agent needs at least one slot")
        slot = await self._acquire(pool, conversation_id, background)
        if conversation_id:
            self._remember(conversation_id, slot)
        try:
            yield slot
        finally:
            # Nothing awaited here: a turn cancelled again while it unwinds still frees its slot.
            self._busy[slot] -= 1
            self._changed()

    def _remember(self, conversation_id: str, slot: int) -> None:
        self._last_slot.pop(conversation_id, None)
        self._last_slot[conversation_id] = slot
        while len(self._last_slot) > _MAX_CONVERSATIONS:
            self._last_slot.popitem(last=False)
