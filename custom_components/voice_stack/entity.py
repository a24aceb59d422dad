"""Base entity for Voice Stack agents: one slot, one cache-stable prompt."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import aclosing, contextmanager
from typing import Any

import probatio
from homeassistant.components import conversation
from homeassistant.config_entries import ConfigSubentry
from homeassistant.core import Context, HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from homeassistant.helpers import llm
from homeassistant.helpers.dispatcher import async_dispatcher_send
from homeassistant.helpers.entity import Entity
from homeassistant.util import dt as dt_util

from .client import (
    LlamaAuthError,
    LlamaConnectionError,
    LlamaContextError,
    LlamaError,
    LlamaStreamError,
    LlamaTimeoutError,
)
from .const import (
    AGENT_DEFAULTS,
    CONF_LLM_HASS_API,
    CONF_MAX_HISTORY,
    CONF_MAX_TOKENS,
    CONF_MODEL,
    CONF_PROMPT,
    CONF_PROMPT_LAYOUT,
    CONF_REASONING,
    CONF_SLOT,
    CONF_TEMPERATURE,
    CONF_TIMEOUT,
    DOMAIN,
    LAYOUT_CACHE_STABLE,
    LOGGER,
    MAX_TOOL_ITERATIONS,
    REASONING_DISABLED,
)
from .devices import agent_device_info
from .models import VoiceStackConfigEntry
from .prompt import VolatileContext, build_messages, format_tools, split_system_prompt
from .stream import StreamResult, transform_stream
from .timings import Timings, parse_timings, signal_timings


@contextmanager
def translate_errors(
    hass: HomeAssistant, entry: VoiceStackConfigEntry, timeout: float
) -> Iterator[None]:
    """Turn client errors into short translated messages the user hears."""
    try:
        yield
    except LlamaAuthError as err:
        entry.async_start_reauth(hass)
        raise HomeAssistantError(translation_domain=DOMAIN, translation_key="invalid_auth") from err
    except LlamaTimeoutError as err:
        raise HomeAssistantError(
            translation_domain=DOMAIN,
            translation_key="timeout",
            translation_placeholders={"seconds": f"{timeout:g}"},
        ) from err
    except LlamaConnectionError as err:
        raise HomeAssistantError(
            translation_domain=DOMAIN, translation_key="cannot_connect"
        ) from err
    except LlamaContextError as err:
        raise HomeAssistantError(
            translation_domain=DOMAIN,
            translation_key="context_full",
            translation_placeholders={
                "prompt": str(err.n_prompt_tokens or "?"),
                "n_ctx": str(err.n_ctx or "?"),
            },
        ) from err
    except LlamaStreamError as err:
        raise HomeAssistantError(
            translation_domain=DOMAIN, translation_key="stream_broken"
        ) from err
    except LlamaError as err:
        raise HomeAssistantError(
            translation_domain=DOMAIN,
            translation_key="server_error",
            translation_placeholders={"message": str(err)[:200]},
        ) from err


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


class VoiceStackLLMEntity(Entity):
    """Shared logic of the conversation and AI Task entities."""

    _attr_has_entity_name = True
    _attr_name = None

    def __init__(self, entry: VoiceStackConfigEntry, subentry: ConfigSubentry) -> None:
        """Bind the entity to its server entry and agent subentry."""
        self.entry = entry
        self.subentry = subentry
        self._attr_unique_id = subentry.subentry_id
        self._volatile = VolatileContext()
        self._attr_device_info = agent_device_info(subentry)

    async def async_added_to_hass(self) -> None:
        """Let the warmer prime this agent's slot."""
        await super().async_added_to_hass()
        if (warmer := self.entry.runtime_data.warmer) is not None:
            warmer.register(self)
            self.async_on_remove(lambda: warmer.unregister(self))

    def option(self, key: str) -> Any:
        """Return an agent option, falling back to AGENT_DEFAULTS (None where it has none)."""
        return self.subentry.data.get(key, AGENT_DEFAULTS.get(key))

    @property
    def slot(self) -> int:
        """The llama-server slot this agent owns."""
        return int(self.subentry.data.get(CONF_SLOT, 0))

    @property
    def cache_stable(self) -> bool:
        """Whether the cache-stable prompt layout is on."""
        return bool(self.option(CONF_PROMPT_LAYOUT) == LAYOUT_CACHE_STABLE)

    def base_payload(self) -> dict[str, Any]:
        """Request fields shared by every call of this agent (pinned, cached)."""
        payload: dict[str, Any] = {
            "id_slot": self.slot,
            "cache_prompt": True,
            "temperature": float(self.option(CONF_TEMPERATURE)),
            "max_tokens": int(self.option(CONF_MAX_TOKENS)),
        }
        if model := self.option(CONF_MODEL):
            payload["model"] = model
        if self.option(CONF_REASONING) == REASONING_DISABLED:
            payload["chat_template_kwargs"] = {"enable_thinking": False}
        return payload

    async def async_stable_prefix(self) -> tuple[str, list[dict[str, Any]]]:
        """Render this agent's stable system text and tools, as a turn would."""
        chat_log = conversation.ChatLog(self.hass, "voice_stack_warm")
        await chat_log.async_provide_llm_data(
            llm.LLMContext(
                platform=DOMAIN,
                context=Context(),
                language=self.hass.config.language,
                assistant=conversation.DOMAIN,
                device_id=None,
            ),
            self.option(CONF_LLM_HASS_API),
            self.prompt_template(),
        )
        first = chat_log.content[0]
        system = first.content if isinstance(first, conversation.SystemContent) else ""
        if self.cache_stable:
            system, _ = split_system_prompt(system, chat_log.extra_system_prompt)
        return system, format_tools(chat_log.llm_api, stable_order=self.cache_stable)

    def prompt_template(self) -> str | None:
        """The user's instructions template (AI Task overrides it)."""
        value = self.subentry.data.get(CONF_PROMPT)
        return str(value) if value else None

    async def _async_handle_chat_log(
        self,
        chat_log: conversation.ChatLog,
        structure_name: str | None = None,
        structure: probatio.Schema | None = None,
    ) -> None:
        """Run the tool loop: stream a reply, let HA call tools, repeat."""
        timeout = float(self.option(CONF_TIMEOUT))
        tools = format_tools(chat_log.llm_api, stable_order=self.cache_stable)
        payload = self.base_payload()
        if structure and structure_name:
            payload["response_format"] = structured_output(
                structure_name, structure, chat_log.llm_api
            )
        for iteration in range(MAX_TOOL_ITERATIONS):
            messages = build_messages(
                chat_log,
                layout=self.option(CONF_PROMPT_LAYOUT),
                max_turns=int(self.option(CONF_MAX_HISTORY)),
                volatile_context=self._volatile,
            )
            request = {**payload, "messages": messages}
            # The last round offers no tools so the model has to answer in words.
            if tools and iteration < MAX_TOOL_ITERATIONS - 1:
                request["tools"] = tools
            result = StreamResult()
            with translate_errors(self.hass, self.entry, timeout):
                try:
                    async with aclosing(
                        self.entry.runtime_data.client.stream(request, timeout)
                    ) as chunks:
                        async for _ in chat_log.async_add_delta_content_stream(
                            self.entity_id, transform_stream(chunks, result)
                        ):
                            pass
                except LlamaContextError as err:
                    if (warmer := self.entry.runtime_data.warmer) is not None:
                        warmer.async_context_error(
                            self.subentry, self.slot, err.n_prompt_tokens, err.n_ctx
                        )
                    raise
            self._publish(chat_log, result)
            if not chat_log.unresponded_tool_results:
                break
        if (warmer := self.entry.runtime_data.warmer) is not None:
            warmer.async_request_ok(self.subentry.subentry_id)

    def _publish(self, chat_log: conversation.ChatLog, result: StreamResult) -> None:
        """Keep, dispatch and trace the timings of one reply."""
        if result.timings is None:
            return
        timings: Timings = parse_timings(
            result.timings,
            slot=self.slot,
            time_to_first_token_ms=result.first_token_ms,
            received_at=dt_util.utcnow(),
        )
        self.entry.runtime_data.timings[self.subentry.subentry_id] = timings
        async_dispatcher_send(
            self.hass, signal_timings(self.entry.entry_id), self.subentry.subentry_id, timings
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
        LOGGER.debug("Slot %s timings: %s", self.slot, timings)
