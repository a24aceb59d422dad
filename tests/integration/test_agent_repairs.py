"""Repair issues raised from a real, misconfigured llama-server (and the real auth proxy)."""

from __future__ import annotations

from typing import Any

import pytest
from homeassistant.components import conversation
from homeassistant.config_entries import ConfigEntryState
from homeassistant.core import Context, HomeAssistant
from homeassistant.helpers import intent, llm
from homeassistant.helpers import issue_registry as ir
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.client import LlamaClient
from custom_components.voice_stack.const import (
    CONF_LLM_HASS_API,
    CONF_MAX_TOKENS,
    CONF_PROMPT,
    CONF_SLOT,
    DOMAIN,
)
from tests.integration.agent_helpers import (
    TIME_API_ID,
    GetTimeTool,
    TimeAPI,
    agent,
    make_entry,
    setup_entry,
    slot_state,
)
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import start_proxy

pytestmark = pytest.mark.usefixtures("socket_enabled")


async def _setup_checked(hass: HomeAssistant, entry: MockConfigEntry) -> set[str]:
    """Set up, run one full server check, return the issue ids (without the entry prefix)."""
    await setup_entry(hass, entry)
    return await _check(hass, entry)


async def _check(hass: HomeAssistant, entry: MockConfigEntry) -> set[str]:
    warmer = entry.runtime_data.warmer
    assert warmer is not None
    await warmer.async_check()
    prefix = f"{entry.entry_id}_"
    return {
        issue_id.removeprefix(prefix)
        for (domain, issue_id) in ir.async_get(hass).issues
        if domain == DOMAIN and issue_id.startswith(prefix)
    }


def _sub(entry: MockConfigEntry, index: int) -> str:
    return list(entry.subentries)[index]


async def test_unified_kv_cache(hass: HomeAssistant, llama_factory: Any) -> None:
    """--kv-unified clears idle slots: the probe notices and a repair says how to fix it."""
    server = llama_factory("tiny-text", ctx_per_slot=1024, extra_args=["--kv-unified"])
    entry = make_entry(server.url, server.api_key, [agent(0)])
    issues = await _setup_checked(hass, entry)
    assert issues == {"unified_kv_cache"}
    issue = ir.async_get(hass).async_get_issue(DOMAIN, f"{entry.entry_id}_unified_kv_cache")
    assert issue is not None
    assert issue.translation_placeholders == {"slots": "4"}
    assert await hass.config_entries.async_reload(entry.entry_id)
    await hass.async_block_till_done()
    assert await _check(hass, entry) == {"unified_kv_cache"}  # the known verdict


async def test_slot_layout_issues_and_fix(hass: HomeAssistant, llama_text: LlamaServer) -> None:
    """Two agents on one slot and a slot past -np raise issues; fixing the slots clears them."""
    entry = make_entry(
        llama_text.url,
        llama_text.api_key,
        [agent(0, title="Kitchen"), agent(0, title="Office"), agent(7, title="Far")],
    )
    issues = await _setup_checked(hass, entry)
    far = _sub(entry, 2)
    assert issues == {"shared_slot_0", f"{far}_slot_out_of_range"}
    shared = ir.async_get(hass).async_get_issue(DOMAIN, f"{entry.entry_id}_shared_slot_0")
    assert shared is not None
    assert shared.translation_placeholders == {"slot": "0", "agents": "Kitchen, Office"}

    for index, slot in ((1, 1), (2, 2)):
        subentry = entry.subentries[_sub(entry, index)]
        hass.config_entries.async_update_subentry(
            entry, subentry, data={**subentry.data, CONF_SLOT: slot}
        )
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED
    assert await _check(hass, entry) == set()


async def test_tool_calling_unsupported(hass: HomeAssistant, llama_factory: Any) -> None:
    """An agent with an LLM API on a template without tools gets a repair issue."""
    llm.async_register_api(hass, TimeAPI(hass, GetTimeTool()))
    server = llama_factory("tiny-text", ctx_per_slot=1024, extra_args=["--chat-template", "chatml"])
    entry = make_entry(server.url, server.api_key, [agent(0, **{CONF_LLM_HASS_API: [TIME_API_ID]})])
    issues = await _setup_checked(hass, entry)
    assert issues == {f"{_sub(entry, 0)}_no_tool_calling"}


def _agent_entity(hass: HomeAssistant) -> str:
    return next(
        s.entity_id for s in hass.states.async_all("conversation") if "agent_slot_0" in s.entity_id
    )


def _warn_count(caplog: pytest.LogCaptureFixture) -> int:
    return sum(
        1 for r in caplog.records if r.levelname == "WARNING" and "Could not warm" in r.message
    )


