"""Edge cases of the warm-slot watcher, the client and the repairs (fake server for faults)."""

from __future__ import annotations

import pytest
from homeassistant.components import conversation
from homeassistant.components.conversation.const import DATA_COMPONENT
from homeassistant.core import Context, HomeAssistant
from homeassistant.helpers import intent
from homeassistant.helpers import issue_registry as ir
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.client import (
    LlamaClient,
    LlamaNotServerError,
    LlamaResponseError,
    LlamaStreamError,
    LlamaTimeoutError,
)
from custom_components.voice_stack.const import (
    CONF_MODEL,
    CONF_PROMPT,
    CONF_REASONING,
    DOMAIN,
    REASONING_DISABLED,
)
from custom_components.voice_stack.repairs import ServerState, find_issues
from tests.integration.agent_helpers import agent, make_entry, setup_entry
from tests.integration.fake_llama import FakeLlama, slow

pytestmark = pytest.mark.usefixtures("socket_enabled")


async def test_rewarm_after_restart_and_outage(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A changed /props fingerprint or an outage re-warms; a steady server does not."""
    entry = make_entry(
        fake.url, "k", [agent(0, **{CONF_MODEL: "m", CONF_REASONING: REASONING_DISABLED})]
    )
    await setup_entry(hass, entry)
    warmer = entry.runtime_data.warmer
    assert warmer is not None
    await warmer.async_check()
    warm = [r for r in fake.warm_requests if r.get("max_tokens") == 0 and "n_predict" in r]
    assert warm
    assert warm[-1]["model"] == "m"
    assert warm[-1]["chat_template_kwargs"] == {"enable_thinking": False}
    count = len(fake.warm_requests)
    fake.overrides["/slots"] = (200, '[{"id": 0, "n_ctx": 4096, "id_task": 5}]')
    await warmer._interval(None)
    assert len(fake.warm_requests) == count  # steady: nothing sent

    fake.props = {**fake.props, "build_info": "new"}
    await warmer.async_check()
    assert len(fake.warm_requests) > count

    count = len(fake.warm_requests)
    fake.props_status = 500
    await warmer.async_check()
    await warmer.async_check()
    fake.props_status = 200
    await warmer.async_check()
    assert len(fake.warm_requests) > count


async def test_bad_template(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A broken instructions template: the warmer logs it, a turn answers with an error."""
    entry = make_entry(fake.url, "k", [agent(0, **{CONF_PROMPT: "{{ broken"})])
    await setup_entry(hass, entry)
    warmer = entry.runtime_data.warmer
    assert warmer is not None
    await warmer.async_check()
    assert not warmer.warmed
    agent_id = next(
        s.entity_id for s in hass.states.async_all("conversation") if "agent" in s.entity_id
    )
    result = await conversation.async_converse(hass, "hi", None, Context(), agent_id=agent_id)
    assert result.response.response_type is intent.IntentResponseType.ERROR


async def test_warm_failure_and_probe_failure(hass: HomeAssistant, fake: FakeLlama) -> None:
    """Non-streamed requests failing: no unified-KV verdict, slot not marked warm."""
    fake.overrides["/v1/chat/completions"] = (500, '{"error": {"code": 500, "message": "x"}}')
    entry = make_entry(fake.url, "k", [agent(0)])
    await setup_entry(hass, entry)
    warmer = entry.runtime_data.warmer
    assert warmer is not None
    await warmer.async_check()
    assert warmer.state is not None
    assert warmer.state.unified_kv is None
    assert not warmer.warmed


async def test_remove_entry_clears_issues(hass: HomeAssistant, fake: FakeLlama) -> None:
    """Removing the server deletes its repair issues."""
    entry = make_entry(fake.url, "k", [agent(0), agent(0)])
    await setup_entry(hass, entry)
    assert entry.runtime_data.warmer is not None
    await entry.runtime_data.warmer.async_check()
    assert ir.async_get(hass).async_get_issue(DOMAIN, f"{entry.entry_id}_shared_slot_0")
    await hass.config_entries.async_remove(entry.entry_id)
    assert not [
        i for (d, i) in ir.async_get(hass).issues if d == DOMAIN and i.startswith(entry.entry_id)
    ]


@pytest.mark.parametrize(
    ("path", "status", "body", "call", "error"),
    [
        ("/props", 200, "[]", "props", LlamaNotServerError),
        ("/slots", 200, "{}", "slots", LlamaNotServerError),
        ("/proxy/status", 500, "{}", "proxy_status", LlamaResponseError),
    ],
)
async def test_client_foreign_replies(  # noqa: PLR0917 - fixtures plus parameters
    hass: HomeAssistant,
    fake: FakeLlama,
    path: str,
    status: int,
    body: str,
    call: str,
    error: type[Exception],
) -> None:
    """Replies that are not llama-server's raise typed errors."""
    fake.overrides[path] = (status, body)
    client = LlamaClient(async_get_clientsession(hass), fake.url, "k")
    with pytest.raises(error):
        await getattr(client, call)()


async def test_client_lenient_replies(hass: HomeAssistant, fake: FakeLlama) -> None:
    """No model list, a proxy status without slots, a 404 status: empty answers."""
    client = LlamaClient(async_get_clientsession(hass), fake.url, "k")
    fake.overrides["/v1/models"] = (200, "[]")
    assert await client.models() == []
    fake.overrides["/proxy/status"] = (200, '{"service": "other"}')
    assert await client.proxy_status() is None
    del fake.overrides["/proxy/status"]
    assert await client.proxy_status() is None  # 404 from a plain server


async def test_client_completion_faults(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A non-object completion, a slow reply, a cut stream."""
    client = LlamaClient(async_get_clientsession(hass), fake.url, "k")
    fake.overrides["/v1/chat/completions"] = (200, "[1]")
    with pytest.raises(LlamaNotServerError):
        await client.complete({"messages": []}, 5)
    fake.chat = slow(3)
    with pytest.raises(LlamaTimeoutError):
        async for _ in client.stream({"messages": []}, 0.3):
            pass


def test_repair_rules_without_data() -> None:
    """No caps: assume tools work. No agents: no issues. A big prefix: context issue."""
    assert ServerState({}, [], None).tool_calling is True
    empty = MockConfigEntry(domain=DOMAIN, data={})
    assert find_issues(empty, ServerState({"total_slots": 4}, [], None)) == {}
    entry = make_entry("http://x", "k", [agent(0)])
    sub = next(iter(entry.subentries))
    state = ServerState(
        {"total_slots": 4}, [{"id": 0, "n_ctx": 600}], None, prefix_tokens={sub: 300}
    )
    issues = find_issues(entry, state)
    assert list(issues) == [f"{entry.entry_id}_{sub}_context_too_small"]
    assert issues[f"{entry.entry_id}_{sub}_context_too_small"][1]["needed"] == "812"


def test_stream_error_type() -> None:
    """Importable error types stay distinct."""
    assert not issubclass(LlamaStreamError, LlamaTimeoutError)


async def test_supported_languages(hass: HomeAssistant, fake: FakeLlama) -> None:
    """The agent accepts any language."""
    entry = make_entry(fake.url, "k", [agent(0)])
    await setup_entry(hass, entry)
    agent_id = next(
        s.entity_id for s in hass.states.async_all("conversation") if "agent" in s.entity_id
    )
    entity = hass.data[DATA_COMPONENT].get_entity(agent_id)
    assert entity is not None
    assert entity.supported_languages == "*"
