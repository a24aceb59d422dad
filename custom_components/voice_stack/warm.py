"""Keep each agent's slot warm: prime it after setup and after a server restart.

A restart is noticed from /health failing and coming back, from a changed
/props fingerprint, or from the agent's slot no longer having run any task.
Where the server has --slot-save-path and the agent asks for it, the warm
slot is saved after priming and restored first after a restart.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.event import async_track_time_interval

from . import repairs
from .client import LlamaClient, LlamaError, LlamaResponseError
from .const import CONF_SAVE_SLOT, LOGGER, WATCH_INTERVAL_S
from .models import VoiceStackConfigEntry

if TYPE_CHECKING:
    from .entity import VoiceStackLLMEntity

WARM_TIMEOUT = 300.0  # a long prompt on a slow CPU; runs in the background
_PROBE_SYSTEM = "Voice Stack unified KV cache probe."


def _fingerprint(props: dict[str, Any]) -> tuple[Any, ...]:
    return (props.get("model_path"), props.get("build_info"), props.get("total_slots"))


class SlotWarmer:
    """Watch one server and prime the slots of its agents."""

    def __init__(
        self, hass: HomeAssistant, entry: VoiceStackConfigEntry, client: LlamaClient
    ) -> None:
        """Start with nothing known about the server."""
        self.hass = hass
        self.entry = entry
        self.client = client
        self.agents: dict[str, VoiceStackLLMEntity] = {}
        self.state: repairs.ServerState | None = None
        self.warmed: set[str] = set()
        self.save_supported: bool | None = None
        self._fingerprint: tuple[Any, ...] | None = None
        self._down = False
        self._lock = asyncio.Lock()

    @callback
    def register(self, agent: VoiceStackLLMEntity) -> None:
        """Track an agent entity."""
        self.agents[agent.subentry.subentry_id] = agent

    @callback
    def unregister(self, agent: VoiceStackLLMEntity) -> None:
        """Forget an agent entity."""
        self.agents.pop(agent.subentry.subentry_id, None)

    @callback
    def async_start(self) -> None:
        """Run a first check now and then every WATCH_INTERVAL_S."""
        self.entry.async_on_unload(
            async_track_time_interval(
                self.hass, self._interval, timedelta(seconds=WATCH_INTERVAL_S)
            )
        )
        self.entry.async_create_background_task(
            self.hass, self.async_check(), "voice_stack warm slots"
        )

    async def _interval(self, _now: Any) -> None:
        await self.async_check()

    async def async_check(self) -> None:
        """Look at the server; on first sight or after a restart, probe and warm."""
        async with self._lock:
            try:
                await self.client.health()
                props = await self.client.props()
                slots = await self.client.slots()
                proxy = await self.client.proxy_status()
            except LlamaError as err:
                if not self._down:
                    LOGGER.info("llama-server unreachable, will re-warm when back: %s", err)
                self._down = True
                return
            restarted = self._restarted(props, slots)
            self._down = False
            self._fingerprint = _fingerprint(props)
            self.entry.runtime_data.props = props
            old = self.state
            self.state = repairs.ServerState(props, slots, proxy)
            if old is not None and not restarted:
                self.state.unified_kv = old.unified_kv
                self.state.prefix_tokens = old.prefix_tokens
            else:
                self.warmed.clear()
                self.state.unified_kv = await self._probe_unified_kv()
            for agent_id, agent in list(self.agents.items()):
                if agent_id not in self.warmed:
                    await self._warm(agent, restore=restarted)
            repairs.async_apply_issues(
                self.hass, self.entry, repairs.find_issues(self.entry, self.state)
            )

    def _restarted(self, props: dict[str, Any], slots: list[dict[str, Any]]) -> bool:
        """Whether the server lost its KV cache since we last looked."""
        if self._fingerprint is None:
            return False
        if self._down or _fingerprint(props) != self._fingerprint:
            return True
        used = {s.get("id") for s in slots if "id_task" in s}
        total = max(1, int(props.get("total_slots") or 1))
        return any(
            agent.slot % total not in used
            for agent_id, agent in self.agents.items()
            if agent_id in self.warmed
        )

    async def _probe_unified_kv(self) -> bool | None:
        """Pin A to one slot, B to another, A again: unified KV clears A's slot."""
        total = int(self.entry.runtime_data.props.get("total_slots") or 0)
        if total < 2 or not self.agents:
            return None
        slot = min(agent.slot for agent in self.agents.values()) % total
        other = (slot + 1) % total

        def probe(text: str, slot_id: int) -> dict[str, Any]:
            return {
                "messages": [
                    {"role": "system", "content": f"{_PROBE_SYSTEM} {text}"},
                    {"role": "user", "content": text},
                ],
                "id_slot": slot_id,
                "cache_prompt": True,
                "max_tokens": 0,
                "n_predict": 0,
            }

        try:
            await self.client.complete(probe("alpha beta gamma delta", slot), 30)
            await self.client.complete(probe("other", other), 30)
            reply = await self.client.complete(probe("alpha beta gamma delta", slot), 30)
        except LlamaError as err:
            LOGGER.debug("Unified KV probe failed: %s", err)
            return None
        timings = reply.get("timings") or {}
        return bool(timings.get("cache_n", 0) == 0 and timings.get("prompt_n", 0) > 0)

    async def _warm(self, agent: VoiceStackLLMEntity, restore: bool) -> None:
        """Evaluate the agent's stable prefix into its slot (no generation)."""
        save = bool(agent.subentry.data.get(CONF_SAVE_SLOT)) and self.save_supported is not False
        filename = f"voice_stack_{agent.subentry.subentry_id}.bin"
        if save and restore:
            await self._slot_action(agent.slot, "restore", filename)
        try:
            system, tools = await agent.async_stable_prefix()
            payload = {
                **agent.base_payload(),
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": ""},
                ],
                "max_tokens": 0,
                "n_predict": 0,
            }
            if tools:
                payload["tools"] = tools
            reply = await self.client.complete(payload, WARM_TIMEOUT)
        except LlamaError as err:
            LOGGER.warning(
                "Could not warm slot %s for %s: %s", agent.slot, agent.subentry.title, err
            )
            return
        except Exception:  # a template or API error must not stop the watcher
            LOGGER.exception("Could not render the prompt of %s", agent.subentry.title)
            return
        timings = reply.get("timings") or {}
        tokens = int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))
        if self.state is not None:
            self.state.prefix_tokens[agent.subentry.subentry_id] = tokens
        self.warmed.add(agent.subentry.subentry_id)
        LOGGER.debug("Warmed slot %s with %s tokens", agent.slot, tokens)
        if save:
            await self._slot_action(agent.slot, "save", filename)

    async def _slot_action(self, slot: int, action: str, filename: str) -> None:
        try:
            await self.client.slot_action(slot, action, filename)
            self.save_supported = True
        except LlamaResponseError as err:
            if err.status == 501:
                self.save_supported = False  # no --slot-save-path
            LOGGER.debug("Slot %s %s failed: %s", slot, action, err)
        except LlamaError as err:
            LOGGER.debug("Slot %s %s failed: %s", slot, action, err)
