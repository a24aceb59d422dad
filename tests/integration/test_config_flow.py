"""Config flow, reauth, reconfigure and agent subentry flows against a real llama-server."""

from __future__ import annotations

from typing import Any

import pytest
from homeassistant.config_entries import SOURCE_USER, ConfigEntryState
from homeassistant.const import CONF_NAME
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.setup import async_setup_component

from custom_components import voice_stack
from custom_components.voice_stack.const import (
    CONF_API_KEY,
    CONF_LLM_HASS_API,
    CONF_MAX_HISTORY,
    CONF_MAX_TOKENS,
    CONF_MODEL,
    CONF_PROMPT,
    CONF_PROMPT_LAYOUT,
    CONF_REASONING,
    CONF_SAVE_SLOT,
    CONF_SLOT,
    CONF_TEMPERATURE,
    CONF_TIMEOUT,
    CONF_URL,
    DOMAIN,
    SUBENTRY_AI_TASK,
    SUBENTRY_CONVERSATION,
)
from tests.integration.agent_helpers import agent, make_entry
from tests.integration.fake_llama import FakeLlama
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.procs import free_port

pytestmark = pytest.mark.usefixtures("socket_enabled")


@pytest.fixture(autouse=True)
async def setup_ha(hass: HomeAssistant) -> None:
    """Core config (exposed entities) that conversation needs."""
    assert await async_setup_component(hass, "homeassistant", {})


async def _user_flow(hass: HomeAssistant, url: str, key: str) -> Any:
    result = await hass.config_entries.flow.async_init(DOMAIN, context={"source": SOURCE_USER})
    assert result["type"] is FlowResultType.FORM
    return await hass.config_entries.flow.async_configure(
        result["flow_id"], {CONF_URL: url, CONF_API_KEY: key}
    )


async def test_user_flow_creates_server_and_agent(
    hass: HomeAssistant, llama_text: LlamaServer
) -> None:
    """A verified server becomes an entry with a first agent on slot 0; only once."""
    assert await async_setup_component(hass, "homeassistant", {})
    result = await _user_flow(hass, llama_text.url + "/", f" {llama_text.api_key} ")
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert result["data"] == {CONF_URL: llama_text.url, CONF_API_KEY: llama_text.api_key}
    entry = result["result"]
    assert entry.unique_id == llama_text.url
    (sub,) = entry.subentries.values()
    assert sub.subentry_type == SUBENTRY_CONVERSATION
    assert sub.data[CONF_SLOT] == 0
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED

    again = await _user_flow(hass, llama_text.url, llama_text.api_key or "")
    assert again["type"] is FlowResultType.ABORT
    assert again["reason"] == "already_configured"


@pytest.mark.parametrize(
    ("target", "key", "error"),
    [
        ("real", "wrong-key", {"base": "invalid_auth"}),
        ("closed", "k", {"base": "cannot_connect"}),
        ("fake", "k", {"base": "not_llama_server"}),
        ("ftp", "k", {CONF_URL: "invalid_url"}),
        ("bad-port", "k", {CONF_URL: "invalid_url"}),
        ("credentials", "k", {CONF_URL: "url_has_credentials"}),
    ],
)
async def test_user_flow_errors(  # noqa: PLR0917 - fixtures plus parameters
    hass: HomeAssistant,
    llama_text: LlamaServer,
    fake: FakeLlama,
    target: str,
    key: str,
    error: dict[str, str],
) -> None:
    """Each failure has its own message, and the form can be retried."""
    fake.health_body = "<html>not llama</html>"
    url = {
        "real": llama_text.url,
        "closed": f"http://127.0.0.1:{free_port()}",
        "fake": fake.url,
        "ftp": "ftp://example",
        "bad-port": "http://127.0.0.1:port",
        "credentials": f"http://user:secret@127.0.0.1:{free_port()}",
    }[target]
    result = await _user_flow(hass, url, key)
    assert result["type"] is FlowResultType.FORM
    assert result["errors"] == error


