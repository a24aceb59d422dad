"""The conversation agent against a real llama-server (tiny deterministic GGUFs)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from homeassistant.components import conversation
from homeassistant.components.conversation import trace
from homeassistant.components.conversation.const import DATA_COMPONENT
from homeassistant.core import Context, HomeAssistant, callback
from homeassistant.helpers import intent, llm
from homeassistant.helpers.dispatcher import async_dispatcher_connect
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import (
    CONF_LLM_HASS_API,
    CONF_MAX_HISTORY,
    CONF_PROMPT_LAYOUT,
    LAYOUT_HA_DEFAULT,
)
from custom_components.voice_stack.entity import VoiceStackLLMEntity
from custom_components.voice_stack.timings import Timings, signal_timings
from tests.integration.agent_helpers import (
    TIME_API_ID,
    TIME_RESULT,
    GetTimeTool,
    TimeAPI,
    agent,
    make_entry,
    server_get,
    setup_entry,
    slot_state,
)
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import start_proxy
from voice_stack_dev.paths import model_path

pytestmark = pytest.mark.usefixtures("socket_enabled")


def _entity_id(hass: HomeAssistant, entry: MockConfigEntry, index: int = 0) -> str:
    subentry_id = list(entry.subentries)[index]
    from homeassistant.helpers import entity_registry as er

    for ent in er.async_entries_for_config_entry(er.async_get(hass), entry.entry_id):
        if ent.config_subentry_id == subentry_id and ent.domain in ("conversation", "ai_task"):
            return ent.entity_id
    raise AssertionError("no agent entity")


def _spy(entry: MockConfigEntry) -> list[dict[str, Any]]:
    """Record every streamed request the agent sends (the real client still sends it)."""
    sent: list[dict[str, Any]] = []
    client = entry.runtime_data.client
    original = client.stream

    def spy(payload: dict[str, Any], timeout_s: float) -> Any:
        sent.append(payload)
        return original(payload, timeout_s)

    client.stream = spy  # type: ignore[method-assign]
    return sent


async def _get(hass: HomeAssistant, server: LlamaServer, path: str) -> Any:
    return await hass.async_add_executor_job(server_get, server, path)


async def test_reply_lands_on_pinned_slot_and_reuses_cache(
    hass: HomeAssistant, llama_text: LlamaServer
) -> None:
    """Two turns on slot 2: /slots shows the work there; the 2nd turn reuses the prefix."""
    entry = make_entry(llama_text.url, llama_text.api_key, [agent(2)])
    await setup_entry(hass, entry)
    warmer = entry.runtime_data.warmer
    assert warmer is not None
    await warmer.async_check()  # the background first check may still run; this one waits
    agent_id = _entity_id(hass, entry)
    seen: list[tuple[str, Timings]] = []
    async_dispatcher_connect(
        hass, signal_timings(entry.entry_id), callback(lambda sub, t: seen.append((sub, t)))
    )

    result = await conversation.async_converse(hass, "hello", None, Context(), agent_id=agent_id)
    assert result.response.response_type is intent.IntentResponseType.ACTION_DONE
    assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
    slot = await hass.async_add_executor_job(slot_state, llama_text, 2)
    assert slot["n_prompt_tokens"] > 0
    assert slot["params"]["stream"] is True

    first = entry.runtime_data.timings[next(iter(entry.subentries))]
    assert first.slot == 2
    assert first.cached_tokens > 0, "the warm slot should already hold the system prefix"
    assert first.generated_tokens > 0
    assert first.generation_per_second is not None
    assert first.time_to_first_token_ms is not None
    assert first.received_at is not None

    result = await conversation.async_converse(
        hass, "and again", result.conversation_id, Context(), agent_id=agent_id
    )
    assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
    second = entry.runtime_data.timings[next(iter(entry.subentries))]
    assert second.cache_reuse is not None
    assert second.cached_tokens >= first.cached_tokens + first.prompt_tokens - 2
    assert second.cache_reuse > 50
    assert [s for s, _ in seen] == [next(iter(entry.subentries))] * 2


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "nginx-proxy"])
async def test_tool_call_round_trip(
    hass: HomeAssistant, llama_tool: LlamaServer, tmp_path: Path, via_proxy: bool
) -> None:
    """The tiny tool model calls get_time; HA runs it; the result goes back; a reply follows."""
    tool = GetTimeTool()
    llm.async_register_api(hass, TimeAPI(hass, tool))
    url, key = llama_tool.url, llama_tool.api_key
    proxy = None
    if via_proxy:  # the real llm-auth nginx proxy, slot 1 reserved
        proxy = await hass.async_add_executor_job(
            partial(
                start_proxy, url, "proxy-Key-1", key or "", reserved_slots=(1,), log_dir=tmp_path
            )
        )
        url, key = proxy.url, proxy.proxy_key
    try:
        await _tool_round_trip(hass, llama_tool, tool, url, key)
    finally:
        if proxy:
            await hass.async_add_executor_job(proxy.stop)


async def _tool_round_trip(
    hass: HomeAssistant, llama_tool: LlamaServer, tool: GetTimeTool, url: str, key: str | None
) -> None:
    entry = make_entry(url, key, [agent(1, **{CONF_LLM_HASS_API: [TIME_API_ID]})])
    await setup_entry(hass, entry)
    agent_id = _entity_id(hass, entry)
    sent = _spy(entry)

    result = await conversation.async_converse(
        hass, "what time is it", None, Context(), agent_id=agent_id
    )
    assert tool.calls >= 1
    assert result.response.speech["plain"]["speech"]
    traces = trace.async_get_traces()
    events = traces[-1].as_dict()["events"]
    details = [
        e["data"]
        for e in events
        if e["event_type"] == trace.ConversationTraceEventType.AGENT_DETAIL
    ]
    assert any("timings" in d for d in details)
    assert any(e["event_type"] == trace.ConversationTraceEventType.TOOL_CALL for e in events)
    slot = await hass.async_add_executor_job(slot_state, llama_tool, 1)
    assert slot["n_prompt_tokens"] > 0
    # The tool result really reached the model in the follow-up request.
    tool_msgs = [m for p in sent for m in p["messages"] if m["role"] == "tool"]
    assert tool_msgs
    assert json.loads(tool_msgs[0]["content"]) == {"data": TIME_RESULT, "error": False}
    assert all(p["id_slot"] == 1 for p in sent)


@pytest.mark.parametrize("layout", [None, LAYOUT_HA_DEFAULT])
async def test_prompt_layout_sent(
    hass: HomeAssistant, llama_text: LlamaServer, layout: str | None
) -> None:
    """The area sentence leaves the system prompt in the cache-stable layout only."""
    tool = GetTimeTool()
    area = (
        "You are in area Kitchen and all generic commands like 'turn on the lights' should"
        " target this area."
    )
    llm.async_register_api(hass, TimeAPI(hass, tool, prompt=f"Use tools.\n{area}"))
    opts: dict[str, Any] = {CONF_LLM_HASS_API: [TIME_API_ID]}
    if layout:
        opts[CONF_PROMPT_LAYOUT] = layout
    entry = make_entry(llama_text.url, llama_text.api_key, [agent(3, **opts)])
    await setup_entry(hass, entry)
    agent_id = _entity_id(hass, entry)
    sent = _spy(entry)
    await conversation.async_converse(hass, "hi", None, Context(), agent_id=agent_id)
    system = sent[0]["messages"][0]["content"]
    user = sent[0]["messages"][-1]["content"]
    names = [t["function"]["name"] for t in sent[0]["tools"]]
    assert sent[0]["id_slot"] == 3
    assert sent[0]["cache_prompt"] is True
    if layout is None:
        assert area not in system
        assert user.startswith(area)
        assert user.endswith("hi")
        assert names == sorted(names)
    else:
        assert area in system
        assert user == "hi"
        assert names == ["get_time", "another_tool"]


async def test_warm_slot_after_restart(hass: HomeAssistant, llama_factory: Any) -> None:
    """The slot is primed at setup and again after llama-server restarts."""
    server = llama_factory("tiny-text", ctx_per_slot=1024)
    entry = make_entry(server.url, server.api_key, [agent(1)])
    await setup_entry(hass, entry)
    warmer = entry.runtime_data.warmer
    assert warmer is not None
    await warmer.async_check()
    sub = next(iter(entry.subentries))
    assert sub in warmer.warmed
    assert (await hass.async_add_executor_job(slot_state, server, 1))["n_prompt_tokens"] > 0
    assert warmer.state is not None
    assert warmer.state.unified_kv is False

    await hass.async_add_executor_job(server.restart)
    assert "id_task" not in await hass.async_add_executor_job(slot_state, server, 1)
    await warmer.async_check()
    assert (await hass.async_add_executor_job(slot_state, server, 1))["n_prompt_tokens"] > 0
    assert sub in warmer.warmed


async def test_draft_acceptance_from_speculative_server(
    hass: HomeAssistant, llama_factory: Any
) -> None:
    """With a draft model (the tiny model drafting for itself) the agent reports acceptance."""
    model = str(model_path("tiny-text"))
    server = llama_factory(
        "tiny-text", ctx_per_slot=1024, extra_args=["-md", model, "--spec-type", "draft-simple"]
    )
    entry = make_entry(server.url, server.api_key, [agent(0)])
    await setup_entry(hass, entry)
    result = await conversation.async_converse(
        hass, "hello", None, Context(), agent_id=_entity_id(hass, entry)
    )
    assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
    timings = entry.runtime_data.timings[next(iter(entry.subentries))]
    assert timings.draft_tokens
    assert timings.draft_acceptance is not None
    assert 0 < timings.draft_acceptance <= 100


async def test_real_assist_api_from_a_satellite(
    hass: HomeAssistant, llama_text: LlamaServer
) -> None:
    """HA's own Assist API (intent tools, exposed entities) from a satellite in an area."""
    from homeassistant.components.homeassistant.exposed_entities import async_expose_entity
    from homeassistant.helpers import area_registry as ar
    from homeassistant.helpers import device_registry as dr

    assert await async_setup_component(hass, "homeassistant", {})
    assert await async_setup_component(hass, "intent", {})
    assert await async_setup_component(hass, "light", {})
    hass.states.async_set("light.kitchen", "off", {"friendly_name": "Kitchen light"})
    async_expose_entity(hass, conversation.DOMAIN, "light.kitchen", True)
    entry = make_entry(
        llama_text.url, llama_text.api_key, [agent(2, **{CONF_LLM_HASS_API: [llm.LLM_API_ASSIST]})]
    )
    await setup_entry(hass, entry)
    kitchen = ar.async_get(hass).async_create("Kitchen")
    satellite_entry = MockConfigEntry(domain="test")
    satellite_entry.add_to_hass(hass)
    satellite = dr.async_get(hass).async_get_or_create(
        config_entry_id=satellite_entry.entry_id, identifiers={("test", "sat")}
    )
    dr.async_get(hass).async_update_device(satellite.id, area_id=kitchen.id)
    assert entry.runtime_data.warmer is not None
    await entry.runtime_data.warmer.async_check()
    entity = hass.data[DATA_COMPONENT].get_entity(_entity_id(hass, entry))
    assert isinstance(entity, VoiceStackLLMEntity)
    warm_sys, warm_tools = await entity.async_stable_prefix()
    sent = _spy(entry)
    result = await conversation.async_converse(
        hass, "hello", None, Context(), agent_id=_entity_id(hass, entry), device_id=satellite.id
    )
    assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
    system = sent[0]["messages"][0]["content"]
    user = sent[0]["messages"][-1]["content"]
    names = [t["function"]["name"] for t in sent[0]["tools"]]
    assert warm_sys == system  # the warm-up primed exactly this prefix
    assert [t["function"]["name"] for t in warm_tools] == names
    assert "Kitchen light" in system
    assert "You are in area Kitchen" not in system
    assert user.startswith("You are in area Kitchen")
    assert names == sorted(names)
    assert any(name.endswith("HassTurnOn") for name in names)
    timings = entry.runtime_data.timings[next(iter(entry.subentries))]
    assert timings.cache_reuse is not None
    assert timings.cache_reuse > 80  # warmed with the same stable prefix


