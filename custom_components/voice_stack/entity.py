"""The base entities: VoiceStackServiceEntity, an entity of one service device fed by that
service's coordinator (the sensors, the binary sensors); VoiceStackLLMEntity, the conversation
and AI Task entities of an agent: a turn on one of the agent's slots, with a cache-stable
prompt, streamed into the chat log, with HA's tools."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import probatio
from homeassistant.components import conversation
from homeassistant.config_entries import ConfigEntry
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import llm
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.dispatcher import async_dispatcher_send
from homeassistant.helpers.entity import Entity, EntityDescription
from homeassistant.helpers.update_coordinator import CoordinatorEntity, DataUpdateCoordinator
from homeassistant.util import dt as dt_util

from .agent import Agent
from .const import (
    CONF_MAX_HISTORY,
    CONF_PROMPT_LAYOUT,
    CONF_TIMEOUT,
    DOMAIN,
    LOGGER,
    MAX_TOOL_ITERATIONS,
)
from .devices import agent_device_info
from .errors import (
    ContextFullError,
    KeyRejectedError,
    ModelLoadingError,
    ReplyCutError,
    ServiceTimeoutError,
    ServiceUnreachableError,
    translate_errors,
)
from .prompt import build_messages, format_tools
from .repairs import ContextError
from .runtime import VoiceStackConfigEntry
from .stream import StreamResult, transform_stream
from .timings import Timings, parse_timings, signal_timings


def structured_output(
    name: str, structure: probatio.Schema, llm_api: llm.APIInstance | None
) -> dict[str, Any]:
    """Build an OpenAI json_schema response_format (llama-server turns it into a grammar)."""
    schema = probatio.to_openapi(
        structure,
        custom_serializer=llm_api.custom_serializer if llm_api else None,
        openapi_version="3.1.0",
    )
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


class VoiceStackServiceEntity[CoordinatorT: DataUpdateCoordinator[Any]](
    CoordinatorEntity[CoordinatorT]
):
    """An entity of one service device, fed by that service's coordinator."""

    _attr_has_entity_name = True

    def __init__(
        self,
        coordinator: CoordinatorT,
        entry: ConfigEntry,
        kind: str,
        description: EntityDescription,
        device_info: DeviceInfo,
    ) -> None:
        """Bind to the coordinator; unique id = entry + device kind + key."""
        super().__init__(coordinator)
        self.entity_description = description
        self._attr_unique_id = f"{entry.entry_id}_{kind}_{description.key}"
        self._attr_device_info = device_info


