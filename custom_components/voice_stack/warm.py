"""Prime, save and restore a slot: evaluate an agent's stable prefix into its KV cache.

A primed slot answers the next voice request from cache; without it the first request after
a server start re-processes every tool definition (seconds on a loaded GPU, far more on CPU).
Where llama-server has --slot-save-path and the agent asks for it, the primed slot is saved
and restored first after a restart, which is faster still for long prompts.
"""

from __future__ import annotations

from .agent import Agent
from .chat import ChatClient
from .client import LlamaClient
from .const import LOGGER, WARM_TIMEOUT
from .errors import LlamaError, LlamaResponseError

_NOT_CONFIGURED = 501  # llama-server without --slot-save-path


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

        Raises LlamaError (a LlamaContextError when the prefix does not fit the slot).
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
        except LlamaResponseError as err:
            if err.status == _NOT_CONFIGURED:
                self.save_supported = False
            LOGGER.debug("Slot %s %s failed: %s", slot, action, err)
        except LlamaError as err:
            LOGGER.debug("Slot %s %s failed: %s", slot, action, err)
