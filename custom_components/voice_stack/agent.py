"""One agent (a conversation or AI Task subentry): its options, its slots and its prompt.

The agent's entity and the slot warm-up share this object, so both render the same stable
prefix (through HA's public chat session and chat log, as a turn does) and send the same
request fields; neither holds the other.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Final

from homeassistant.components import conversation
from homeassistant.components.ai_task.const import DEFAULT_SYSTEM_PROMPT
from homeassistant.config_entries import ConfigSubentry
from homeassistant.core import Context, HomeAssistant
from homeassistant.helpers import chat_session, llm

from .const import (
    AGENT_DEFAULTS,
    CONF_LLM_HASS_API,
    CONF_MAX_TOKENS,
    CONF_MODEL,
    CONF_PROMPT,
    CONF_PROMPT_LAYOUT,
    CONF_REASONING,
    CONF_SAVE_SLOT,
    CONF_SLOTS,
    CONF_TEMPERATURE,
    DOMAIN,
    LAYOUT_CACHE_STABLE,
    REASONING_DISABLED,
    SUBENTRY_AI_TASK,
)
from .prompt import VolatileContext, format_tools, split_system_prompt

# The warm-up acts for no user: HA 2026.11 wants that said (context=None; without it HA warns
# that the call stops working in 2027.5); HA 2026.10 takes no context.
_NO_USER: Final[dict[str, Any]] = (
    {"context": None}
    if "context" in inspect.signature(chat_session.async_get_chat_session).parameters
    else {}
)


def slot_pool(data: Mapping[str, Any]) -> tuple[int, ...]:
    """The slots an agent's options name, lowest first (slot 0 when none are named)."""
    raw = data.get(CONF_SLOTS)
    slots = sorted({int(s) for s in raw}) if isinstance(raw, list | tuple) and raw else [0]
    return tuple(slots)


class Agent:
    """What an agent is configured to do, independent of any entity."""

    def __init__(self, hass: HomeAssistant, subentry: ConfigSubentry) -> None:
        """Bind to the subentry (reloads build a new Agent when the options change)."""
        self.hass = hass
        self.subentry = subentry
        self.slots = slot_pool(subentry.data)
        self.volatile = VolatileContext()

    @property
    def id(self) -> str:
        """The subentry id (also the agent entity's unique id)."""
        return self.subentry.subentry_id

    @property
    def title(self) -> str:
        """The agent's name as the user gave it."""
        return self.subentry.title

    def option(self, key: str) -> Any:
        """An agent option, falling back to AGENT_DEFAULTS (None where it has none)."""
        return self.subentry.data.get(key, AGENT_DEFAULTS.get(key))

    @property
    def llm_apis(self) -> list[str]:
        """The LLM APIs ("Control Home Assistant") the agent may use; none for AI Task."""
        apis = self.subentry.data.get(CONF_LLM_HASS_API)
        return [str(api) for api in apis] if isinstance(apis, list) else []

    @property
    def cache_stable(self) -> bool:
        """Whether the cache-stable prompt layout is on."""
        return bool(self.option(CONF_PROMPT_LAYOUT) == LAYOUT_CACHE_STABLE)

    @property
    def save_slot(self) -> bool:
        """Whether the warm slot is saved to disk and restored after a server restart."""
        return bool(self.option(CONF_SAVE_SLOT))

    @property
    def max_tokens(self) -> int:
        """The longest reply the agent asks for."""
        return int(self.option(CONF_MAX_TOKENS))

    def prompt_template(self) -> str | None:
        """The instructions template: the user's, or HA's own task prompt for AI Task."""
        if self.subentry.subentry_type == SUBENTRY_AI_TASK:
            return DEFAULT_SYSTEM_PROMPT
        value = self.subentry.data.get(CONF_PROMPT)
        return str(value) if value else None

    def request(self, slot: int) -> dict[str, Any]:
        """Request fields shared by every call of this agent (pinned to `slot`, cached)."""
        payload: dict[str, Any] = {
            "id_slot": slot,
            "cache_prompt": True,
            "temperature": float(self.option(CONF_TEMPERATURE)),
            "max_tokens": self.max_tokens,
        }
        if model := self.option(CONF_MODEL):
            payload["model"] = model
        if self.option(CONF_REASONING) == REASONING_DISABLED:
            payload["chat_template_kwargs"] = {"enable_thinking": False}
        return payload

    async def stable_prefix(self) -> tuple[str, list[dict[str, Any]]]:
        """Render the stable system text and tools through the path a turn takes: a chat
        session's chat log, given the LLM data as the agent's entity gives it."""
        with (
            chat_session.async_get_chat_session(self.hass, **_NO_USER) as session,
            conversation.async_get_chat_log(self.hass, session) as chat_log,
        ):
            await chat_log.async_provide_llm_data(
                llm.LLMContext(
                    platform=DOMAIN,
                    context=Context(),
                    language=self.hass.config.language,
                    assistant=conversation.DOMAIN,
                    device_id=None,
                ),
                self.llm_apis or None,
                self.prompt_template(),
            )
        first = chat_log.content[0]
        system = first.content if isinstance(first, conversation.SystemContent) else ""
        if self.cache_stable:
            system, _ = split_system_prompt(system, chat_log.extra_system_prompt)
        return system, format_tools(chat_log.llm_api, stable_order=self.cache_stable)

    def warm_request(self, slot: int, system: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
        """A request that evaluates the stable prefix into `slot` and generates nothing."""
        request = {
            **self.request(slot),
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": ""},
            ],
            "max_tokens": 0,
            "n_predict": 0,
        }
        if tools:
            request["tools"] = tools
        return request
