"""Keep the agents' slots warm, driven by what the llama-server coordinator observes.

After every poll the watcher compares it with the last poll that found the server ready
(observation.py): a new server process (told by what that build shows: a new media marker or
process start time, counters that went back, a slot that forgot its last task) or an agent slot
that ran a task Voice Stack did not send calls for priming those slots at once,
so the first voice request after a restart finds its prefix cached. A server that was merely
unreachable keeps its cache and is left alone. The unified-KV probe runs only for a server
setup it has no verdict for. A warm-up gives way to a user request waiting for the same slot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Final

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant, callback

from .agent import Agent
from .chat import ChatClient
from .const import LOGGER
from .coordinator import LlamaCoordinator
from .data import ServerProps
from .errors import LlamaContextError, LlamaError
from .kv_probe import known_verdict, probe_unified_kv, remember_verdict
from .observation import Observation, is_new_process, observe, slots_to_warm
from .repairs import ContextError, Repairs
from .slots import SlotScheduler
from .warm import SlotPrimer

_FIRST_RETRY_S: Final = 15.0  # about one poll
_LAST_RETRY_S: Final = 600.0


class ServerWatcher:
    """Primes every slot of every agent's pool when the coordinator says it is needed."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry: ConfigEntry,
        *,
        llm: LlamaCoordinator,
        agents: Mapping[str, Agent],
        scheduler: SlotScheduler,
        chat: ChatClient,
        primer: SlotPrimer,
        repairs: Repairs,
    ) -> None:
        """Watch `llm` for the agents of this entry."""
        self._hass, self._entry, self._llm = hass, entry, llm
        self._agents, self._scheduler = agents, scheduler
        self._chat, self.primer, self._repairs = chat, primer, repairs
        self._slots = {slot for agent in agents.values() for slot in agent.slots}
        self._last_ready: Observation | None = None
        self._pending: set[int] = set()
        self._restore = False  # the next warm-up loads the slots saved before a restart
        self._retry_at: dict[int, float] = {}  # slot -> when to try a failed warm-up again
        self._retry_after: dict[int, float] = {}  # slot -> the wait before that retry
        self._processes = 0  # server processes seen: a failed probe is tried once per process
        self._probe_failed_for: tuple[object, ...] | None = None
        self._task: asyncio.Task[None] | None = None
        self._failures: dict[str, str] = {}  # agent id -> kind of the last warm failure logged

    @callback
    def async_start(self) -> None:
        """Check now, then after every poll, until the entry unloads."""
        self._entry.async_on_unload(self._llm.async_add_listener(self._on_poll))
        self._on_poll()

    @callback
    def _on_poll(self) -> None:
        now = observe(self._llm.data, self._llm.reachable, self._scheduler, self._slots)
        if not now.ready:
            return
        if is_new_process(self._last_ready, now):
            self._processes += 1
            self._restore = True
            self._retry_at.clear()
            self._retry_after.clear()
        slots = slots_to_warm(self._last_ready, now, self._slots) | self._due_retries()
        self._last_ready = now
        if not slots:
            return
        self._pending |= slots
        if self._task is None or self._task.done():
            self._task = self._entry.async_create_background_task(
                self._hass, self._run(), "voice_stack warm slots"
            )

    def _due_retries(self) -> set[int]:
        moment = time.monotonic()
        return {slot for slot, at in self._retry_at.items() if at <= moment}

    async def _run(self) -> None:
        while self._pending and (props := self._props()) is not None:
            slots, self._pending = self._pending, set()
            restore, self._restore = self._restore, False
            slots |= await self._check_unified_kv(props)
            for agent in self._agents.values():
                for slot in agent.slots:
                    if slot in slots:
                        self._after_warm(slot, await self._warm(agent, slot, restore=restore))

    def _after_warm(self, slot: int, ok: bool) -> None:
        """Forget a slot's backoff, or double it (one poll at first, ten minutes at most)."""
        if ok:
            self._retry_at.pop(slot, None)
            self._retry_after.pop(slot, None)
            return
        wait = min(2 * self._retry_after.get(slot, _FIRST_RETRY_S / 2), _LAST_RETRY_S)
        self._retry_after[slot] = wait
        self._retry_at[slot] = time.monotonic() + wait

    def _props(self) -> ServerProps | None:
        data = self._llm.data
        return data.props if self._llm.reachable and data and not data.loading else None

    async def _check_unified_kv(self, props: ServerProps) -> set[int]:
        """Report the verdict for this server setup; the agent slots a new probe disturbed."""
        known, verdict = known_verdict(self._hass, self._llm.base_url, props)
        disturbed: set[int] = set()
        setup = (props.fingerprint, self._processes)
        if not known and self._probe_failed_for != setup:
            verdict, disturbed = await self._probe(props)
            if verdict is None:
                self._probe_failed_for = setup  # not again for this process
            else:
                remember_verdict(self._hass, self._llm.base_url, props, verdict)
        self._repairs.unified_kv(verdict)
        return disturbed & self._slots

    async def _probe(self, props: ServerProps) -> tuple[bool | None, set[int]]:
        """A's slot is the lowest agent slot; B's another agent slot, else the next slot."""
        total = props.total_slots or 0
        ours = sorted(s for s in self._slots if s < total)
        if total < 2 or not ours:
            return None, set()
        slot = ours[0]
        other = next((s for s in ours if s != slot), (slot + 1) % total)
        lease = self._scheduler.lease
        async with lease((slot,), background=True), lease((other,), background=True):
            return await probe_unified_kv(self._chat, slot, other), {slot, other}

    async def _warm(self, agent: Agent, slot: int, *, restore: bool) -> bool:
        """Prime one slot; False when it failed (the reason is logged once)."""
        async with self._scheduler.lease((slot,), background=True):
            try:
                if restore:
                    await self.primer.restore(agent, slot)
                tokens = await self.primer.prime(agent, slot)
                await self.primer.save(agent, slot)
            except LlamaContextError as err:
                error = ContextError(slot, err.n_prompt_tokens, err.n_ctx, from_warm=True)
                self._repairs.context_error(agent, error)
                self._log_failure(agent, slot, err)
                return False
            except LlamaError as err:
                self._log_failure(agent, slot, err)
                return False
            except Exception:  # a template or LLM API error must not stop the watcher
                if self._is_news(agent, "template"):
                    LOGGER.exception("Could not render the prompt of %s", agent.title)
                return False
        if self._failures.pop(agent.id, None) is not None:
            LOGGER.info("Warmed slot %s for %s again", slot, agent.title)
        LOGGER.debug("Warmed slot %s for %s with %s tokens", slot, agent.title, tokens)
        self._repairs.primed(agent, tokens)
        return True

    def _log_failure(self, agent: Agent, slot: int, err: LlamaError) -> None:
        if self._is_news(agent, type(err).__name__):
            LOGGER.warning(
                "Could not warm slot %s for %s (will retry, less often each time): %s",
                slot,
                agent.title,
                err,
            )
        else:
            LOGGER.debug("Warming slot %s still fails: %s", slot, err)

    def _is_news(self, agent: Agent, kind: str) -> bool:
        """Remember why the agent's warm-up failed; True when that is news (log it once)."""
        if self._failures.get(agent.id) == kind:
            return False
        self._failures[agent.id] = kind
        return True
