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
from .errors import ModelLoadingError, ServiceError
from .runtime import VoiceStackConfigEntry
from .slot_offer import SlotOffer, slot_offer

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


def _saved(user_input: Mapping[str, Any]) -> dict[str, Any]:
    """Form values as they are stored: numbers as ints, the slots as a sorted int list."""
    data: dict[str, Any] = {k: int(v) if k in _INT_KEYS else v for k, v in user_input.items()}
    data[CONF_SLOTS] = sorted({int(s) for s in user_input.get(CONF_SLOTS) or []})
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
        """One form with every agent option; slots only the free reserved ones (see slot_offer).

        Sent with no slot (nothing was free), it is shown again from a fresh look at the
        proxy, so a slot reserved on the GPU host meanwhile is offered without starting over.
        """
        entry: VoiceStackConfigEntry = self._get_entry()
        if entry.state is not ConfigEntryState.LOADED:
            return self.async_abort(reason="entry_not_loaded")
        errors: dict[str, str] = {}
        data = _saved(user_input) if user_input is not None else None
        if data is not None and data[CONF_SLOTS]:
            if set(data[CONF_SLOTS]) & {s for _, pool in self._others(entry) for s in pool}:
                errors[CONF_SLOTS] = "slot_taken"  # another form took it since this one opened
            elif self._is_new:
                return self.async_create_entry(title=str(data.pop(CONF_NAME)), data=data)
            else:
                sub = self._get_reconfigure_subentry()
                return self.async_update_and_abort(entry, sub, data=data)
        try:
            models = await entry.runtime_data.client.models()
        except ModelLoadingError:
            return self.async_abort(reason="model_loading")
        except ServiceError:
            return self.async_abort(reason="cannot_connect")
        offer = await self._offer(entry)
        options = self._current_options(offer, data)
        if offer.error and not set(options[CONF_SLOTS]) & set(offer.choices):
            errors["base"] = offer.error
        elif data is not None and not data[CONF_SLOTS]:
            errors[CONF_SLOTS] = "no_slot_picked"
        # llama-server serves one model unless run as a router: show it as the current one.
        options[CONF_MODEL] = options.get(CONF_MODEL) or (models[0] if models else "")
        schema = agent_schema(
            self.hass,
            is_new=self._is_new,
            subentry_type=self._subentry_type,
            options=options,
            models=models,
            slot_choices=offer.choices,
        )
        return self.async_show_form(
            step_id="set_options",
            data_schema=schema,
            errors=errors,
            description_placeholders={**_DOCS, **offer.placeholders},
        )

    def _others(self, entry: ConfigEntry) -> list[tuple[str, tuple[int, ...]]]:
        """The other agents of this server: (title, slot pool)."""
        own = None if self._is_new else self._reconfigure_subentry_id
        return [
            (sub.title, slot_pool(sub.data))
            for sub in entry.subentries.values()
            if sub.subentry_id != own
        ]

    async def _offer(self, entry: VoiceStackConfigEntry) -> SlotOffer:
        """The slots to offer, from what the proxy reserves now (not up to a poll ago)."""
        coordinators = entry.runtime_data.coordinators
        await coordinators.proxy.async_refresh()
        status = coordinators.proxy.data.status if coordinators.proxy.data else None
        llm_data = coordinators.llm.data
        own = () if self._is_new else slot_pool(self._get_reconfigure_subentry().data)
        return slot_offer(
            (llm_data.total_slots if llm_data else None) or 1,
            status.reserved_slots if status else None,
            self._others(entry),
            own,
        )

    def _current_options(self, offer: SlotOffer, sent: dict[str, Any] | None) -> dict[str, Any]:
        """What the form shows: what was sent (its slots that are still offered, else the
        default), else the agent's options, else a new agent's defaults on the free slot."""
        current = None if self._is_new else self._get_reconfigure_subentry().data
        default = offer.default if current is None else list(slot_pool(current))
        if sent is not None:
            kept = [s for s in sent[CONF_SLOTS] if s in offer.choices]
            return {**sent, CONF_SLOTS: kept or default}
        if current is not None:
            return {**current, CONF_SLOTS: default}
        options = default_agent_data(default)
        if self._subentry_type == SUBENTRY_AI_TASK:
            options[CONF_LLM_HASS_API] = []
        return options


def _slot_selector(choices: tuple[int, ...]) -> SelectSelector:
    """A box per slot offered (the free reserved ones, and the agent's own to keep or unpick)."""
    return SelectSelector(
        SelectSelectorConfig(
            options=[SelectOptionDict(value=str(n), label=f"Slot {n}") for n in choices],
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
    slot_choices: tuple[int, ...],
) -> probatio.Schema:
    """The agent options form; current values are suggested, not defaulted."""
    conversation = subentry_type == SUBENTRY_CONVERSATION
    suggested = {**options, CONF_SLOTS: [str(s) for s in options.get(CONF_SLOTS) or []]}

    def opt(key: str, required: bool = False) -> Any:
        marker = probatio.Required if required else probatio.Optional
        return marker(key, description={"suggested_value": suggested.get(key)})

    schema: dict[Any, Any] = {}
    if is_new:
        name = DEFAULT_CONVERSATION_NAME if conversation else DEFAULT_AI_TASK_NAME
        shown = {"suggested_value": options[CONF_NAME]} if CONF_NAME in options else None
        schema[probatio.Required(CONF_NAME, default=name, description=shown)] = str
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
    # Nothing to offer: the form can still be sent, to look at the proxy again.
    schema[opt(CONF_SLOTS, required=bool(slot_choices))] = _slot_selector(slot_choices)
    schema[opt(CONF_TEMPERATURE, required=True)] = _number(0, 2, 0.05)
    schema[opt(CONF_MAX_TOKENS, required=True)] = _number(1, 32768, 1)
    if conversation:
        schema[opt(CONF_MAX_HISTORY, required=True)] = _number(0, 200, 1)
    schema[opt(CONF_TIMEOUT, required=True)] = _number(MIN_TIMEOUT, MAX_TIMEOUT, 1, "s")
    schema[opt(CONF_REASONING, required=True)] = _choice(REASONING_OPTIONS, CONF_REASONING)
    schema[opt(CONF_PROMPT_LAYOUT, required=True)] = _choice(LAYOUT_OPTIONS, CONF_PROMPT_LAYOUT)
    schema[opt(CONF_SAVE_SLOT, required=True)] = BooleanSelector()
    return probatio.Schema(schema)
