"""The agent object shared by its entity and the warm-up: options, slot pool, request, prefix."""

from __future__ import annotations

from types import MappingProxyType

from homeassistant.components.ai_task.const import DEFAULT_SYSTEM_PROMPT
from homeassistant.config_entries import ConfigSubentry
from homeassistant.core import HomeAssistant
from homeassistant.helpers import llm

from custom_components.voice_stack.agent import Agent, slot_pool
from custom_components.voice_stack.const import (
    CONF_LLM_HASS_API,
    CONF_MODEL,
    CONF_REASONING,
    REASONING_DISABLED,
    SUBENTRY_AI_TASK,
)
from tests.integration.helpers import TIME_API_ID, GetTimeTool, TimeAPI, agent


def _agent(hass: HomeAssistant, *slots: int, **opts: object) -> Agent:
    raw = agent(*slots, **opts)
    return Agent(
        hass,
        ConfigSubentry(
            data=MappingProxyType(raw["data"]),
            subentry_type=raw["subentry_type"],
            title=raw["title"],
            unique_id=None,
        ),
    )


def test_slot_pool_reads_any_list() -> None:
    assert slot_pool({"slots": [2, 0, 2]}) == (0, 2)
    assert slot_pool({"slots": []}) == (0,)
    assert slot_pool({}) == (0,)


async def test_request_fields(hass: HomeAssistant) -> None:
    """Pinned, cached, the model and thinking switch as configured."""
    plain = _agent(hass, 3)
    assert plain.slots == (3,)
    assert plain.request(3) == {
        "id_slot": 3,
        "cache_prompt": True,
        "temperature": 0.6,
        "max_tokens": 512,
    }
    tuned = _agent(hass, 1, 0, **{CONF_MODEL: "m", CONF_REASONING: REASONING_DISABLED})
    assert tuned.slots == (0, 1)
    request = tuned.request(1)
    assert (request["model"], request["chat_template_kwargs"]) == ("m", {"enable_thinking": False})
    warm = tuned.warm_request(1, "system", [{"type": "function"}])
    assert (warm["max_tokens"], warm["n_predict"], warm["id_slot"]) == (0, 0, 1)
    assert warm["messages"][0] == {"role": "system", "content": "system"}
    assert warm["tools"] == [{"type": "function"}]


async def test_stable_prefix_and_prompts(hass: HomeAssistant) -> None:
    """The prefix is rendered as a turn renders it; AI Task uses HA's own task prompt."""
    llm.async_register_api(hass, TimeAPI(hass, GetTimeTool()))
    chatty = _agent(hass, 0, **{CONF_LLM_HASS_API: [TIME_API_ID]})
    assert chatty.llm_apis == [TIME_API_ID]
    system, tools = await chatty.stable_prefix()
    assert "Use get_time for the time." in system
    assert [t["function"]["name"] for t in tools] == ["another_tool", "get_time"]
    task = _agent(hass, 0, kind=SUBENTRY_AI_TASK)
    assert task.prompt_template() == DEFAULT_SYSTEM_PROMPT
    assert task.llm_apis == []
