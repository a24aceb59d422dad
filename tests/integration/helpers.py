"""Helpers of the integration suite: agent subentries, a test tool API, looking things up."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import Any

import probatio
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers import issue_registry as ir
from homeassistant.helpers import llm
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.agent_flow import default_agent_data
from custom_components.voice_stack.config_flow import VoiceStackConfigFlow
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
AREA = (
    "You are in area Kitchen and all generic commands like 'turn on the lights' should target"
    " this area."
)


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
    *slots: int, kind: str = SUBENTRY_CONVERSATION, title: str | None = None, **opts: Any
) -> dict[str, Any]:
    """Subentry data for MockConfigEntry(subentries_data=...); no LLM API unless given."""
    data = {**default_agent_data(list(slots or (0,))), CONF_LLM_HASS_API: [], **opts}
    if kind == SUBENTRY_AI_TASK:
        data.pop(CONF_LLM_HASS_API, None)
    return {
        "subentry_type": kind,
        "data": data,
        "title": title or f"Agent slot {','.join(map(str, slots or (0,)))}",
        "unique_id": None,
    }


def agent_entity(hass: HomeAssistant, entry: ConfigEntry, index: int = 0) -> str:
    """The conversation or AI Task entity of the entry's index-th subentry."""
    subentry_id = list(entry.subentries)[index]
    for ent in er.async_entries_for_config_entry(er.async_get(hass), entry.entry_id):
        if ent.config_subentry_id == subentry_id and ent.domain in ("conversation", "ai_task"):
            return ent.entity_id
    raise AssertionError("no agent entity")


def subentry_id(entry: ConfigEntry, index: int = 0) -> str:
    """The id of the entry's index-th subentry."""
    return list(entry.subentries)[index]


def issues(hass: HomeAssistant, entry: ConfigEntry) -> set[str]:
    """The entry's repair issue ids, without the entry id prefix."""
    prefix = f"{entry.entry_id}_"
    return {
        issue_id.removeprefix(prefix)
        for (domain, issue_id) in ir.async_get(hass).issues
        if domain == DOMAIN and issue_id.startswith(prefix)
    }


def issue(hass: HomeAssistant, entry: ConfigEntry, key: str) -> ir.IssueEntry:
    """One issue of the entry by its id without the entry prefix (it must exist)."""
    found = ir.async_get(hass).async_get_issue(DOMAIN, f"{entry.entry_id}_{key}")
    assert found is not None, f"no issue {key}; have {sorted(issues(hass, entry))}"
    return found


def server_get(server: LlamaServer, path: str) -> Any:
    """Blocking GET with the server's key (run it in the executor)."""
    req = urllib.request.Request(server.url + path, headers=server.headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def slot_state(server: LlamaServer, slot: int) -> dict[str, Any]:
    """One entry of /slots (run it in the executor)."""
    return dict(next(s for s in server_get(server, "/slots") if s["id"] == slot))


def stack_entry(
    hass: HomeAssistant, url: str, key: str, *subentries: dict[str, Any], **fields: Any
) -> MockConfigEntry:
    """An entry for the server at url, at the flow's current version unless fields say otherwise,
    added to HA (not set up)."""
    fields.setdefault("minor_version", VoiceStackConfigFlow.MINOR_VERSION)
    entry = MockConfigEntry(
        domain=DOMAIN,
        data={CONF_URL: url, CONF_API_KEY: key},
        subentries_data=list(subentries),
        **fields,
    )
    entry.add_to_hass(hass)
    return entry


async def setup_entry(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Set an added entry up through HA, its first warm-up done (it may fail to load)."""
    assert await async_setup_component(hass, "homeassistant", {})
    await hass.config_entries.async_setup(entry.entry_id)
    await settle(hass)


async def settle(hass: HomeAssistant) -> None:
    """Let every task the integration started (warm-ups included) finish.

    HA's async_block_till_done skips a task that is being cancelled, and anyio (under the
    SDK's httpx2) briefly marks the task that opens a connection as such: the integration's
    own tasks are awaited by name as well.
    """
    while True:
        await hass.async_block_till_done(wait_background_tasks=True)
        ours = [t for t in asyncio.all_tasks() if t.get_name().startswith(DOMAIN) and not t.done()]
        if not ours:
            return
        await asyncio.wait(ours)


async def poll(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Poll every service of the entry once, and let what follows (warm-ups) finish."""
    await settle(hass)  # a reload the test set off comes first
    coordinators = entry.runtime_data.coordinators
    for coordinator in (coordinators.llm, coordinators.proxy, coordinators.gateway):
        if coordinator is not None:
            await coordinator.async_refresh()
    await settle(hass)


def spy_requests(entry: ConfigEntry) -> list[dict[str, Any]]:
    """Record every streamed chat request the agents send (the real client still sends it)."""
    sent: list[dict[str, Any]] = []
    chat = entry.runtime_data.chat
    original = chat.stream

    def spy(request: dict[str, Any], timeout_s: float) -> Any:
        sent.append(request)
        return original(request, timeout_s)

    chat.stream = spy
    return sent


def entities_snapshot(hass: HomeAssistant, entry: ConfigEntry, domain: str) -> dict[str, Any]:
    """The entry's entities of one platform: registry facts and full state, by entity id.

    The fields HA core's snapshot_platform would show, minus those that differ between the two
    HA versions the suite runs on (the registry gained fields in 2026.11) and the times.
    """
    registry = er.async_get(hass)
    found: dict[str, Any] = {}
    for entity in sorted(
        er.async_entries_for_config_entry(registry, entry.entry_id), key=lambda e: e.entity_id
    ):
        if entity.domain != domain:
            continue
        state = hass.states.get(entity.entity_id)
        assert state is not None, entity.entity_id
        found[entity.entity_id] = {
            "unique_id": entity.unique_id,
            "translation_key": entity.translation_key,
            "device_class": entity.original_device_class,
            "entity_category": entity.entity_category,
            "unit": entity.unit_of_measurement,
            "disabled_by_default": entity.disabled_by is not None,
            "state": state.state,
            "attributes": dict(state.attributes),
        }
    return found


def devices_snapshot(hass: HomeAssistant, entry: ConfigEntry) -> list[dict[str, Any]]:
    """The entry's devices, by name."""
    devices = dr.async_entries_for_config_entry(dr.async_get(hass), entry.entry_id)
    return sorted(
        (
            {
                "name": d.name,
                "manufacturer": d.manufacturer,
                "model": d.model,
                "sw_version": d.sw_version,
                "configuration_url": d.configuration_url,
                "entry_type": d.entry_type,
            }
            for d in devices
        ),
        key=lambda d: str(d["name"]),
    )
