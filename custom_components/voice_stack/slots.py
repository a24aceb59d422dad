"""Which of an agent's slots a request runs on, from the requests Voice Stack has in flight.

llama-server queues a request pinned to a busy slot without a word, so two satellites
speaking at once to an agent with one slot are served one after the other. An agent may own
a pool of slots instead; each request takes the slot that last served its conversation if
that slot is idle (its history is cached there), else the lowest idle slot of the pool
(every pool slot holds the warm system prompt), else waits for the first of its slots to
free. It never uses a slot outside the pool. The state is what this integration sent; the
server's /slots is not polled on the request path.
"""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

_MAX_CONVERSATIONS: Final = 256


class SlotScheduler:
    """The slots of one server that this integration's requests occupy right now."""

    def __init__(self) -> None:
        """Nothing in flight."""
        self._busy: Counter[int] = Counter()
        self._changed = asyncio.Condition()
        self._last_slot: OrderedDict[str, int] = OrderedDict()
        self.sent: Counter[int] = Counter()  # requests ever sent per slot (warm-ups included)

    def busy(self, slot: int) -> bool:
        """Whether one of our requests is running on `slot`."""
        return self._busy[slot] > 0

    def _pick(self, pool: Sequence[int], conversation_id: str | None) -> int | None:
        preferred = self._last_slot.get(conversation_id) if conversation_id else None
        if preferred is not None and preferred in pool and not self.busy(preferred):
            return preferred
        return next((slot for slot in sorted(pool) if not self.busy(slot)), None)

    @asynccontextmanager
    async def lease(
        self, pool: Sequence[int], conversation_id: str | None = None
    ) -> AsyncIterator[int]:
        """Hold a slot of `pool` for one request (or one turn's tool loop)."""
        if not pool:
            raise ValueError("an agent needs at least one slot")
        async with self._changed:
            while (slot := self._pick(pool, conversation_id)) is None:
                await self._changed.wait()
            self._busy[slot] += 1
            self.sent[slot] += 1
        if conversation_id:
            self._remember(conversation_id, slot)
        try:
            yield slot
        finally:
            async with self._changed:
                self._busy[slot] -= 1
                self._changed.notify_all()

    def _remember(self, conversation_id: str, slot: int) -> None:
        self._last_slot.pop(conversation_id, None)
        self._last_slot[conversation_id] = slot
        while len(self._last_slot) > _MAX_CONVERSATIONS:
            self._last_slot.popitem(last=False)
