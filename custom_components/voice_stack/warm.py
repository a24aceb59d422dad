"""Warm the agents' slots: prime, save and restore a slot (evaluate an agent's stable prefix
into its KV cache), each warm-up on its slot's lease, with its backoff, its repairs and its
failures logged once. When to warm is the watcher's (watcher.py).

A primed slot answers the next voice request from cache; without it the first request after
a server start re-processes every tool definition (seconds on a loaded GPU, far more on CPU).
Where llama-server has --slot-save-path and the agent asks for it, the primed slot is saved
and restored first after a restart, which is faster still for long prompts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Final

from .agent import Agent
from .chat import ChatClient
from .client import SWITCHED_OFF, LlamaClient
from .const import LOGGER, WARM_TIMEOUT
from .errors import ContextFullError, ServiceError, ServiceResponseError
from .kv_probe import UnifiedKvProbe
from .payloads import ServerProps
from .repairs import ContextError, Repairs
from .slots import SlotScheduler

_FIRST_RETRY_S: Final = 15.0  # about one poll
_LAST_RETRY_S: Final = 600.0


def slot_file(agent: Agent, slot: int) -> str:
    """The file name a slot of an agent is saved under (inside --slot-save-path)."""
    return f"voice_stack_{agent.id}_{slot}.bin"


class SlotPrimer:
    """Writes agents' prefixes into their slots on one server."""

    def __init__(self, chat: ChatClient, client: LlamaClient) -> None:
        """Use the chat client for priming and the server client for slot files."""
        self._chat = chat
        self._client = client
        self.save_supported: bool | None = None  # None until a save or restore was tried

    async def prime(self, agent: Agent, slot: int) -> int:
        """Evaluate the agent's prefix into `slot`; return the tokens it now holds.

        Raises ServiceError (a ContextFullError when the prefix does not fit the slot).
        """
        system, tools = await agent.stable_prefix()
        reply = await self._chat.complete(agent.warm_request(slot, system, tools), WARM_TIMEOUT)
        timings = reply.get("timings") or {}
        return int(timings.get("prompt_n") or 0) + int(timings.get("cache_n") or 0)

    async def save(self, agent: Agent, slot: int) -> None:
        """Save the primed slot to disk (when the agent asks and the server can)."""
        if agent.save_slot and self.save_supported is not False:
            await self._slot_action(slot, "save", slot_file(agent, slot))

    async def restore(self, agent: Agent, slot: int) -> None:
        """Load the slot saved before a restart, so priming finds its prefix cached."""
        if agent.save_slot and self.save_supported is not False:
            await self._slot_action(slot, "restore", slot_file(agent, slot))

    async def _slot_action(self, slot: int, action: str, filename: str) -> None:
        try:
            await self._client.slot_action(slot, action, filename)
            self.save_supported = True
        except ServiceResponseError as err:
            if err.status == SWITCHED_OFF:  # no --slot-save-path
                self.save_supported = False
            LOGGER.debug("Slot %s %s failed: %s", slot, action, err)
        except ServiceError as err:
            LOGGER.debug("Slot %s %s failed: %s", slot, action, err)


class Backoff:
    """When to warm a slot again after its warm-up failed: one poll at first, then twice as
    long each time, ten minutes at most."""

    def __init__(self) -> None:
        """No slot has failed yet."""
        self._at: dict[int, float] = {}  # slot -> when to try again
        self._after: dict[int, float] = {}  # slot -> the wait before that retry

    def due(self) -> set[int]:
        """The slots whose retry is due."""
        moment = time.monotonic()
        return {slot for slot, at in self._at.items() if at <= moment}

    def clear(self) -> None:
        """Forget every wait (a new server process: everything is warmed at once)."""
        self._at.clear()
        self._after.clear()

    def done(self, slot: int, ok: bool) -> None:
        """Forget a slot's backoff, or double it."""
        if ok:
            self._at.pop(slot, None)
            self._after.pop(slot, None)
            return
        wait = min(2 * self._after.get(slot, _FIRST_RETRY_S / 2), _LAST_RETRY_S)
        self._after[slot] = wait
        self._at[slot] = time.monotonic() + wait