async def test_context_too_small(
    hass: HomeAssistant, llama_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A prompt larger than the slot: the warm-up raises the repair (its warning logged once),
    a turn gets a clear spoken error; a server with a larger context clears both."""
    server = llama_factory("tiny-text", ctx_per_slot=256)
    long_prompt = "You are a helpful assistant. " * 60
    entry = make_entry(server.url, server.api_key, [agent(0, **{CONF_PROMPT: long_prompt})])
    issue_id = f"{entry.entry_id}_{_sub(entry, 0)}_context_too_small"
    assert f"{_sub(entry, 0)}_context_too_small" in await _setup_checked(hass, entry)
    issue = ir.async_get(hass).async_get_issue(DOMAIN, issue_id)
    assert issue is not None
    assert issue.translation_placeholders is not None
    assert issue.translation_placeholders["n_ctx"] == "256"
    await _check(hass, entry)
    assert _warn_count(caplog) == 1, "a slot that cannot be warmed is reported once"

    result = await conversation.async_converse(
        hass, "hi", None, Context(), agent_id=_agent_entity(hass)
    )
    assert result.response.response_type is intent.IntentResponseType.ERROR
    assert "too long" in result.response.speech["plain"]["speech"]
    assert ir.async_get(hass).async_get_issue(DOMAIN, issue_id) is not None

    # llama-server restarted with a larger context: the slot warms and the repair goes.
    argv = list(server.argv)
    argv[argv.index("-c") + 1] = str(8192 * 4)
    server.argv = argv
    await hass.async_add_executor_job(server.restart)
    caplog.clear()
    await _check(hass, entry)
    assert ir.async_get(hass).async_get_issue(DOMAIN, issue_id) is None
    assert "Warmed slot 0 for Agent slot 0 again" in caplog.text
    assert _sub(entry, 0) in entry.runtime_data.warmer.warmed


async def test_context_error_survives_warm_cycles(hass: HomeAssistant, llama_factory: Any) -> None:
    """The prefix fits but a long request does not: the repair outlives the periodic check
    and goes once a request of that agent succeeds."""
    server = llama_factory("tiny-text", ctx_per_slot=512)
    entry = make_entry(
        server.url, server.api_key, [agent(0, **{CONF_PROMPT: "Be brief.", CONF_MAX_TOKENS: 16})]
    )
    assert await _setup_checked(hass, entry) == set()
    issue_id = f"{entry.entry_id}_{_sub(entry, 0)}_context_too_small"
    agent_id = _agent_entity(hass)
    result = await conversation.async_converse(
        hass, "hi " * 400, None, Context(), agent_id=agent_id
    )
    assert result.response.response_type is intent.IntentResponseType.ERROR
    assert ir.async_get(hass).async_get_issue(DOMAIN, issue_id) is not None

    assert f"{_sub(entry, 0)}_context_too_small" in await _check(hass, entry)
    issue = ir.async_get(hass).async_get_issue(DOMAIN, issue_id)
    assert issue is not None
    assert issue.translation_placeholders is not None
    assert int(issue.translation_placeholders["needed"]) > 512

    result = await conversation.async_converse(hass, "hi", None, Context(), agent_id=agent_id)
    assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
    assert ir.async_get(hass).async_get_issue(DOMAIN, issue_id) is None
    assert await _check(hass, entry) == set()


async def test_unified_kv_probe_once_per_server(
    hass: HomeAssistant, llama_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe runs on the agents' own slots, and not again when the entry reloads."""
    server = llama_factory("tiny-text")
    probes: list[int] = []
    original = LlamaClient.complete

    async def spy(self: LlamaClient, payload: dict[str, Any], timeout_s: float) -> Any:
        if str(payload["messages"][0]["content"]).startswith("Voice Stack unified KV"):
            probes.append(payload["id_slot"])
        return await original(self, payload, timeout_s)

    monkeypatch.setattr(LlamaClient, "complete", spy)
    entry = make_entry(server.url, server.api_key, [agent(0), agent(2)])
    assert await _setup_checked(hass, entry) == set()
    assert probes == [0, 2, 0]
    assert "id_task" not in await hass.async_add_executor_job(slot_state, server, 1)

    assert await hass.config_entries.async_reload(entry.entry_id)
    await hass.async_block_till_done()
    assert await _check(hass, entry) == set()
    assert probes == [0, 2, 0], "same llama-server process: the verdict is known"
    assert entry.runtime_data.warmer.state.unified_kv is False

    await hass.async_add_executor_job(server.restart)
    await _check(hass, entry)
    assert probes == [0, 2, 0, 0, 2, 0], "a new process is probed again"


async def test_through_proxy_reserved_slot(
    hass: HomeAssistant, llama_text: LlamaServer, tmp_path: Any
) -> None:
    """Through the real nginx auth proxy: the reply lands on slot 0; slot 1 is not reserved."""
    proxy = await hass.async_add_executor_job(
        lambda: start_proxy(
            llama_text.url,
            "proxy-key-Abc",
            llama_text.api_key or "",
            reserved_slots=(0,),
            log_dir=tmp_path,
        )
    )
    try:
        entry = make_entry(
            proxy.url, proxy.proxy_key, [agent(0, title="Voice"), agent(1, title="Other")]
        )
        issues = await _setup_checked(hass, entry)
        assert issues == {f"{_sub(entry, 1)}_slot_not_reserved"}
        issue = ir.async_get(hass).async_get_issue(
            DOMAIN, f"{entry.entry_id}_{_sub(entry, 1)}_slot_not_reserved"
        )
        assert issue is not None
        assert issue.translation_placeholders is not None
        assert issue.translation_placeholders["reserved"] == "0"

        agent_id = next(
            s.entity_id for s in hass.states.async_all("conversation") if "voice" in s.entity_id
        )
        before = (await hass.async_add_executor_job(slot_state, llama_text, 0)).get("id_task", -1)
        result = await conversation.async_converse(hass, "hi", None, Context(), agent_id=agent_id)
        assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
        after = await hass.async_add_executor_job(slot_state, llama_text, 0)
        assert after["id_task"] > before
        timings = entry.runtime_data.timings[_sub(entry, 0)]
        assert timings.cached_tokens > 0
    finally:
        await hass.async_add_executor_job(proxy.stop)
