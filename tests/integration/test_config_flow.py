"""The server entry's config flow: user step, reauth and reconfigure, against a real llama-server
(a fake one for a server that answers but is not llama-server)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from homeassistant.config_entries import SOURCE_RECONFIGURE, SOURCE_USER, ConfigEntryState
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.helpers.translation import async_get_translations
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components import voice_stack
from custom_components.voice_stack.const import (
    CONF_API_KEY,
    CONF_SLOTS,
    CONF_URL,
    DOMAIN,
    SUBENTRY_CONVERSATION,
)
from tests.integration.conftest import LoadingLlama
from tests.integration.helpers import agent, issues, stack_entry
from voice_stack_dev.fakes.integration import FAKE_KEY, FakeLlama, FakeOllama
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import start_proxy
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
    assert entry.unique_id is None, "a URL is no unique id (reconfigure can change it)"
    (sub,) = entry.subentries.values()
    assert sub.subentry_type == SUBENTRY_CONVERSATION
    assert sub.data[CONF_SLOTS] == [0]
    assert entry.title == "tiny-text on 127.0.0.1"  # the model and its host
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED

    again = await _user_flow(hass, llama_text.url, llama_text.api_key or "")
    assert again["type"] is FlowResultType.ABORT
    assert again["reason"] == "already_configured"


async def test_a_url_ending_in_v1_is_the_server_s_root(
    hass: HomeAssistant, llama_text: LlamaServer
) -> None:
    """The base URL as an OpenAI client takes it (Home Assistant's llama_cpp integration writes
    http://gpu-box:11434/v1) is saved and probed without /v1: llama-server's /props is at the
    root. The same URL with /v1/ is the same server; reconfigure drops /v1 too."""
    result = await _user_flow(hass, f"{llama_text.url}/v1", llama_text.api_key or "")
    assert result["type"] is FlowResultType.CREATE_ENTRY, result.get("errors")
    entry = result["result"]
    assert entry.data[CONF_URL] == llama_text.url
    again = await _user_flow(hass, f"{llama_text.url}/V1//", llama_text.api_key or "")
    assert (again["type"], again["reason"]) == (FlowResultType.ABORT, "already_configured")
    await hass.async_block_till_done()

    result = await hass.config_entries.flow.async_init(
        DOMAIN, context={"source": SOURCE_RECONFIGURE, "entry_id": entry.entry_id}
    )
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {CONF_URL: f"{llama_text.url}/v1/", CONF_API_KEY: llama_text.api_key}
    )
    assert (result["type"], result["reason"]) == (FlowResultType.ABORT, "reconfigure_successful")
    assert entry.data[CONF_URL] == llama_text.url
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED


async def test_ollama_is_named(hass: HomeAssistant, fake_ollama: FakeOllama) -> None:
    """A URL that reaches Ollama (its default port is the auth proxy's, 11434) is refused with
    a message that says so and names the proxy's port setting, not "Failed to connect"; with
    /v1, as Ollama's OpenAI clients write it, too."""
    for url in (fake_ollama.url, f"{fake_ollama.url}/v1"):
        result = await _user_flow(hass, url, "some-key")
        assert result["type"] is FlowResultType.FORM
        assert result["errors"] == {"base": "ollama_server"}
    message = (await async_get_translations(hass, "en", "config", {DOMAIN}))[
        f"component.{DOMAIN}.config.error.ollama_server"
    ]
    assert "Ollama" in message
    assert "LLM_PROXY_PORT" in message


async def test_the_first_agent_takes_a_slot_the_proxy_reserves(
    hass: HomeAssistant, llama_text: LlamaServer, tmp_path: Path
) -> None:
    """Through the real auth proxy reserving slot 2 only, the first agent is made on slot 2,
    not on slot 0 (which would raise a repair right away)."""
    proxy = await hass.async_add_executor_job(
        partial(
            start_proxy,
            llama_text.url,
            "proxy-Key-first",
            llama_text.api_key or "",
            reserved_slots=(2,),
            log_dir=tmp_path,
        )
    )
    try:
        result = await _user_flow(hass, proxy.url, proxy.agent_key)
        assert result["type"] is FlowResultType.CREATE_ENTRY
        entry = result["result"]
        assert [s.data[CONF_SLOTS] for s in entry.subentries.values()] == [[2]]
        await hass.async_block_till_done()
        assert entry.state is ConfigEntryState.LOADED
        assert issues(hass, entry) == set()
    finally:
        await hass.async_add_executor_job(proxy.stop)


async def test_the_first_agent_on_slot_0_when_the_status_does_not_answer(
    hass: HomeAssistant, fake: FakeLlama, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy status that hangs past the timeout is no reason to refuse the entry: the first
    agent goes on slot 0 (and a repair says so if the proxy does not reserve it)."""
    fake.proxy_status = {"service": "voice-stack-llm-auth", "reserved_slots": [2]}
    fake.delays["/proxy/status"] = 1.0
    monkeypatch.setattr("custom_components.voice_stack.client.PROBE_TIMEOUT", 0.1)
    result = await _user_flow(hass, fake.url, FAKE_KEY)
    assert result["type"] is FlowResultType.CREATE_ENTRY
    assert [s.data[CONF_SLOTS] for s in result["result"].subentries.values()] == [[0]]


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
async def test_user_flow_errors(
    hass: HomeAssistant,
    llama_text: LlamaServer,
    fake: FakeLlama,
    target: str,
    key: str,
    error: dict[str, str],
) -> None:
    """Each failure has its own message, and the form can be retried."""
    fake.overrides["/health"] = (200, "<html>not llama</html>")
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
    fake.overrides["/props"] = (200, "[]")
    result = await _user_flow(hass, fake.url, FAKE_KEY)
    assert result["errors"] == {"base": "not_llama_server"}
    fake.overrides["/props"] = (404, "{}")
    result = await _user_flow(hass, fake.url, FAKE_KEY)
    assert result["errors"] == {"base": "cannot_connect"}


async def test_a_server_still_loading_its_model(
    hass: HomeAssistant, loading_llama: LoadingLlama, tmp_path: Path
) -> None:
    """llama-server answering 503 "Loading model" (straight, or through the real auth proxy,
    which passes /health and the 503 on): the user step, reauth and reconfigure say that it is
    still loading, not "Failed to connect"; once it has loaded, the same form goes through."""
    loading = {"base": "model_loading"}
    user = await _user_flow(hass, loading_llama.url, LoadingLlama.KEY)
    assert (user["type"], user["errors"]) == (FlowResultType.FORM, loading)
    proxy = await hass.async_add_executor_job(
        partial(
            start_proxy, loading_llama.url, "proxy-Key-loading", LoadingLlama.KEY, log_dir=tmp_path
        )
    )
    try:
        through_proxy = await _user_flow(hass, proxy.url, proxy.agent_key)
        assert through_proxy["errors"] == loading
        entry = _entry(hass, proxy.url, "an-old-key")
        reauth = await entry.start_reauth_flow(hass)
        reauth = await hass.config_entries.flow.async_configure(
            reauth["flow_id"], {CONF_API_KEY: proxy.agent_key}
        )
        assert reauth["errors"] == loading
        moved = _entry(hass, f"http://127.0.0.1:{free_port()}", "k", [])
        reconfigure = await moved.start_reconfigure_flow(hass)
        reconfigure = await hass.config_entries.flow.async_configure(
            reconfigure["flow_id"], {CONF_URL: loading_llama.url, CONF_API_KEY: LoadingLlama.KEY}
        )
        assert reconfigure["errors"] == loading
    finally:
        await hass.async_add_executor_job(proxy.stop)

    await hass.async_add_executor_job(loading_llama.loaded)
    done = await hass.config_entries.flow.async_configure(
        user["flow_id"], {CONF_URL: loading_llama.url, CONF_API_KEY: LoadingLlama.KEY}
    )
    assert done["type"] is FlowResultType.CREATE_ENTRY
    assert done["title"] == "tiny-text on 127.0.0.1"


def _entry(
    hass: HomeAssistant, url: str, key: str | None, subs: list[dict[str, Any]] | None = None
) -> MockConfigEntry:
    """An entry as the user flow makes it (no unique id), added to HA."""
    return stack_entry(hass, url, key or "", *(subs if subs is not None else [agent(0)]))


async def _loaded_entry(
    hass: HomeAssistant,
    server: LlamaServer,
    key: str | None = None,
    subs: list[dict[str, Any]] | None = None,
) -> Any:
    assert await async_setup_component(hass, "homeassistant", {})
    entry = _entry(hass, server.url, key if key is not None else server.api_key, subs)
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
    """user:pass@ in the URL is kept for the requests, but not in the title; the same server
    without them is the same server."""
    server = llama_factory("tiny-text", api_key=None, ctx_per_slot=512)
    url = server.url.replace("http://", "http://Admin:S3cret@")
    result = await _user_flow(hass, url.replace("http://", "HTTP://") + "/", "")
    assert result["type"] is FlowResultType.CREATE_ENTRY
    entry = result["result"]
    assert entry.title == "tiny-text on 127.0.0.1"
    assert entry.unique_id is None
    assert entry.data[CONF_URL] == url  # the password keeps its case
    assert "S3cret" not in entry.title
    again = await _user_flow(hass, server.url, "")
    assert (again["type"], again["reason"]) == (FlowResultType.ABORT, "already_configured")


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
    entry = _entry(hass, server.url, "key-one")
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
    assert not _listener_warnings(caplog)


async def test_reauth_with_the_same_key_reloads_once(
    hass: HomeAssistant,
    llama_text: LlamaServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Confirming the key the entry already has (the server was fixed, not the key) still sets
    the entry up afresh, once, without HA's warning about an update listener."""
    entry = await _loaded_entry(hass, llama_text)
    assert entry.state is ConfigEntryState.LOADED
    calls = _count_setups(monkeypatch)
    result = await entry.start_reauth_flow(hass)
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"], {CONF_API_KEY: llama_text.api_key}
    )
    assert result["reason"] == "reauth_successful"
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED
    assert calls == [entry.entry_id]
    assert not _listener_warnings(caplog)


async def test_reconfigure(
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
    _entry(hass, fake.url, FAKE_KEY, [])  # another entry already has this URL

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
    assert entry.unique_id is None
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED
    assert calls == [entry.entry_id], "the update listener alone reloads the entry"
    assert not _listener_warnings(caplog)

    result = await entry.start_reconfigure_flow(hass)
    dup = await hass.config_entries.flow.async_configure(
        result["flow_id"], {CONF_URL: fake.url, CONF_API_KEY: FAKE_KEY}
    )
    assert dup["type"] is FlowResultType.ABORT
    assert dup["reason"] == "already_configured"


def _listener_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """HA's words about update listeners (asyncio's slow-task notes on a loaded machine, which
    name the listener's task, are not HA's)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name != "asyncio" and "update listener" in r.getMessage()
    ]