class FailureLog:
    """Says why an agent's warm-up fails once (a warning), then quietly until it works again."""

    def __init__(self) -> None:
        """Nothing failed yet."""
        self._kinds: dict[str, str] = {}  # agent id -> kind of the last failure logged

    def failed(self, agent: Agent, slot: int, err: ServiceError) -> None:
        """A server error: warn when it is news."""
        if self._is_news(agent, type(err).__name__):
            LOGGER.warning(
                "Could not warm slot %s for %s (will retry, less often each time): %s",
                slot,
                agent.title,
                err,
            )
        else:
            LOGGER.debug("Warming slot %s still fails: %s", slot, err)

    def template_failed(self, agent: Agent) -> None:
        """The prompt did not render (call it from the except block: the traceback is logged)."""
        if self._is_news(agent, "template"):
            LOGGER.exception("Could not render the prompt of %s", agent.title)

    def warmed(self, agent: Agent, slot: int, tokens: int) -> None:
        """The slot is warm: say so when it had failed before."""
        if self._kinds.pop(agent.id, None) is not None:
            LOGGER.info("Warmed slot %s for %s again", slot, agent.title)
        LOGGER.debug("Warmed slot %s for %s with %s tokens", slot, agent.title, tokens)

    def _is_news(self, agent: Agent, kind: str) -> bool:
        if self._kinds.get(agent.id) == kind:
            return False
        self._kinds[agent.id] = kind
        return True


class WarmUp:
    """Warms the slots it is given: the unified-KV check first, then every agent slot among
    them on its lease; a warm-up gives way to a user request waiting for the same slot."""

    def __init__(
        self,
        agents: Mapping[str, Agent],
        scheduler: SlotScheduler,
        primer: SlotPrimer,
        probe: UnifiedKvProbe,
        repairs: Repairs,
    ) -> None:
        """Warm these agents' slots with `primer`, reporting to `repairs`."""
        self._agents, self._scheduler, self._primer = agents, scheduler, primer
        self._probe, self._repairs = probe, repairs
        self.slots = {slot for agent in agents.values() for slot in agent.slots}
        self.backoff = Backoff()
        self._log = FailureLog()

    def restarted(self) -> None:
        """A new server process: no slot waits for its backoff, a failed probe may run again."""
        self.backoff.clear()
        self._probe.new_process()

    async def run(self, props: ServerProps, slots: set[int], *, restore: bool) -> None:
        """Warm `slots` (and those the probe disturbed); restore saved slots first if asked."""
        verdict, disturbed = await self._probe.check(props, self.slots)
        self._repairs.unified_kv(verdict)
        slots = slots | disturbed
        for agent in self._agents.values():
            for slot in agent.slots:
                if slot in slots:
                    self.backoff.done(slot, await self._warm(agent, slot, restore=restore))

    async def _warm(self, agent: Agent, slot: int, *, restore: bool) -> bool:
        """Prime one slot; False when it failed (the reason is logged once)."""
        async with self._scheduler.lease((slot,), background=True):
            try:
                if restore:
                    await self._primer.restore(agent, slot)
                tokens = await self._primer.prime(agent, slot)
                await self._primer.save(agent, slot)
            except ContextFullError as err:
                error = ContextError(slot, err.n_prompt_tokens, err.n_ctx, from_warm=True)
                self._repairs.context_error(agent, error)
                self._log.failed(agent, slot, err)
                return False
            except ServiceError as err:
                self._log.failed(agent, slot, err)
                return False
            except Exception:  # a template or LLM API error must not stop the warm-up
                self._log.template_failed(agent)
                return False
        self._log.warmed(agent, slot, tokens)
        self._repairs.primed(agent, tokens)
        return True