class VoiceStackLLMEntity(Entity):
    """Shared logic of the conversation and AI Task entities."""

    _attr_has_entity_name = True
    _attr_name = None

    def __init__(self, entry: VoiceStackConfigEntry, agent: Agent) -> None:
        """Bind the entity to its server entry and its agent."""
        self.entry = entry
        self.agent = agent
        self._attr_unique_id = agent.id
        self._attr_device_info = agent_device_info(agent.subentry)

    async def _async_handle_chat_log(
        self,
        chat_log: conversation.ChatLog,
        structure_name: str | None = None,
        structure: probatio.Schema | None = None,
    ) -> None:
        """Run one turn on a slot of the agent's pool: stream a reply, let HA call tools, repeat."""
        data = self.entry.runtime_data
        timeout = float(self.agent.option(CONF_TIMEOUT))
        extra: dict[str, Any] = {}
        if structure and structure_name:
            extra["response_format"] = structured_output(
                structure_name, structure, chat_log.llm_api
            )
        with translate_errors(timeout):
            try:
                await self._on_a_slot(chat_log, extra, timeout)
            except KeyRejectedError:
                self.entry.async_start_reauth(self.hass)
                raise
            except ServiceUnreachableError, ModelLoadingError, ReplyCutError:
                self._poll_now()
                raise
        data.repairs.request_ok(self.agent)

    def _poll_now(self) -> None:
        """The server went away or is starting again: poll it now rather than at the next
        poll, so a restarted server's slots are warmed seconds after it is back."""
        llm_poller = self.entry.runtime_data.coordinators.llm
        self.entry.async_create_background_task(
            self.hass, llm_poller.async_request_refresh(), f"{DOMAIN} poll after a lost turn"
        )

    async def _on_a_slot(
        self, chat_log: conversation.ChatLog, extra: dict[str, Any], timeout_s: float
    ) -> None:
        """The tool loop on a slot of the agent's pool, the whole turn within `timeout_s`.

        One deadline covers the wait for a slot, every reply and every tool the model calls.
        A TimeoutError before it is a tool's own: a tool failure, not the server's.
        """
        scheduler = self.entry.runtime_data.scheduler
        pool, conversation_id = self.agent.slots, chat_log.conversation_id
        deadline = asyncio.get_running_loop().time() + timeout_s
        turn = asyncio.timeout_at(deadline)
        try:
            async with turn, scheduler.lease(pool, conversation_id) as slot:
                request = {**self.agent.request(slot), **extra}
                try:
                    await self._tool_loop(chat_log, request, deadline)
                except ContextFullError as err:
                    error = ContextError(slot, err.n_prompt_tokens, err.n_ctx, from_warm=False)
                    self.entry.runtime_data.repairs.context_error(self.agent, error)
                    raise
        except TimeoutError as err:
            if turn.expired():  # waiting for a slot, a reply or a tool took the rest of it
                raise ServiceTimeoutError("the turn ran out of time") from err
            raise HomeAssistantError(
                translation_domain=DOMAIN, translation_key="tool_timeout"
            ) from err

    async def _tool_loop(
        self, chat_log: conversation.ChatLog, payload: dict[str, Any], deadline: float
    ) -> None:
        tools = format_tools(chat_log.llm_api, stable_order=self.agent.cache_stable)
        loop = asyncio.get_running_loop()
        for iteration in range(MAX_TOOL_ITERATIONS):
            messages = build_messages(
                chat_log,
                layout=self.agent.option(CONF_PROMPT_LAYOUT),
                max_turns=int(self.agent.option(CONF_MAX_HISTORY)),
                volatile_context=self.agent.volatile,
            )
            request = {**payload, "messages": messages}
            # The last round offers no tools so the model has to answer in words.
            if tools and iteration < MAX_TOOL_ITERATIONS - 1:
                request["tools"] = tools
            result = StreamResult()
            chat = self.entry.runtime_data.chat
            # The reply gets what is left of the turn (a slow server is the server's timeout).
            left_s = max(deadline - loop.time(), 0.0)
            async with aclosing(chat.stream(request, left_s)) as chunks:
                async for _ in chat_log.async_add_delta_content_stream(
                    self.entity_id, transform_stream(chunks, result)
                ):
                    pass
            self._publish(chat_log, result, int(payload["id_slot"]))
            if not chat_log.unresponded_tool_results:
                break

    def _publish(self, chat_log: conversation.ChatLog, result: StreamResult, slot: int) -> None:
        """Keep, dispatch and trace the timings of one reply."""
        if result.timings is None:
            return
        timings: Timings = parse_timings(
            result.timings,
            slot=slot,
            time_to_first_token_ms=result.first_token_ms,
            received_at=dt_util.utcnow(),
        )
        self.entry.runtime_data.timings[self.agent.id] = timings
        async_dispatcher_send(
            self.hass, signal_timings(self.entry.entry_id), self.agent.id, timings
        )
        chat_log.async_trace(
            {
                "stats": {
                    "input_tokens": timings.prompt_tokens + timings.cached_tokens,
                    "cached_input_tokens": timings.cached_tokens,
                    "output_tokens": timings.generated_tokens,
                },
                "timings": timings.as_dict(),
            }
        )
        LOGGER.debug("Slot %s timings: %s", slot, timings)