async def test_not_llama_props(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A /props that is not llama-server's is refused too."""
    fake.props_status = 404
    result = await _user_flow(hass, fake.url, "k")
    assert result["errors"] == {"base": "cannot_connect"}


async def _loaded_entry(
    hass: HomeAssistant,
    server: LlamaServer,
    key: str | None = None,
    subs: list[dict[str, Any]] | None = None,
) -> Any:
    assert await async_setup_component(hass, "homeassistant", {})
    entry = make_entry(
        server.url,
        key if key is not None else server.api_key,
        subs if subs is not None else [agent(0)],
    )
    entry.add_to_hass(hass)
    await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    return entry


async def test_reauth(hass: HomeAssistant, llama_text: LlamaServer) -> None:
    """A wrong key starts reauth; a wrong new key is refused; the right one reloads."""
    entry = await _loaded_entry(hass, llama_text, key="old-wrong")
    assert entry.state is ConfigEntryState.SETUP_ERROR
    (flow,) = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    result = await hass.config_entries.flow.async_configure(
        flow["flow_id"], {CONF_API_KEY: "still-wrong"}
    )
    assert result["errors"] == {"base": "invalid_auth"}
    result = await hass.config_entries.flow.async_configure(
        flow["flow_id"], {CONF_API_KEY: llama_text.api_key}
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "reauth_successful"
    await hass.async_block_till_done()
    assert entry.data[CONF_API_KEY] == llama_text.api_key
    assert entry.state is ConfigEntryState.LOADED


async def test_user_flow_url_with_credentials(hass: HomeAssistant, llama_factory: Any) -> None:
    """user:pass@ in the URL is kept for the requests, but not in the title or unique id."""
    server = llama_factory("tiny-text", api_key=None, ctx_per_slot=512)
    url = server.url.replace("http://", "http://Admin:S3cret@")
    result = await _user_flow(hass, url.replace("http://", "HTTP://") + "/", "")
    assert result["type"] is FlowResultType.CREATE_ENTRY
    entry = result["result"]
    assert entry.title == f"127.0.0.1:{server.port}"
    assert entry.unique_id == server.url
    assert entry.data[CONF_URL] == url  # the password keeps its case
    assert "S3cret" not in entry.title + entry.unique_id


def _count_setups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Entry ids of every async_setup_entry call from now on (to catch a double reload)."""
    calls: list[str] = []
    original = voice_stack.async_setup_entry

    async def counting(hass: HomeAssistant, entry: Any) -> bool:
        calls.append(entry.entry_id)
        return await original(hass, entry)

    monkeypatch.setattr(voice_stack, "async_setup_entry", counting)
    return calls


async def test_reauth_of_loaded_entry_reloads_once(
    hass: HomeAssistant,
    llama_factory: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A new key saved by reauth reloads a loaded entry once, through its update listener."""
    server = llama_factory("tiny-text", api_key="key-one,key-two", ctx_per_slot=512)
    entry = make_entry(server.url, "key-one", [agent(0)])
    entry.add_to_hass(hass)
    await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED
    calls = _count_setups(monkeypatch)
    result = await entry.start_reauth_flow(hass)
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {CONF_API_KEY: "key-two"}
    )
    assert result["reason"] == "reauth_successful"
    await hass.async_block_till_done()
    assert entry.data[CONF_API_KEY] == "key-two"
    assert entry.state is ConfigEntryState.LOADED
    assert calls == [entry.entry_id]
    assert "update listener" not in caplog.text


async def test_reconfigure(  # noqa: PLR0917 - fixtures
    hass: HomeAssistant,
    llama_text: LlamaServer,
    llama_tool: LlamaServer,
    fake: FakeLlama,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Change URL: verified, refused if another entry has it, saved and reloaded once."""
    entry = await _loaded_entry(hass, llama_text)
    calls = _count_setups(monkeypatch)
    other = make_entry(fake.url, "k", [])
    other.add_to_hass(hass)

    result = await entry.start_reconfigure_flow(hass)
    assert result["type"] is FlowResultType.FORM
    bad = await hass.config_entries.flow.async_configure(
        result["flow_id"], {CONF_URL: llama_text.url, CONF_API_KEY: "wrong"}
    )
    assert bad["errors"] == {"base": "invalid_auth"}
    ok = await hass.config_entries.flow.async_configure(
        bad["flow_id"], {CONF_URL: llama_tool.url, CONF_API_KEY: llama_tool.api_key}
    )
    assert ok["type"] is FlowResultType.ABORT
    assert ok["reason"] == "reconfigure_successful"
    assert entry.data[CONF_URL] == llama_tool.url
    assert entry.unique_id == llama_tool.url
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED
    assert calls == [entry.entry_id], "the update listener alone reloads the entry"
    assert "update listener" not in caplog.text

    result = await entry.start_reconfigure_flow(hass)
    dup = await hass.config_entries.flow.async_configure(
        result["flow_id"], {CONF_URL: fake.url, CONF_API_KEY: "k"}
    )
    assert dup["type"] is FlowResultType.ABORT
    assert dup["reason"] == "already_configured"


def _options(**over: Any) -> dict[str, Any]:
    return {
        CONF_MODEL: "tiny-text.gguf",
        CONF_SLOT: 1.0,
        CONF_TEMPERATURE: 0.2,
        CONF_MAX_TOKENS: 64.0,
        CONF_TIMEOUT: 30.0,
        CONF_REASONING: "disabled",
        CONF_PROMPT_LAYOUT: "cache_stable",
        CONF_SAVE_SLOT: False,
        **over,
    }


async def test_subentry_flows(hass: HomeAssistant, llama_text: LlamaServer) -> None:
    """Add a conversation agent (lowest free slot, model from the server), an AI Task; edit."""
    entry = await _loaded_entry(hass, llama_text)
    assert entry.state is ConfigEntryState.LOADED
    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_CONVERSATION), context={"source": SOURCE_USER}
    )
    assert result["type"] is FlowResultType.FORM
    schema = result["data_schema"].schema
    suggested = {
        str(k): k.description["suggested_value"] for k in schema if getattr(k, "description", None)
    }
    assert suggested[CONF_SLOT] == 1
    assert suggested[CONF_MODEL].endswith("tiny-text.gguf")
    result = await hass.config_entries.subentries.async_configure(
        result["flow_id"],
        {
            CONF_NAME: "Kitchen",
            **_options(
                **{CONF_PROMPT: "Be brief.", CONF_LLM_HASS_API: ["assist"], CONF_MAX_HISTORY: 4.0}
            ),
        },
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    kitchen = next(s for s in entry.subentries.values() if s.title == "Kitchen")
    assert kitchen.data[CONF_SLOT] == 1
    assert isinstance(kitchen.data[CONF_MAX_TOKENS], int)
    await hass.async_block_till_done()

    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_AI_TASK), context={"source": SOURCE_USER}
    )
    schema = result["data_schema"].schema
    keys = {str(k) for k in schema}
    assert CONF_PROMPT not in keys
    suggested = {
        str(k): k.description["suggested_value"] for k in schema if getattr(k, "description", None)
    }
    assert suggested[CONF_SLOT] == 2
    result = await hass.config_entries.subentries.async_configure(
        result["flow_id"], {CONF_NAME: "Tasks", **_options(**{CONF_SLOT: 2.0})}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    await hass.async_block_till_done()

    result = await entry.start_subentry_reconfigure_flow(hass, kitchen.subentry_id)
    assert result["type"] is FlowResultType.FORM
    result = await hass.config_entries.subentries.async_configure(
        result["flow_id"],
        _options(
            **{
                CONF_SLOT: 3.0,
                CONF_PROMPT: "Be brief.",
                CONF_LLM_HASS_API: [],
                CONF_MAX_HISTORY: 4.0,
            }
        ),
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "reconfigure_successful"
    assert entry.subentries[kitchen.subentry_id].data[CONF_SLOT] == 3


async def test_subentry_flow_aborts(hass: HomeAssistant, fake: FakeLlama) -> None:
    """Server gone after loading: cannot_connect. Not loaded: abort."""
    entry = make_entry(fake.url, "k", [agent(0)])
    entry.add_to_hass(hass)
    await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED
    await fake.stop()
    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_CONVERSATION), context={"source": SOURCE_USER}
    )
    assert result["reason"] == "cannot_connect"
    await hass.config_entries.async_unload(entry.entry_id)
    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_CONVERSATION), context={"source": SOURCE_USER}
    )
    assert result["reason"] == "entry_not_loaded"
