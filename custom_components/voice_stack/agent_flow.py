"""The agent subentry flow: add or change a conversation agent or an AI Task entity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import probatio
from homeassistant.config_entries import (
    ConfigEntry,
    ConfigEntryState,
    ConfigSubentryFlow,
    SubentryFlowResult,
)
from homeassistant.const import CONF_NAME
from homeassistant.core import HomeAssistant
from homeassistant.helpers import llm
from homeassistant.helpers.selector import (
    BooleanSelector,
    NumberSelector,
    NumberSelectorConfig,
    NumberSelectorMode,
    SelectOptionDict,
    SelectSelector,
    SelectSelectorConfig,
    SelectSelectorMode,
    TemplateSelector,
)

from .agent import slot_pool
from .const import (
    AGENT_DEFAULTS,
    CONF_LLM_HASS_API,
    CONF_MAX_HISTORY,
    CONF_MAX_TOKENS,
    CONF_MODEL,
    CONF_PROMPT,
    CONF_PROMPT_LAYOUT,
    CONF_REASONING,
    CONF_SAVE_SLOT,
    CONF_SLOTS,
    CONF_TEMPERATURE,
    CONF_TIMEOUT,
    DEFAULT_AI_TASK_NAME,
    DEFAULT_CONVERSATION_NAME,
    DOCS_URL,
    LAYOUT_OPTIONS,
    MAX_TIMEOUT,
    MIN_TIMEOUT,
    REASONING_OPTIONS,
    SUBENTRY_AI_TASK,
    SUBENTRY_CONVERSATION,
)
from .errors import LlamaError, LlamaLoadingError
from .models import VoiceStackConfigEntry

_INT_KEYS = (CONF_MAX_TOKENS, CONF_MAX_HISTORY)
_DOCS = {"docs_url": f"{DOCS_URL}/agent.md"}


def default_agent_data(slots: list[int]) -> dict[str, Any]:
    """Options of a new conversation agent on these slots."""
    return {
        CONF_SLOTS: slots,
        CONF_PROMPT: llm.DEFAULT_INSTRUCTIONS_PROMPT,
        CONF_LLM_HASS_API: [llm.LLM_API_ASSIST],
        **AGENT_DEFAULTS,
    }


def free_slot(entry: ConfigEntry, total_slots: int) -> int:
    """The lowest slot no agent of this server uses (lower slots are served first)."""
    used = {slot for s in entry.subentries.values() for slot in slot_pool(s.data)}
    return next((n for n in range(max(total_slots, 1)) if n not in used), 0)


def _saved(user_input: Mapping[str, Any]) -> dict[str, Any]:
    """Form values as they are stored: numbers as ints, the slots as a sorted int list."""
    data: dict[str, Any] = {k: int(v) if k in _INT_KEYS else v for k, v in user_input.items()}
    slots: list[Any] = user_input.get(CONF_SLOTS) or [0]
    data[CONF_SLOTS] = sorted({int(s) for s in slots})
    return data


class VoiceStackAgentFlow(ConfigSubentryFlow):
    """Add or change an agent (conversation or AI Task)."""

    @property
    def _is_new(self) -> bool:
        return self.source == "user"

    async def async_step_user(self, user_input: dict[str, Any] | None = None) -> SubentryFlowResult:
        """New agent."""
        return await self.async_step_set_options(user_input)

    async def async_step_reconfigure(
        self, user_input: dict[str, Any] | None = None
    ) -> SubentryFlowResult:
        """Change an agent."""
        return await self.async_step_set_options(user_input)

    async def async_step_set_options(
        self, user_input: dict[str, Any] | None = None
    ) -> SubentryFlowResult:
        """One form with every agent option."""
        entry: VoiceStackConfigEntry = self._get_entry()
        if entry.state is not ConfigEntryState.LOADED:
            return self.async_abort(reason="entry_not_loaded")
        if user_input is not None:
            data = _saved(user_input)
            if self._is_new:
                return self.async_create_entry(title=str(data.pop(CONF_NAME)), data=data)
            return self.async_update_and_abort(entry, self._get_reconfigure_subentry(), data=data)
        try:
            models = await entry.runtime_data.client.models()
        except LlamaLoadingError:
            return self.async_abort(reason="model_loading")
        except LlamaError:
            return self.async_abort(reason="cannot_connect")
        llm_data = entry.runtime_data.coordinators.llm.data
        total = (llm_data.total_slots if llm_data else None) or 1
        options = self._current_options(entry, total)
        # llama-server serves one model unless run as a router: show it as the current one.
        options[CONF_MODEL] = options.get(CONF_MODEL) or (models[0] if models else "")
        schema = agent_schema(
            self.hass,
            is_new=self._is_new,
            subentry_type=self._subentry_type,
            options=options,
            models=models,
            total_slots=total,
        )
        return self.async_show_form(
            step_id="set_options", data_schema=schema, description_placeholders=_DOCS
        )

    def _current_options(self, entry: ConfigEntry, total: int) -> dict[str, Any]:
        if not self._is_new:
            return dict(self._get_reconfigure_subentry().data)
        options = default_agent_data([free_slot(entry, total)])
        if self._subentry_type == SUBENTRY_AI_TASK:
            options[CONF_LLM_HASS_API] = []
        return options


def _slot_selector(total: int, chosen: list[int]) -> SelectSelector:
    """A box per server slot (and any chosen slot the server does not have, to unpick it)."""
    numbers = sorted({*range(total), *chosen})
    return SelectSelector(
        SelectSelectorConfig(
            options=[SelectOptionDict(value=str(n), label=f"Slot {n}") for n in numbers],
            multiple=True,
            mode=SelectSelectorMode.LIST,
        )
    )


def _number(low: float, high: float, step: float, unit: str | None = None) -> NumberSelector:
    mode = NumberSelectorMode.SLIDER if step < 1 else NumberSelectorMode.BOX
    config = NumberSelectorConfig(min=low, max=high, step=step, mode=mode)
    if unit:
        config["unit_of_measurement"] = unit
    return NumberSelector(config)


def _choice(options: list[str], key: str) -> SelectSelector:
    return SelectSelector(
        SelectSelectorConfig(options=options, translation_key=key, mode=SelectSelectorMode.DROPDOWN)
    )


def agent_schema(
    hass: HomeAssistant,
    *,
    is_new: bool,
    subentry_type: str,
    options: Mapping[str, Any],
    models: list[str],
    total_slots: int,
) -> probatio.Schema:
    """The agent options form; current values are suggested, not defaulted."""
    conversation = subentry_type == SUBENTRY_CONVERSATION
    suggested = {**options, CONF_SLOTS: [str(s) for s in slot_pool(options)]}

    def opt(key: str, required: bool = False) -> Any:
        marker = probatio.Required if required else probatio.Optional
        return marker(key, description={"suggested_value": suggested.get(key)})

    schema: dict[Any, Any] = {}
    if is_new:
        name = DEFAULT_CONVERSATION_NAME if conversation else DEFAULT_AI_TASK_NAME
        schema[probatio.Required(CONF_NAME, default=name)] = str
    schema[opt(CONF_MODEL)] = SelectSelector(
        SelectSelectorConfig(
            options=[SelectOptionDict(label=m, value=m) for m in models], custom_value=True
        )
    )
    if conversation:
        apis = [SelectOptionDict(label=api.name, value=api.id) for api in llm.async_get_apis(hass)]
        schema[opt(CONF_PROMPT)] = TemplateSelector()
        schema[opt(CONF_LLM_HASS_API)] = SelectSelector(
            SelectSelectorConfig(options=apis, multiple=True)
        )
    schema[opt(CONF_SLOTS, required=True)] = _slot_selector(total_slots, list(slot_pool(options)))
    schema[opt(CONF_TEMPERATURE, required=True)] = _number(0, 2, 0.05)
    schema[opt(CONF_MAX_TOKENS, required=True)] = _number(1, 32768, 1)
    if conversation:
        schema[opt(CONF_MAX_HISTORY, required=True)] = _number(0, 200, 1)
    schema[opt(CONF_TIMEOUT, required=True)] = _number(MIN_TIMEOUT, MAX_TIMEOUT, 1, "s")
    schema[opt(CONF_REASONING, required=True)] = _choice(REASONING_OPTIONS, CONF_REASONING)
    schema[opt(CONF_PROMPT_LAYOUT, required=True)] = _choice(LAYOUT_OPTIONS, CONF_PROMPT_LAYOUT)
    schema[opt(CONF_SAVE_SLOT, required=True)] = BooleanSelector()
    return probatio.Schema(schema)
