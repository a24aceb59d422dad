"""Keep the agents' slots warm, driven by what the llama-server coordinator observes.

After every poll the watcher compares what it saw with the poll before: the server coming
(back) up, a new server process (llama-server draws a new media marker at every start), or an
agent slot that ran a task Voice Stack did not send (another client evicted it). Each of
those re-primes the slots concerned at once, so the first voice request after a restart
finds its prefix cached. The unified-KV probe runs only when the server setup is new.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant, callback

from .agent import Agent
from .chat import ChatClient
from .const import LOGGER
from .errors import LlamaContextError, LlamaError
from .kv_probe import known_verdict, probe_unified_kv, remember_verdict
from .llama_coordinator import LlamaCoordinator
from .llama_data import LlamaData, ServerProps
from .repairs import ContextError, Repairs
from .slots import SlotScheduler
from .warm import SlotPrimer


@dataclass(frozen=True, slots=True)
class Observation:
    """What one poll showed about the server and the slots this entry uses."""

    ready: bool
    process: str | None
    tasks: Mapping[int, int | None]  # slot -> latest task id on it
    sent: Mapping[int, int]  # slot -> requests Voice Stack had sent to it
    busy: frozenset[int]  # slots with one of our requests in flight


def observe(
    data: LlamaData | None, reachable: bool, scheduler: SlotScheduler, slots: set[int]
) -> Observation:
    """Snapshot one poll."""
    ready = reachable and data is not None and not data.loading and data.props is not None
    summary = data.slots if ready and data else None
    tasks = (
        {s: (info.id_task if (info := summary.slot(s)) else None) for s in slots} if summary else {}
    )
    return Observation(
        ready=ready,
        process=data.props.process if ready and data and data.props else None,
        tasks=tasks,
        sent={s: scheduler.sent[s] for s in slots},
        busy=frozenset(s for s in slots if scheduler.busy(s)),
    )


def slots_to_warm(before: Observation | None, now: Observation, slots: set[int]) -> set[int]:
    """The slots that lost (or never had) their primed prefix between two polls."""
    if not now.ready:
        return set()
    if before is None or not before.ready or now.process != before.process:
        return set(slots)  # first sight, back up, or restarted between two polls
    return {
        slot
        for slot in slots
        if now.tasks.get(slot) != before.tasks.get(slot)
        and now.sent.get(slot) == before.sent.get(slot)
        and slot not in before.busy | now.busy
    }


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
        self._seen: Observation | None = None
        self._pending: set[int] = set()
        self._retry: set[int] = set()  # slots whose warm-up failed: tried again after each poll
        self._restarted = False
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
        before, self._seen = self._seen, now
        if before is not None and before.ready and now.ready and now.process != before.process:
            self._restarted = True
        if before is not None and not before.ready and now.ready:
            self._restarted = True
        slots = slots_to_warm(before, now, self._slots) | (self._retry if now.ready else set())
        if not slots:
            return
        self._pending |= slots
        if self._task is None or self._task.done():
            self._task = self._entry.async_create_background_task(
                self._hass, self._run(), "voice_stack warm slots"
            )

    async def _run(self) -> None:
        while self._pending and (props := self._props()) is not None:
            slots, self._pending = self._pending, set()
            restarted, self._restarted = self._restarted, False
            await self._check_unified_kv(props)
            for agent in self._agents.values():
                for slot in agent.slots:
                    if slot in slots:
                        if await self._warm(agent, slot, restore=restarted):
                            self._retry.discard(slot)
                        else:
                            self._retry.add(slot)

    def _props(self) -> ServerProps | None:
        data = self._llm.data
        return data.props if self._llm.reachable and data and not data.loading else None

    async def _check_unified_kv(self, props: ServerProps) -> None:
        known, verdict = known_verdict(self._hass, self._llm.base_url, props)
        if not known:
            verdict = await self._probe(props)
            if verdict is not None:
                remember_verdict(self._hass, self._llm.base_url, props, verdict)
        self._repairs.unified_kv(verdict)

    async def _probe(self, props: ServerProps) -> bool | None:
        """A's slot is the lowest agent slot; B's another agent slot, else the next slot."""
        total = props.total_slots or 0
        ours = sorted(s % total for s in self._slots) if total else []
        if total < 2 or not ours:
            return None
        slot = ours[0]
        other = next((s for s in ours if s != slot), (slot + 1) % total)
        async with self._scheduler.lease((slot,)), self._scheduler.lease((other,)):
            return await probe_unified_kv(self._chat, slot, other)

    async def _warm(self, agent: Agent, slot: int, *, restore: bool) -> bool:
        """Prime one slot; False when it failed (the reason is logged once)."""
        async with self._scheduler.lease((slot,)):
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
                "Could not warm slot %s for %s (will retry when the server changes): %s",
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
