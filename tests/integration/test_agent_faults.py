"""Faults a real llama-server cannot be made to produce, from a fake one on loopback."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from homeassistant.components import conversation
from homeassistant.config_entries import SOURCE_REAUTH, ConfigEntryState
from homeassistant.core import Context, HomeAssistant
from homeassistant.helpers import intent, llm
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import CONF_LLM_HASS_API, CONF_TIMEOUT, DOMAIN
from tests.integration.agent_helpers import TIME_API_ID, GetTimeTool, TimeAPI, agent, make_entry
from tests.integration.fake_llama import (
    TIMINGS,
    FakeLlama,
    chunk,
    slow,
    sse,
    status,
    stream_bytes,
)

pytestmark = pytest.mark.usefixtures("socket_enabled")


async def _setup(hass: HomeAssistant, fake: FakeLlama, **opts: Any) -> tuple[MockConfigEntry, str]:
    assert await async_setup_component(hass, "homeassistant", {})
    entry = make_entry(fake.url, "key", [agent(0, **opts)])
    entry.add_to_hass(hass)
    await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    agent_id = next(
        s.entity_id for s in hass.states.async_all("conversation") if "agent" in s.entity_id
    )
    return entry, agent_id


async def _say(
    hass: HomeAssistant, agent_id: str, text: str = "hi"
) -> conversation.ConversationResult:
    return await conversation.async_converse(hass, text, None, Context(), agent_id=agent_id)


def _stream(body: bytes, close_early: bool = False) -> Any:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream_bytes(request, body, close_early=close_early)

    return handler


@pytest.mark.parametrize(
    ("handler", "spoken"),
    [
        (status(500), "reported an error: fake 500"),
        (
            status(400, "exceed_context_size_error", n_prompt_tokens=5000, n_ctx=4096),
            "too long for the model's context (5000 of 4096 tokens)",
        ),
        (slow(3), "did not answer within 0.5 seconds"),
        (
            _stream(sse(chunk({"role": "assistant"}), chunk({"content": "Hi"})), close_early=True),
            "stopped in the middle",
        ),
        (_stream(sse(chunk({"content": "Hi"}))), "stopped in the middle"),
        (_stream(b"data: {not json\n\n"), "stopped in the middle"),
        (
            _stream(sse(chunk({"content": "Hi"}), {"error": {"code": 500, "message": "boom"}})),
            "reported an error: boom",
        ),
    ],
    ids=["500", "context", "timeout", "dropped", "no-done", "garbage", "error-event"],
)
async def test_fault_is_spoken_and_next_turn_recovers(
    hass: HomeAssistant, fake: FakeLlama, handler: Any, spoken: str
) -> None:
    """Each fault becomes a short translated message; the next turn works again."""
    _entry, agent_id = await _setup(hass, fake, **{CONF_TIMEOUT: 0.5})
    fake.chat = handler
    result = await _say(hass, agent_id)
    assert result.response.response_type is intent.IntentResponseType.ERROR
    assert spoken in result.response.speech["plain"]["speech"]

    fake.chat = fake.good_stream
    result = await _say(hass, agent_id)
    assert result.response.speech["plain"]["speech"] == "Hi there."


async def test_bad_key_starts_reauth(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A 401 on a turn tells the user and opens the reauth flow."""
    _entry, agent_id = await _setup(hass, fake)
    fake.chat = status(401, "authentication_error")
    result = await _say(hass, agent_id)
    assert "rejected the key" in result.response.speech["plain"]["speech"]
    await hass.async_block_till_done()
    flows = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    assert [f["context"]["source"] for f in flows] == [SOURCE_REAUTH]


