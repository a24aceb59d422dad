"""Helpers shared by the integration tests: entries pointing at real (or fake) servers, their
setup through HA, a test tool API."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import probatio
from homeassistant.config_entries import ConfigEntryState
from homeassistant.core import HomeAssistant
from homeassistant.helpers import llm
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.config_flow import default_agent_data
from custom_components.voice_stack.const import (
    CONF_API_KEY,
    CONF_LLM_HASS_API,
    CONF_URL,
    DOMAIN,
    SUBENTRY_AI_TASK,
    SUBENTRY_CONVERSATION,
)
from voice_stack_dev.llama import LlamaServer

TIME_API_ID = "voice_stack_test_time"
TIME_RESULT = {"time": "12:34", "date": "2026-11-30"}


class GetTimeTool(llm.Tool):
    """The tool the tiny tool model always calls."""

    name = "get_time"
    description = "Return the current time."
    parameters = probatio.Schema({})
    integration = "voice_stack_test"

    def __init__(self) -> None:
        """Count calls."""
        self.calls = 0

    async def async_call(
        self, hass: HomeAssistant, tool_input: llm.ToolInput, llm_context: llm.LLMContext
    ) -> llm.ToolResult:
        """Answer with a fixed time."""
        self.calls += 1
        return llm.ToolResult(data=TIME_RESULT)


class EchoTool(llm.Tool):
    """A second tool, to check the stable (sorted) order."""

    name = "another_tool"
    description = "Unused."
    parameters = probatio.Schema({})
    integration = "voice_stack_test"

    async def async_call(
        self, hass: HomeAssistant, tool_input: llm.ToolInput, llm_context: llm.LLMContext
    ) -> llm.ToolResult:
        """Never called by the tiny model."""
        return llm.ToolResult(data={})


class TimeAPI(llm.API):
    """An LLM API exposing get_time, registered the way integrations do."""

    def __init__(self, hass: HomeAssistant, tool: GetTimeTool, prompt: str = "") -> None:
        """Keep the tool instance so tests can count calls."""
        super().__init__(hass=hass, id=TIME_API_ID, name="Test time")
        self.tool = tool
        self.prompt = prompt

    async def async_get_api_instance(self, llm_context: llm.LLMContext) -> llm.APIInstance:
        """Tools in an unsorted order; the prompt may carry an area sentence."""
        return llm.APIInstance(
            api=self,
            api_prompt=self.prompt or "Use get_time for the time.",
            llm_context=llm_context,
            tools=[self.tool, EchoTool()],
        )


def agent(
    slot: int, *, kind: str = SUBENTRY_CONVERSATION, title: str | None = None, **opts: Any
) -> dict[str, Any]:
    """Subentry data for MockConfigEntry(subentries_data=...)."""
    data = {**default_agent_data(slot), CONF_LLM_HASS_API: [], **opts}
    if kind == SUBENTRY_AI_TASK:
        data.pop(CONF_LLM_HASS_API, None)
    return {
        "subentry_type": kind,
        "data": data,
        "title": title or f"Agent slot {slot}",
        "unique_id": None,
    }


def make_entry(url: str, api_key: str | None, subentries: list[dict[str, Any]]) -> MockConfigEntry:
    """A config entry for one server."""
    return MockConfigEntry(
        domain=DOMAIN,
        title="llama",
        unique_id=url,
        data={CONF_URL: url, CONF_API_KEY: api_key or ""},
        subentries_data=subentries,
    )


async def setup_entry(hass: HomeAssistant, entry: MockConfigEntry) -> None:
    """Add and load the entry with HA's own setup path."""
    assert await async_setup_component(hass, "homeassistant", {})
    entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED


def server_get(server: LlamaServer, path: str) -> Any:
    """Blocking GET with the server's key (for assertions only, outside the event loop's way)."""
    req = urllib.request.Request(server.url + path, headers=server.headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def slot_state(server: LlamaServer, slot: int) -> dict[str, Any]:
    """One entry of /slots."""
    return next(s for s in server_get(server, "/slots") if s["id"] == slot)