async def test_volatile_context_survives_trimming(
    hass: HomeAssistant, llama_text: LlamaServer
) -> None:
    """Once trimming drops the turn that carried the area, the first kept turn carries it;
    between trims the request still only grows at its end (the cached prefix stays valid)."""
    area = (
        "You are in area Kitchen and all generic commands like 'turn on the lights' should"
        " target this area."
    )
    clock = GetTimeTool()
    clock.name = "GetDateTime"  # so HA adds no "Current time is" line, which changes every second
    llm.async_register_api(hass, TimeAPI(hass, clock, prompt=f"Use tools.\n{area}"))
    entry = make_entry(
        llama_text.url,
        llama_text.api_key,
        [agent(1, **{CONF_LLM_HASS_API: [TIME_API_ID], CONF_MAX_HISTORY: 4})],
    )
    await setup_entry(hass, entry)
    agent_id = _entity_id(hass, entry)
    sent = _spy(entry)
    conversation_id = None
    for turn in range(6):
        result = await conversation.async_converse(
            hass, f"turn {turn}", conversation_id, Context(), agent_id=agent_id
        )
        conversation_id = result.conversation_id
    users = [[m["content"] for m in p["messages"] if m["role"] == "user"] for p in sent]
    assert users[0] == [f"{area}\n\nturn 0"]
    assert users[3][1:] == ["turn 1", "turn 2", "turn 3"]  # not repeated while unchanged
    # Turns 5 and 6 keep the history from turn 2 on (max 4 turns, dropped 2 at a time).
    assert users[4] == [f"{area}\n\nturn 2", "turn 3", "turn 4"]
    assert users[5] == [f"{area}\n\nturn 2", "turn 3", "turn 4", "turn 5"]
    assert sent[5]["messages"][: len(sent[4]["messages"])] == sent[4]["messages"]
