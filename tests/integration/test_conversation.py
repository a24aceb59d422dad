"""The conversation agent: against a real llama-server (tiny deterministic GGUFs) for what it
sends and gets, and a fake one for the faults a real one cannot be made to show."""

from __future__ import annotations

import asyncio
import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from awesomeversion import AwesomeVersion
from homeassistant.components import conversation
from homeassistant.components.conversation import trace
from homeassistant.components.conversation.const import DATA_COMPONENT
from homeassistant.config_entries import SOURCE_REAUTH
from homeassistant.const import __version__ as HA_VERSION
from homeassistant.core import Context, HomeAssistant, callback
from homeassistant.helpers import area_registry as ar
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers import intent, llm
from homeassistant.helpers.dispatcher import async_dispatcher_connect
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import (
    CONF_LLM_HASS_API,
    CONF_MAX_HISTORY,
    CONF_PROMPT_LAYOUT,
    CONF_TIMEOUT,
    DOMAIN,
    LAYOUT_HA_DEFAULT,
)
from custom_components.voice_stack.errors import ServiceUnreachableError
from custom_components.voice_stack.timings import Timings, signal_timings
from tests.integration.conftest import Server
from tests.integration.helpers import (
    AREA,
    TIME_API_ID,
    TIME_RESULT,
    GetTimeTool,
    TimeAPI,
    agent,
    agent_entity,
    setup_entry,
    slot_state,
    spy_requests,
    stack_entry,
    subentry_id,
)
from voice_stack_dev.fakes.integration import (
    TIMINGS,
    FakeLlama,
    Handler,
    chunk,
    slow,
    sse,
    status,
    stream_bytes,
    streaming,
)
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import start_proxy
from voice_stack_dev.paths import model_path

HELLO = "Hello from the tiny test model."


async def _say(
    hass: HomeAssistant, entry: MockConfigEntry, text: str = "hi", cid: str | None = None, **kw: Any
) -> conversation.ConversationResult:
    return await conversation.async_converse(
        hass, text, cid, Context(), agent_id=agent_entity(hass, entry), **kw
    )


