"""When to warm the agents' slots, from what the llama-server coordinator observes.

After every poll the watcher compares it with the last poll that found the server ready
(observation.py): a new server process (told by what that build shows: a new media marker or
process start time, counters that went back, a slot that forgot its last task) or an agent slot
that ran a task Voice Stack did not send calls for priming those slots at once,
so the first voice request after a restart finds its prefix cached. A server that was merely
unreachable keeps its cache and is left alone. The warm-up itself is warm.py's.
"""

from __future__ import annotations

import asyncio

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant, callback

from .coordinator import LlamaCoordinator
from .observation import Observation, is_new_process, observe, slots_to_warm
from .payloads import ServerProps
from .slots import SlotScheduler
from .warm import WarmUp


class ServerWatcher:
    """Hands the warm-up the slots that lost their prefix, one run at a time."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry: ConfigEntry,
        llm: LlamaCoordinator,
        scheduler: SlotScheduler,
        warm_up: WarmUp,
    ) -> None:
        """Watch `llm` for the slots `warm_up` keeps warm."""
        self._hass, self._entry, self._llm = hass, entry, llm
        self._scheduler, self._warm_up = scheduler, warm_up
        self._last_ready: Observation | None = None
        self._pending: set[int] = set()
        self._restore = False  # the next warm-up loads the slots saved before a restart
        self._task: asyncio.Task[None] | None = None

    @callback
    def async_start(self) -> None:
        """Check now, then after every poll, until the entry unloads."""
        self._entry.async_on_unload(self._llm.async_add_listener(self._on_poll))
        self._on_poll()

    @callback
    def _on_poll(self) -> None:
        slots = self._warm_up.slots
        now = observe(self._llm.data, self._llm.reachable, self._scheduler, slots)
        if not now.ready:
            return
        if is_new_process(self._last_ready, now):
            self._restore = True
            self._warm_up.restarted()
        due = slots_to_warm(self._last_ready, now, slots) | self._warm_up.backoff.due()
        self._last_ready = now
        if not due:
            return
        self._pending |= due
        if self._task is None or self._task.done():
            self._task = self._entry.async_create_background_task(
                self._hass, self._run(), "voice_stack warm slots"
            )

    async def _run(self) -> None:
        while self._pending and (props := self._props()) is not None:
            slots, self._pending = self._pending, set()
            restore, self._restore = self._restore, False
            await self._warm_up.run(props, slots, restore=restore)

    def _props(self) -> ServerProps | None:
        data = self._llm.data
        return data.props if self._llm.reachable and data and not data.loading else None
