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

from homeassistant.config_entries import ConfigSubentry
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.event import async_track_time_interval
from homeassistant.util.hass_dict import HassKey

from . import repairs
from .client import LlamaClient, LlamaContextError, LlamaError, LlamaResponseError
from .const import CONF_SAVE_SLOT, DOMAIN, LOGGER, WATCH_INTERVAL_S
from .models import VoiceStackConfigEntry

if TYPE_CHECKING:
    from .entity import VoiceStackLLMEntity

WARM_TIMEOUT = 300.0  # a long prompt on a slow CPU; runs in the background
_PROBE_SYSTEM = "Voice Stack unified KV cache probe."
# Server URL -> (server identity, unified-KV verdict); outlives entry reloads, so the probe
# (which evicts another slot's cache) runs once per llama-server process, not per reload.
UNIFIED_KV_VERDICTS: HassKey[dict[str, tuple[tuple[Any, ...], bool]]] = HassKey(
    f"{DOMAIN}_unified_kv"
)


def _fingerprint(props: dict[str, Any]) -> tuple[Any, ...]:
    return (props.get("model_path"), props.get("build_info"), props.get("total_slots"))


def _identity(props: dict[str, Any]) -> tuple[Any, ...]:
    """What the unified-KV verdict depends on.

    /props (b11669) does not say whether the KV cache is unified, so that still takes a probe.
    The verdict holds while the model, build, slot count and context per slot stay the same
    and the process is the same: media_marker is drawn at random when llama-server starts.
    """
    settings = props.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    return (*_fingerprint(props), n_ctx, props.get("media_marker"))


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
        self.context_errors: dict[str, repairs.ContextError] = {}
        self._warm_failures: dict[str, str] = {}  # subentry -> kind of the failure logged
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
    def async_context_error(
        self,
        agent: ConfigSubentry,
        slot: int,
        n_prompt: int | None,
        n_ctx: int | None,
        *,
        from_warm: bool = False,
    ) -> None:
        """An agent's request did not fit its slot: raise the repair and keep it raised."""
        error = repairs.ContextError(slot, n_prompt, n_ctx, from_warm)
        self.context_errors[agent.subentry_id] = error
        repairs.report_context_too_small(self.hass, self.entry, agent, error)

    @callback
    def async_request_ok(self, subentry_id: str, *, from_warm: bool = False) -> None:
        """A request fitted: drop the agent's context repair (a warm-up only clears its own)."""
        error = self.context_errors.get(subentry_id)
        if error is None or (from_warm and not error.from_warm):
            return
        del self.context_errors[subentry_id]
        if self.state is not None:  # else the first check, which is under way, applies it
            repairs.async_apply_issues(
                self.hass, self.entry, repairs.find_issues(self.entry, self.state)
            )

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
            self.state = repairs.ServerState(
                props, slots, proxy, context_errors=self.context_errors
            )
            self.state.prune_context_errors()
            if old is not None and not restarted:
                self.state.unified_kv = old.unified_kv
                self.state.prefix_tokens = old.prefix_tokens
            else:
                self.warmed.clear()
                self.state.unified_kv = await self._unified_kv(props)
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

    async def _unified_kv(self, props: dict[str, Any]) -> bool | None:
        """The verdict known for this server process, else a probe's."""
        verdicts = self.hass.data.setdefault(UNIFIED_KV_VERDICTS, {})
        identity = _identity(props)
        known = verdicts.get(self.client.url)
        if known is not None and known[0] == identity:
            return known[1]
        verdict = await self._probe_unified_kv()
        if verdict is not None:
            verdicts[self.client.url] = (identity, verdict)
        return verdict

    async def _probe_unified_kv(self) -> bool | None:
        """Pin A to one slot, B to another, A again: unified KV clears A's slot.

        B goes to another agent's slot when there is one (warmed right after), else to
        the next slot, whose cache (maybe another client's) the probe evicts.
        """
        total = int(self.entry.runtime_data.props.get("total_slots") or 0)
        if total < 2 or not self.agents:
            return None
        ours = sorted({agent.slot % total for agent in self.agents.values()})
        slot = ours[0]
        other = ours[1] if len(ours) > 1 else (slot + 1) % total

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
            if isinstance(err, LlamaContextError):
                self.async_context_error(
                    agent.subentry, agent.slot, err.n_prompt_tokens, err.n_ctx, from_warm=True
                )
            if self._first_failure(agent, err):
                LOGGER.warning(
                    "Could not warm slot %s for %s (retrying quietly): %s",
                    agent.slot,
                    agent.subentry.title,
                    err,
                )
            return
        except Exception as err:  # a template or API error must not stop the watcher
            if self._first_failure(agent, err):
                LOGGER.exception("Could not render the prompt of %s", agent.subentry.title)
            return
        timings = reply.get("timings") or {}
        tokens = int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))
        sub_id = agent.subentry.subentry_id
        if self.state is not None:
            self.state.prefix_tokens[sub_id] = tokens
        self.warmed.add(sub_id)
        if self._warm_failures.pop(sub_id, None) is not None:
            LOGGER.info("Warmed slot %s for %s again", agent.slot, agent.subentry.title)
        self.async_request_ok(sub_id, from_warm=True)
        LOGGER.debug("Warmed slot %s with %s tokens", agent.slot, tokens)
        if save:
            await self._slot_action(agent.slot, "save", filename)

    def _first_failure(self, agent: VoiceStackLLMEntity, err: Exception) -> bool:
        """Remember why the agent's warm-up failed; True when that is news (log it once)."""
        sub_id = agent.subentry.subentry_id
        kind = type(err).__name__
        if self._warm_failures.get(sub_id) == kind:
            LOGGER.debug("Warming slot %s still fails: %s", agent.slot, err)
            return False
        self._warm_failures[sub_id] = kind
        return True

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