async def test_dead_server(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A server that went away: "cannot reach", not a hang."""
    _entry, agent_id = await _setup(hass, fake)
    await fake.stop()
    result = await _say(hass, agent_id)
    assert "Cannot reach" in result.response.speech["plain"]["speech"]


async def test_reasoning_kept_out_of_speech(hass: HomeAssistant, fake: FakeLlama) -> None:
    """reasoning_content and inline <think> blocks never reach the spoken reply."""
    _entry, agent_id = await _setup(hass, fake)
    body = sse(
        chunk({"role": "assistant", "reasoning_content": "Let me think."}),
        chunk({"content": "<thi"}),
        chunk({"content": "nk>hidden</th"}),
        chunk({"content": "ink>The light is on."}),
        chunk({}, "stop"),
        {"choices": [], "usage": {"prompt_tokens": 15}, "timings": TIMINGS},
        "data: [DONE]\n\n",
    )
    fake.chat = _stream(body)
    result = await _say(hass, agent_id)
    assert result.response.speech["plain"]["speech"] == "The light is on."
    assert _entry.runtime_data.timings[next(iter(_entry.subentries))].cached_tokens == 10


async def test_invalid_tool_arguments(hass: HomeAssistant, fake: FakeLlama) -> None:
    """Tool arguments that are not JSON give a clear message."""
    llm.async_register_api(hass, TimeAPI(hass, GetTimeTool()))
    _entry, agent_id = await _setup(hass, fake, **{CONF_LLM_HASS_API: [TIME_API_ID]})
    call = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "get_time", "arguments": "{bad"},
    }
    fake.chat = _stream(
        sse(chunk({"tool_calls": [call]}), chunk({}, "tool_calls"), "data: [DONE]\n\n")
    )
    result = await _say(hass, agent_id)
    assert "invalid call of tool get_time" in result.response.speech["plain"]["speech"]


async def test_streamed_tool_call_fragments(hass: HomeAssistant, fake: FakeLlama) -> None:
    """Arguments split over several deltas are joined; the tool result is sent back."""
    tool = GetTimeTool()
    llm.async_register_api(hass, TimeAPI(hass, tool))
    _entry, agent_id = await _setup(hass, fake, **{CONF_LLM_HASS_API: [TIME_API_ID]})
    first = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "get_", "arguments": '{"a'},
    }
    second = {"index": 0, "function": {"name": "time", "arguments": '": 1}'}}
    tool_reply = sse(
        chunk({"tool_calls": [first]}),
        chunk({"tool_calls": [second]}),
        chunk({}, "tool_calls"),
        "data: [DONE]\n\n",
    )
    replies = [tool_reply]

    async def handler(request: web.Request) -> web.StreamResponse:
        body = (
            replies.pop(0)
            if replies
            else sse(chunk({"content": "It is noon."}), chunk({}, "stop"), "data: [DONE]\n\n")
        )
        return await stream_bytes(request, body)

    fake.chat = handler
    result = await _say(hass, agent_id)
    assert result.response.speech["plain"]["speech"] == "It is noon."
    assert tool.calls == 1
    assert fake.requests[-1]["messages"][-1]["role"] == "tool"
    assert fake.requests[-2]["messages"][-1]["role"] == "user"


async def test_setup_bad_key(hass: HomeAssistant, fake: FakeLlama) -> None:
    """Setup with a rejected key: auth failed and a reauth flow."""
    fake.props_status = 401
    assert await async_setup_component(hass, "homeassistant", {})
    entry = make_entry(fake.url, "wrong", [agent(0)])
    entry.add_to_hass(hass)
    await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.SETUP_ERROR
    assert any(
        f["context"]["source"] == SOURCE_REAUTH
        for f in hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    )


async def test_setup_server_down(hass: HomeAssistant, fake: FakeLlama) -> None:
    """Setup against a dead server retries later."""
    await fake.stop()
    assert await async_setup_component(hass, "homeassistant", {})
    entry = make_entry(fake.url, "key", [agent(0)])
    entry.add_to_hass(hass)
    await hass.config_entries.async_setup(entry.entry_id)
    assert entry.state is ConfigEntryState.SETUP_RETRY


async def test_question_continues_conversation(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A reply ending in a question keeps the satellite listening."""
    _entry, agent_id = await _setup(hass, fake)
    fake.chat = _stream(
        sse(chunk({"content": "Which room?"}), chunk({}, "stop"), "data: [DONE]\n\n")
    )
    result = await _say(hass, agent_id)
    assert result.continue_conversation is True
    fake.chat = fake.good_stream
    result = await conversation.async_converse(
        hass, "kitchen", result.conversation_id, Context(), agent_id=agent_id
    )
    assert result.continue_conversation is False
    roles = [m["role"] for m in fake.requests[-1]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