class TestTinyText:
    """The tiny text model: always says HELLO."""

    @pytest.fixture
    def server(self, llama_text: LlamaServer) -> Server:
        return Server.of(llama_text)

    @pytest.fixture
    def agents(self) -> list[dict[str, Any]]:
        return [agent(2)]

    async def test_reply_lands_on_its_slot_and_reuses_the_cache(
        self, hass: HomeAssistant, init_integration: MockConfigEntry, llama_text: LlamaServer
    ) -> None:
        """Two turns on slot 2: /slots shows the work there; the warm slot and then the first
        turn are reused; the timings reach the dispatcher."""
        entry = init_integration
        seen: list[tuple[str, Timings]] = []
        async_dispatcher_connect(
            hass, signal_timings(entry.entry_id), callback(lambda sub, t: seen.append((sub, t)))
        )
        result = await _say(hass, entry, "hello")
        assert result.response.response_type is intent.IntentResponseType.ACTION_DONE
        assert result.response.speech["plain"]["speech"] == HELLO
        slot = await hass.async_add_executor_job(slot_state, llama_text, 2)
        assert slot["n_prompt_tokens"] > 0
        first = entry.runtime_data.timings[subentry_id(entry)]
        assert first.slot == 2
        assert first.cached_tokens > 0, "the warm slot already held the system prefix"
        assert first.generated_tokens > 0
        assert first.generation_per_second is not None
        assert first.time_to_first_token_ms is not None

        result = await _say(hass, entry, "and again", result.conversation_id)
        assert result.response.speech["plain"]["speech"] == HELLO
        second = entry.runtime_data.timings[subentry_id(entry)]
        assert second.cached_tokens >= first.cached_tokens + first.prompt_tokens - 2
        assert second.cache_reuse is not None
        assert second.cache_reuse > 50
        assert [s for s, _ in seen] == [subentry_id(entry)] * 2

    @pytest.mark.parametrize("layout", [None, LAYOUT_HA_DEFAULT])
    async def test_prompt_layout_sent(
        self, hass: HomeAssistant, mock_config_entry: MockConfigEntry, layout: str | None
    ) -> None:
        """The area sentence leaves the system prompt in the cache-stable layout only."""
        llm.async_register_api(hass, TimeAPI(hass, GetTimeTool(), prompt=f"Use tools.\n{AREA}"))
        sub = next(iter(mock_config_entry.subentries.values()))
        opts: dict[str, Any] = {CONF_LLM_HASS_API: [TIME_API_ID]}
        if layout:
            opts[CONF_PROMPT_LAYOUT] = layout
        hass.config_entries.async_update_subentry(mock_config_entry, sub, data={**sub.data, **opts})
        await setup_entry(hass, mock_config_entry)
        sent = spy_requests(mock_config_entry)
        await _say(hass, mock_config_entry)
        system = sent[0]["messages"][0]["content"]
        user = sent[0]["messages"][-1]["content"]
        names = [t["function"]["name"] for t in sent[0]["tools"]]
        assert (sent[0]["id_slot"], sent[0]["cache_prompt"]) == (2, True)
        if layout is None:
            assert AREA not in system
            assert user.startswith(AREA)
            assert user.endswith("hi")
            assert names == sorted(names)
        else:
            assert AREA in system
            assert user == "hi"
            assert names == ["get_time", "another_tool"]

    async def test_real_assist_api_from_a_satellite(
        self,
        hass: HomeAssistant,
        mock_config_entry: MockConfigEntry,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """HA's own Assist API (intent tools, exposed entities) from a satellite in an area:
        the warm-up primed exactly the prefix the turn sends; the area goes to the user turn."""
        from homeassistant.components.homeassistant.exposed_entities import async_expose_entity

        assert await async_setup_component(hass, "homeassistant", {})
        assert await async_setup_component(hass, "intent", {})
        assert await async_setup_component(hass, "light", {})
        hass.states.async_set("light.kitchen", "off", {"friendly_name": "Kitchen light"})
        async_expose_entity(hass, conversation.DOMAIN, "light.kitchen", True)
        sub = next(iter(mock_config_entry.subentries.values()))
        hass.config_entries.async_update_subentry(
            mock_config_entry, sub, data={**sub.data, CONF_LLM_HASS_API: [llm.LLM_API_ASSIST]}
        )
        await setup_entry(hass, mock_config_entry)
        kitchen = ar.async_get(hass).async_create("Kitchen")
        satellite_entry = MockConfigEntry(domain="test")
        satellite_entry.add_to_hass(hass)
        satellite = dr.async_get(hass).async_get_or_create(
            config_entry_id=satellite_entry.entry_id, identifiers={("test", "sat")}
        )
        dr.async_get(hass).async_update_device(satellite.id, area_id=kitchen.id)
        agent_obj = next(iter(mock_config_entry.runtime_data.agents.values()))
        warm_sys, warm_tools = await agent_obj.stable_prefix()
        sent = spy_requests(mock_config_entry)
        result = await _say(hass, mock_config_entry, "hello", device_id=satellite.id)
        assert result.response.speech["plain"]["speech"] == HELLO
        system = sent[0]["messages"][0]["content"]
        user = sent[0]["messages"][-1]["content"]
        names = [t["function"]["name"] for t in sent[0]["tools"]]
        # the primed prompt (rendered through a chat session's chat log, as the turn's was) is
        # the turn's, byte for byte: its system message and its tools
        warm = agent_obj.warm_request(sent[0]["id_slot"], warm_sys, warm_tools)
        assert json.dumps(warm["messages"][0]) == json.dumps(sent[0]["messages"][0])
        assert json.dumps(warm["tools"]) == json.dumps(sent[0]["tools"])
        # HA 2026.11 warns of a chat session opened without saying for whom; the warm-up's is
        # for no user
        assert "without a context" not in caplog.text
        assert "Kitchen light" in system
        assert "You are in area Kitchen" not in system
        assert user.startswith("You are in area Kitchen")
        assert any(name.endswith("HassTurnOn") for name in names)
        timings = mock_config_entry.runtime_data.timings[subentry_id(mock_config_entry)]
        assert timings.cache_reuse is not None
        assert timings.cache_reuse > 80  # warmed with the same stable prefix

    async def test_volatile_context_survives_trimming(
        self, hass: HomeAssistant, mock_config_entry: MockConfigEntry
    ) -> None:
        """Once trimming drops the turn that carried the area, the first kept turn carries it;
        between trims the request only grows at its end (the cached prefix stays valid)."""
        clock = GetTimeTool()
        clock.name = "GetDateTime"  # so HA adds no "Current time is" line
        llm.async_register_api(hass, TimeAPI(hass, clock, prompt=f"Use tools.\n{AREA}"))
        sub = next(iter(mock_config_entry.subentries.values()))
        hass.config_entries.async_update_subentry(
            mock_config_entry,
            sub,
            data={**sub.data, CONF_LLM_HASS_API: [TIME_API_ID], CONF_MAX_HISTORY: 4},
        )
        await setup_entry(hass, mock_config_entry)
        sent = spy_requests(mock_config_entry)
        conversation_id = None
        for turn in range(6):
            result = await _say(hass, mock_config_entry, f"turn {turn}", conversation_id)
            conversation_id = result.conversation_id
        users = [[m["content"] for m in p["messages"] if m["role"] == "user"] for p in sent]
        assert users[0] == [f"{AREA}\n\nturn 0"]
        assert users[3][1:] == ["turn 1", "turn 2", "turn 3"]  # not repeated while unchanged
        assert users[4] == [f"{AREA}\n\nturn 2", "turn 3", "turn 4"]
        assert users[5] == [f"{AREA}\n\nturn 2", "turn 3", "turn 4", "turn 5"]
        assert sent[5]["messages"][: len(sent[4]["messages"])] == sent[4]["messages"]

    async def test_a_failed_turn_is_not_replayed_to_the_model(
        self, hass: HomeAssistant, init_integration: MockConfigEntry
    ) -> None:
        """HA 2026.11 ends a failed turn in the chat log with "Error: ..." or "(no response)";
        the next request of that conversation sends it as an empty reply: the real server
        answers, and the model has no error text to repeat."""
        entry = init_integration
        sent = spy_requests(entry)
        chat = entry.runtime_data.chat
        working = chat.stream

        def failing(request: dict[str, Any], timeout_s: float) -> Any:
            raise ServiceUnreachableError("Cannot reach the server")

        cid = (await _say(hass, entry, "hello")).conversation_id  # HA keeps only a log that
        chat.stream = failing  # answered once: a failed first turn is dropped with its log
        failed = await _say(hass, entry, "turn on the lamp", cid)
        assert failed.response.response_type is intent.IntentResponseType.ERROR
        chat.stream = working
        result = await _say(hass, entry, "try again", cid)
        assert result.response.speech["plain"]["speech"] == HELLO  # the real server took it
        again = sent[-1]["messages"]
        replies = [m["content"] for m in again if m["role"] == "assistant"]
        assert not [r for r in replies if r.startswith("Error: ") or r == "(no response)"]
        if AwesomeVersion(HA_VERSION) >= "2026.11":  # the first HA that writes them
            turns = [(m["role"], m["content"].rsplit("\n\n", 1)[-1]) for m in again[1:]]
            assert turns[2:] == [
                ("user", "turn on the lamp"), ("assistant", ""), ("user", "try again")
            ]  # fmt: skip

    async def test_any_language(
        self, hass: HomeAssistant, init_integration: MockConfigEntry
    ) -> None:
        entity = hass.data[DATA_COMPONENT].get_entity(agent_entity(hass, init_integration))
        assert entity is not None
        assert entity.supported_languages == "*"


@pytest.mark.parametrize("via_proxy", [False, True], ids=["direct", "nginx-proxy"])
async def test_tool_call_round_trip(
    hass: HomeAssistant, llama_tool: LlamaServer, tmp_path: Path, via_proxy: bool
) -> None:
    """The tiny tool model calls get_time; HA runs it; the result goes back; a reply follows.
    Through the real auth proxy, with the agent key, the pinned slot is kept."""
    tool = GetTimeTool()
    llm.async_register_api(hass, TimeAPI(hass, tool))
    url, key = llama_tool.url, llama_tool.api_key or ""
    proxy = None
    if via_proxy:
        proxy = await hass.async_add_executor_job(
            partial(start_proxy, url, "proxy-Key-1", key, reserved_slots=(1,), log_dir=tmp_path)
        )
        url, key = proxy.url, proxy.agent_key
    try:
        entry = stack_entry(hass, url, key, agent(1, **{CONF_LLM_HASS_API: [TIME_API_ID]}))
        await setup_entry(hass, entry)
        sent = spy_requests(entry)
        result = await _say(hass, entry, "what time is it")
        assert tool.calls >= 1
        assert result.response.speech["plain"]["speech"]
        events = trace.async_get_traces()[-1].as_dict()["events"]
        details = [
            e["data"]
            for e in events
            if e["event_type"] == trace.ConversationTraceEventType.AGENT_DETAIL
        ]
        assert any("timings" in d for d in details)
        assert any(e["event_type"] == trace.ConversationTraceEventType.TOOL_CALL for e in events)
        assert (await hass.async_add_executor_job(slot_state, llama_tool, 1))["n_prompt_tokens"] > 0
        tool_msgs = [m for p in sent for m in p["messages"] if m["role"] == "tool"]
        assert json.loads(tool_msgs[0]["content"]) == {"data": TIME_RESULT, "error": False}
        assert all(p["id_slot"] == 1 for p in sent)
    finally:
        if proxy:
            await hass.async_add_executor_job(proxy.stop)


class TimingOutTool(GetTimeTool):
    """get_time, timing out on its own (a slow device behind a Home Assistant tool)."""

    async def async_call(
        self, hass: HomeAssistant, tool_input: llm.ToolInput, llm_context: llm.LLMContext
    ) -> llm.ToolResult:
        """Fail as a tool whose own wait ran out."""
        self.calls += 1
        raise TimeoutError


async def test_a_tool_s_own_timeout_is_a_tool_failure(
    hass: HomeAssistant, llama_tool: LlamaServer
) -> None:
    """A TimeoutError raised by a tool is reported as the tool's failure, not as a server (or
    busy slot) timeout, and the slot is free for the next turn."""
    tool = TimingOutTool()
    llm.async_register_api(hass, TimeAPI(hass, tool))
    entry = stack_entry(
        hass, llama_tool.url, llama_tool.api_key, agent(1, **{CONF_LLM_HASS_API: [TIME_API_ID]})
    )
    await setup_entry(hass, entry)
    result = await _say(hass, entry, "what time is it")
    assert tool.calls == 1
    assert result.response.response_type is intent.IntentResponseType.ERROR
    spoken = result.response.speech["plain"]["speech"]
    assert "A tool the agent called timed out" in spoken
    assert "did not answer within" not in spoken
    assert not entry.runtime_data.scheduler.busy(1)


async def test_draft_acceptance_from_a_speculative_server(
    hass: HomeAssistant, llama_factory: Any
) -> None:
    """With a draft model (the tiny model drafting for itself) the agent reports acceptance."""
    model = str(model_path("tiny-text"))
    server = llama_factory(
        "tiny-text", ctx_per_slot=1024, extra_args=["-md", model, "--spec-type", "draft-simple"]
    )
    entry = stack_entry(hass, server.url, server.api_key, agent(0))
    await setup_entry(hass, entry)
    result = await _say(hass, entry, "hello")
    assert result.response.speech["plain"]["speech"] == HELLO
    timings = entry.runtime_data.timings[subentry_id(entry)]
    assert timings.draft_tokens
    assert timings.draft_acceptance is not None
    assert 0 < timings.draft_acceptance <= 100


# --- faults (fake server) ---------------------------------------------------------------------


@pytest.fixture
def agents() -> list[dict[str, Any]]:
    """A fault must show within the test: a short timeout."""
    return [agent(0, **{CONF_TIMEOUT: 0.5})]


@pytest.mark.parametrize(
    ("handler", "spoken"),
    [
        (status(500), "reported an error: fake 500"),
        (
            status(400, "exceed_context_size_error", n_prompt_tokens=5000, n_ctx=4096),
            "too long for the model's context (5000 of 4096 tokens)",
        ),
        (status(502), "Cannot reach the language model server"),
        (status(504), "Cannot reach the language model server"),
        (status(503, "unavailable_error"), "still loading its model"),
        (slow(3), "did not answer within 0.5 seconds"),
        (streaming(sse(chunk({"content": "Hi"})), close_early=True), "stopped in the middle"),
        (streaming(sse(chunk({"content": "Hi"}))), "stopped in the middle"),
        (streaming(b"data: {not json\n\n"), "stopped in the middle"),
        (
            streaming(sse(chunk({"content": "Hi"}), {"error": {"code": 500, "message": "boom"}})),
            "reported an error: boom",
        ),
    ],
    ids=[
        "500",
        "context",
        "502",
        "504",
        "loading",
        "timeout",
        "dropped",
        "no-finish",
        "garbage",
        "error-event",
    ],
)
async def test_fault_is_spoken_and_the_next_turn_recovers(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    fake: FakeLlama,
    handler: Handler,
    spoken: str,
) -> None:
    """Each fault becomes a short translated message; the next turn works again."""
    good = fake.chat
    fake.chat = handler
    result = await _say(hass, init_integration)
    assert result.response.response_type is intent.IntentResponseType.ERROR
    assert spoken in result.response.speech["plain"]["speech"]
    fake.chat = good
    result = await _say(hass, init_integration)
    assert result.response.speech["plain"]["speech"] == "Hi there."


async def test_rejected_key_starts_reauth(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    fake.chat = status(401, "authentication_error")
    result = await _say(hass, init_integration)
    assert "rejected the key" in result.response.speech["plain"]["speech"]
    await hass.async_block_till_done()
    flows = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    assert [f["context"]["source"] for f in flows] == [SOURCE_REAUTH]


async def test_dead_server(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """A server that went away: "cannot reach", not a hang."""
    await fake.stop()
    result = await _say(hass, init_integration)
    assert "Cannot reach" in result.response.speech["plain"]["speech"]


async def test_reasoning_is_never_spoken(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    fake.chat = streaming(
        sse(
            chunk({"role": "assistant", "reasoning_content": "Let me think."}),
            chunk({"content": "<thi"}),
            chunk({"content": "nk>hidden</th"}),
            chunk({"content": "ink>The light is on."}),
            chunk({}, "stop"),
            {
                **chunk({}),
                "choices": [],
                "usage": {"prompt_tokens": 15, "completion_tokens": 3, "total_tokens": 18},
                "timings": TIMINGS,
            },
            "data: [DONE]\n\n",
        )
    )
    result = await _say(hass, init_integration)
    assert result.response.speech["plain"]["speech"] == "The light is on."
    assert init_integration.runtime_data.timings[subentry_id(init_integration)].cached_tokens == 10


async def test_streamed_tool_call_fragments_and_its_result(
    hass: HomeAssistant, mock_config_entry: MockConfigEntry, fake: FakeLlama
) -> None:
    """Arguments split over several deltas are joined; the tool result is sent back."""
    tool = GetTimeTool()
    llm.async_register_api(hass, TimeAPI(hass, tool))
    sub = next(iter(mock_config_entry.subentries.values()))
    hass.config_entries.async_update_subentry(
        mock_config_entry, sub, data={**sub.data, CONF_LLM_HASS_API: [TIME_API_ID]}
    )
    await setup_entry(hass, mock_config_entry)
    first = {
        "index": 0,
        "id": "c1",
        "type": "function",
        "function": {"name": "get_", "arguments": '{"a'},
    }
    second = {"index": 0, "function": {"name": "time", "arguments": '": 1}'}}
    replies = [
        sse(
            chunk({"tool_calls": [first]}), chunk({"tool_calls": [second]}), chunk({}, "tool_calls")
        )
    ]

    async def handler(request: Any) -> Any:
        body = (
            replies.pop(0) if replies else sse(chunk({"content": "It is noon."}), chunk({}, "stop"))
        )
        return await stream_bytes(request, body)

    fake.chat = handler
    result = await _say(hass, mock_config_entry)
    assert result.response.speech["plain"]["speech"] == "It is noon."
    assert tool.calls == 1
    assert fake.requests[-1]["messages"][-1]["role"] == "tool"
    assert fake.requests[-2]["messages"][-1]["role"] == "user"


async def test_a_question_keeps_the_satellite_listening(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    good = fake.chat
    fake.chat = streaming(sse(chunk({"content": "Which room?"}), chunk({}, "stop")))
    result = await _say(hass, init_integration)
    assert result.continue_conversation is True
    fake.chat = good
    result = await _say(hass, init_integration, "kitchen", result.conversation_id)
    assert result.continue_conversation is False
    assert [m["role"] for m in fake.requests[-1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]


def _tool_call_then_reply() -> Handler:
    """A round that calls get_time, then a round that answers."""
    replies = [
        sse(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_time", "arguments": "{}"},
                        }
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        )
    ]

    async def handler(request: Any) -> Any:
        body = replies.pop(0) if replies else sse(chunk({"content": "Noon."}), chunk({}, "stop"))
        return await stream_bytes(request, body)

    return handler


@pytest.mark.parametrize("kind", ["busy-slot-then-reply", "two-tool-rounds"])
async def test_the_timeout_bounds_the_whole_turn(
    hass: HomeAssistant, mock_config_entry: MockConfigEntry, fake: FakeLlama, kind: str
) -> None:
    """The agent's timeout (0.5 s) is one deadline for the turn: a wait for the slot and a reply
    that each fit in it, or two tool rounds that each do, still time out together (each part
    below takes at least 0.3 s)."""
    tool = GetTimeTool()
    llm.async_register_api(hass, TimeAPI(hass, tool))
    sub = next(iter(mock_config_entry.subentries.values()))
    hass.config_entries.async_update_subentry(
        mock_config_entry, sub, data={**sub.data, CONF_LLM_HASS_API: [TIME_API_ID]}
    )
    await setup_entry(hass, mock_config_entry)
    fake.delays["/v1/chat/completions"] = 0.3
    holder: asyncio.Task[None] | None = None
    if kind == "busy-slot-then-reply":
        leased = asyncio.Event()

        async def hold() -> None:
            async with mock_config_entry.runtime_data.scheduler.lease((0,)):
                leased.set()
                await asyncio.sleep(0.3)

        holder = asyncio.create_task(hold())
        await leased.wait()
    else:
        fake.chat = _tool_call_then_reply()
    result = await _say(hass, mock_config_entry)
    if holder is not None:
        await holder
    assert result.response.response_type is intent.IntentResponseType.ERROR
    assert "did not answer within 0.5 seconds" in result.response.speech["plain"]["speech"]
