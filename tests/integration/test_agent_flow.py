"""The agent subentry flow: add a conversation agent or an AI Task, change one."""

from __future__ import annotations

from typing import Any

import pytest
from homeassistant.config_entries import SOURCE_USER
from homeassistant.const import CONF_NAME
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import (
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
    SUBENTRY_AI_TASK,
    SUBENTRY_CONVERSATION,
)
from tests.integration.conftest import Server
from tests.integration.fakes import FAKE_KEY, LOADING_BODY, FakeLlama
from tests.integration.helpers import setup_entry
from voice_stack_dev.llama import LlamaServer


def _options(**over: Any) -> dict[str, Any]:
    return {
        CONF_MODEL: "tiny-text.gguf",
        CONF_SLOTS: ["1"],
        CONF_TEMPERATURE: 0.2,
        CONF_MAX_TOKENS: 64.0,
        CONF_TIMEOUT: 30.0,
        CONF_REASONING: "disabled",
        CONF_PROMPT_LAYOUT: "cache_stable",
        CONF_SAVE_SLOT: False,
        **over,
    }


def _suggested(result: Any) -> dict[str, Any]:
    schema = result["data_schema"].schema
    return {
        str(k): k.description["suggested_value"] for k in schema if getattr(k, "description", None)
    }


def _slot_choices(result: Any) -> list[str]:
    field = next(v for k, v in result["data_schema"].schema.items() if str(k) == CONF_SLOTS)
    return [o["value"] for o in field.config["options"]]


@pytest.fixture
def server(llama_text: LlamaServer) -> Server:
    return Server.of(llama_text)


async def test_add_and_change_agents(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """A new agent gets the lowest free slot and the served model; slots are a list of the
    server's slots; AI Task has no prompt; reconfigure shows the current values."""
    entry = init_integration
    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_CONVERSATION), context={"source": SOURCE_USER}
    )
    assert result["type"] is FlowResultType.FORM
    suggested = _suggested(result)
    assert suggested[CONF_SLOTS] == ["1"]
    assert suggested[CONF_MODEL].endswith("tiny-text.gguf")
    assert _slot_choices(result) == ["0", "1", "2", "3"]
    result = await hass.config_entries.subentries.async_configure(
        result["flow_id"],
        {
            CONF_NAME: "Kitchen",
            **_options(
                **{
                    CONF_SLOTS: ["2", "1"],
                    CONF_PROMPT: "Be brief.",
                    CONF_LLM_HASS_API: ["assist"],
                    CONF_MAX_HISTORY: 4.0,
                }
            ),
        },
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    kitchen = next(s for s in entry.subentries.values() if s.title == "Kitchen")
    assert kitchen.data[CONF_SLOTS] == [1, 2]
    assert isinstance(kitchen.data[CONF_MAX_TOKENS], int)
    await hass.async_block_till_done()

    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_AI_TASK), context={"source": SOURCE_USER}
    )
    assert CONF_PROMPT not in {str(k) for k in result["data_schema"].schema}
    assert _suggested(result)[CONF_SLOTS] == ["3"]
    result = await hass.config_entries.subentries.async_configure(
        result["flow_id"], {CONF_NAME: "Tasks", **_options(**{CONF_SLOTS: ["3"]})}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    await hass.async_block_till_done()

    result = await entry.start_subentry_reconfigure_flow(hass, kitchen.subentry_id)
    assert result["type"] is FlowResultType.FORM
    assert _suggested(result)[CONF_SLOTS] == ["1", "2"]
    result = await hass.config_entries.subentries.async_configure(
        result["flow_id"],
        _options(
            **{
                CONF_SLOTS: ["3"],
                CONF_PROMPT: "Be brief.",
                CONF_LLM_HASS_API: [],
                CONF_MAX_HISTORY: 4.0,
            }
        ),
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "reconfigure_successful"
    assert entry.subentries[kitchen.subentry_id].data[CONF_SLOTS] == [3]


async def test_reconfigure_shows_the_served_model(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """An agent that names no model shows the model the server serves, not an empty field."""
    sub = next(iter(init_integration.subentries.values()))
    assert not sub.data.get(CONF_MODEL)
    result = await init_integration.start_subentry_reconfigure_flow(hass, sub.subentry_id)
    assert _suggested(result)[CONF_MODEL].endswith("tiny-text.gguf")


class TestFakeServer:
    @pytest.fixture
    def server(self, fake: FakeLlama) -> Server:
        return Server(fake.url, FAKE_KEY)

    async def test_aborts_when_the_server_is_gone_or_the_entry_not_loaded(
        self, hass: HomeAssistant, fake: FakeLlama, mock_config_entry: MockConfigEntry
    ) -> None:
        """Server gone after loading: cannot_connect. Not loaded: abort."""
        await setup_entry(hass, mock_config_entry)
        await fake.stop()
        result = await hass.config_entries.subentries.async_init(
            (mock_config_entry.entry_id, SUBENTRY_CONVERSATION), context={"source": SOURCE_USER}
        )
        assert result["reason"] == "cannot_connect"
        await hass.config_entries.async_unload(mock_config_entry.entry_id)
        result = await hass.config_entries.subentries.async_init(
            (mock_config_entry.entry_id, SUBENTRY_CONVERSATION), context={"source": SOURCE_USER}
        )
        assert result["reason"] == "entry_not_loaded"

    async def test_aborts_with_the_reason_while_the_model_loads(
        self, hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
    ) -> None:
        """llama-server restarted and loads its model again (its exact 503 body): the flow says
        so instead of "Failed to connect"."""
        fake.overrides["/v1/models"] = (503, LOADING_BODY)
        result = await hass.config_entries.subentries.async_init(
            (init_integration.entry_id, SUBENTRY_AI_TASK), context={"source": SOURCE_USER}
        )
        assert (result["type"], result["reason"]) == (FlowResultType.ABORT, "model_loading")
