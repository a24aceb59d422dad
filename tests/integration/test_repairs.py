"""Repair issues: the rules on given facts, and each issue raised from a real misconfigured
llama-server, the real auth proxy, or a faulty stand-in where no real one misbehaves so."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from homeassistant.components import conversation
from homeassistant.config_entries import ConfigEntryState
from homeassistant.core import Context, HomeAssistant
from homeassistant.helpers import intent, llm
from homeassistant.helpers import issue_registry as ir
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack import repairs
from custom_components.voice_stack.const import (
    CONF_LLM_HASS_API,
    CONF_MAX_TOKENS,
    CONF_PROMPT,
    CONF_SLOTS,
    DOMAIN,
)
from custom_components.voice_stack.payloads import (
    LlamaData,
    ProxyData,
    ProxyStatus,
    parse_props,
    parse_slots,
)
from custom_components.voice_stack.repairs import (
    ContextError,
    Findings,
    agent_issues,
    apply_issues,
    proxy_issues,
    shared_slot_issues,
)
from tests.integration.conftest import RealLlama, Server
from tests.integration.helpers import (
    TIME_API_ID,
    GetTimeTool,
    TimeAPI,
    agent,
    agent_entity,
    issue,
    issues,
    poll,
    setup_entry,
    stack_entry,
    subentry_id,
)
from voice_stack_dev.fakes.integration import FakeLlama, ForwardingProxy
from voice_stack_dev.llama import LlamaServer, llama_argv
from voice_stack_dev.nginx import start_proxy
from voice_stack_dev.procs import free_port

from .test_agent import _agent

LLAMA = LlamaData(
    loading=False,
    latency_ms=1.0,
    props=parse_props({"total_slots": 4, "chat_template_caps": {"supports_tool_calls": False}}),
    slots=parse_slots([{"id": i, "n_ctx": 600} for i in range(4)]),
)


def _issue_text(key: str, placeholders: dict[str, str]) -> str:
    """An issue's description as the user reads it (en.json filled in)."""
    strings = json.loads((Path(repairs.__file__).parent / "translations" / "en.json").read_text())
    return str(strings["issues"][key]["description"]).format(**placeholders)


def _proxy(*reserved: int, scope: str | None = "agent", total: int = 4) -> ProxyData:
    status = ProxyStatus("voice-stack-llm-auth", reserved, total, scope is not None, scope)  # type: ignore[arg-type]
    return ProxyData(1.0, status, open_without_key=False, open_with_wrong_key=False)


async def test_agent_rules_cover_the_whole_pool(hass: HomeAssistant) -> None:
    """Every slot of a pool counts: outside the server, not reserved, shared."""
    pool = _agent(hass, 1, 5, title="Pool", **{CONF_LLM_HASS_API: ["assist"]})
    found = {i.key: i.placeholders for i in agent_issues(pool, LLAMA, _proxy(0, 1), Findings())}
    assert found["slot_out_of_range"]["slot"] == "5"
    assert found["slot_not_reserved"] == {"agent": "Pool", "slot": "5", "reserved": "0,1"}
    assert "no_tool_calling" in found
    other = _agent(hass, 0, 1, title="Other")
    (shared,) = shared_slot_issues([pool, other])
    assert (shared.slot, shared.placeholders["agents"]) == (1, "Other, Pool")


async def test_context_rules(hass: HomeAssistant) -> None:
    """A primed prefix plus the reply larger than the slot, or a refused request; a refusal
    from before the slots grew is forgotten."""
    voice = _agent(hass, 0, **{CONF_MAX_TOKENS: 512})
    (primed,) = agent_issues(voice, LLAMA, None, Findings(prefix_tokens={voice.id: 300}))
    assert primed.key == "context_too_small"
    # the figures to set: per slot (LLM_CTX_PER_SLOT, rounded up to 1024), and -c for -np 4
    assert dict(primed.placeholders) == {
        "agent": voice.title,
        "slot": "0",
        "needed": "812",
        "n_ctx": "600",
        "per_slot": "1024",
        "slots": "4",
        "ctx_size": "4096",
    }
    refused = Findings(context_errors={voice.id: ContextError(0, 900, 600, from_warm=False)})
    (error,) = agent_issues(voice, LLAMA, None, refused)
    # a refused prompt of 900 tokens needs room for the reply too
    assert (error.placeholders["needed"], error.placeholders["ctx_size"]) == ("1412", "8192")
    old = Findings(context_errors={voice.id: ContextError(0, 900, 300, from_warm=False)})
    assert agent_issues(voice, LLAMA, None, old) == []
    assert voice.id in old.context_errors  # computing the issues changes no finding


async def test_sync_forgets_outgrown_errors_and_primed_applies_once(
    hass: HomeAssistant, init_integration: MockConfigEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acting is sync's alone: it drops a refusal the slots outgrew; a prime applies once."""
    data = init_integration.runtime_data
    (agent_,) = data.agents.values()
    applied: list[object] = []
    real_apply = repairs.apply_issues

    def counting(*args: Any) -> None:
        applied.append(args)
        real_apply(*args)

    monkeypatch.setattr(repairs, "apply_issues", counting)
    data.repairs.findings.context_errors[agent_.id] = ContextError(0, 900, 1, from_warm=True)
    data.repairs.sync()
    assert data.repairs.findings.context_errors == {}
    assert len(applied) == 1
    data.repairs.findings.context_errors[agent_.id] = ContextError(0, 9, 10**9, from_warm=True)
    data.repairs.primed(agent_, 10)
    assert data.repairs.findings.context_errors == {}
    assert len(applied) == 2


async def test_proxy_rules() -> None:
    """The general key on a proxy with scoped keys; a slot-count clash; no status, no checks."""
    entry = MockConfigEntry(domain=DOMAIN, title="t", data={"url": "http://a:b@gpu:11434"})
    general = [i.key for i in proxy_issues(entry, _proxy(0, scope="general", total=2), LLAMA)]
    assert general == ["general_key_in_use", "proxy_slot_count_mismatch"]
    assert proxy_issues(entry, _proxy(0, scope=None), LLAMA) == []
    (url,) = {i.placeholders["url"] for i in proxy_issues(entry, _proxy(0, scope="general"), LLAMA)}
    assert url == "http://gpu:11434"  # never the credentials


async def test_apply_replaces_issues_of_the_older_id_scheme(hass: HomeAssistant) -> None:
    """Issues of an earlier version (`{key}_{entry_id}`) go when the entry's issues are applied."""
    entry = MockConfigEntry(domain=DOMAIN, entry_id="e1")
    for issue_id in ("metrics_disabled_e1", "e1_shared_slot_0", "other_entry_issue"):
        ir.async_create_issue(
            hass, DOMAIN, issue_id, is_fixable=False, severity=ir.IssueSeverity.WARNING,
            translation_key="metrics_disabled",
        )  # fmt: skip
    apply_issues(hass, entry, [])
    left = {i for d, i in ir.async_get(hass).issues if d == DOMAIN}
    assert left == {"other_entry_issue"}


class TestRealServer:
    """One real tiny-model llama-server for the issues of a plain setup."""

    @pytest.fixture
    def server(self, llama_text: LlamaServer) -> Server:
        return Server.of(llama_text)

    @pytest.fixture
    def agents(self) -> list[dict[str, Any]]:
        return [agent(0, title="Kitchen"), agent(0, title="Office"), agent(7, title="Far")]

    async def test_slot_layout_issues_and_fix(
        self, hass: HomeAssistant, init_integration: MockConfigEntry
    ) -> None:
        """Two agents on one slot and a slot past -np raise issues; fixing the slots clears them,
        and removing the entry removes its issues."""
        entry = init_integration
        far = subentry_id(entry, 2)
        assert issues(hass, entry) == {"shared_slot_0", f"{far}_slot_out_of_range"}
        assert issue(hass, entry, "shared_slot_0").translation_placeholders == {
            "slot": "0",
            "agents": "Kitchen, Office",
        }
        for index, slots in ((1, [1]), (2, [2, 3])):
            subentry = entry.subentries[subentry_id(entry, index)]
            hass.config_entries.async_update_subentry(
                entry, subentry, data={**subentry.data, CONF_SLOTS: slots}
            )
        await poll(hass, entry)
        assert entry.state is ConfigEntryState.LOADED
        assert issues(hass, entry) == set()
        await hass.config_entries.async_remove(entry.entry_id)
        assert not [i for d, i in ir.async_get(hass).issues if d == DOMAIN]


class TestToolCalling:
    @pytest.fixture
    def server(self, llama_factory: Any) -> Server:
        llama = llama_factory(
            "tiny-text", ctx_per_slot=1024, extra_args=["--chat-template", "chatml"]
        )
        return Server.of(llama)

    @pytest.fixture
    def agents(self) -> list[dict[str, Any]]:
        return [agent(0, **{CONF_LLM_HASS_API: [TIME_API_ID]})]

    async def test_tool_calling_unsupported(
        self, hass: HomeAssistant, mock_config_entry: MockConfigEntry
    ) -> None:
        """An agent that may control HA, on a template without tools, gets a repair issue."""
        llm.async_register_api(hass, TimeAPI(hass, GetTimeTool()))
        await setup_entry(hass, mock_config_entry)
        assert issues(hass, mock_config_entry) == {
            f"{subentry_id(mock_config_entry)}_no_tool_calling"
        }


class TestSmallContext(RealLlama):
    ctx_per_slot = 256

    @pytest.fixture
    def agents(self) -> list[dict[str, Any]]:
        return [agent(0, **{CONF_PROMPT: "You are a helpful assistant. " * 60})]

    async def test_context_too_small(
        self,
        hass: HomeAssistant,
        init_integration: MockConfigEntry,
        llama: LlamaServer,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """A prompt larger than the slot: the warm-up raises the repair (its warning once), a
        turn gets a clear spoken error; a server with larger slots clears both."""
        entry = init_integration
        key = f"{subentry_id(entry)}_context_too_small"
        assert issue(hass, entry, key).translation_placeholders["n_ctx"] == "256"  # type: ignore[index]
        await poll(hass, entry)
        records = caplog.get_records("setup") + caplog.get_records("call")
        assert sum("Could not warm slot 0" in r.getMessage() for r in records) == 1
        result = await conversation.async_converse(
            hass, "hi", None, Context(), agent_id=agent_entity(hass, entry)
        )
        assert result.response.response_type is intent.IntentResponseType.ERROR
        assert "too long" in result.response.speech["plain"]["speech"]
        assert key in issues(hass, entry)
        found = issue(hass, entry, key)
        placeholders = dict(found.translation_placeholders or {})
        text = _issue_text(found.translation_key or "", placeholders)
        assert f"`LLM_CTX_PER_SLOT={placeholders['per_slot']}` in `compose/.env`" in text
        assert f"`-c`/`--ctx-size` to {placeholders['ctx_size']}" in text
        assert "raise `-c`," not in text

        # exactly the figure the repair names is enough
        argv = list(llama.argv)
        argv[argv.index("-c") + 1] = placeholders["ctx_size"]
        llama.argv = argv
        await hass.async_add_executor_job(llama.restart)
        await poll(hass, entry)
        assert key not in issues(hass, entry)
        assert "Warmed slot 0 for Agent slot 0 again" in caplog.text


class TestLongRequest:
    @pytest.fixture
    def server(self, llama_factory: Any) -> Server:
        llama = llama_factory("tiny-text", ctx_per_slot=512)
        return Server.of(llama)

    @pytest.fixture
    def agents(self) -> list[dict[str, Any]]:
        return [agent(0, **{CONF_PROMPT: "Be brief.", CONF_MAX_TOKENS: 16})]

    async def test_context_error_survives_polls(
        self, hass: HomeAssistant, init_integration: MockConfigEntry
    ) -> None:
        """The prefix fits but a long request does not: the repair outlives the polls and goes
        once a request of that agent succeeds."""
        entry = init_integration
        key = f"{subentry_id(entry)}_context_too_small"
        assert issues(hass, entry) == set()
        agent_id = agent_entity(hass, entry)
        result = await conversation.async_converse(
            hass, "hi " * 400, None, Context(), agent_id=agent_id
        )
        assert result.response.response_type is intent.IntentResponseType.ERROR
        await poll(hass, entry)
        assert int(issue(hass, entry, key).translation_placeholders["needed"]) > 512  # type: ignore[index]
        result = await conversation.async_converse(hass, "hi", None, Context(), agent_id=agent_id)
        assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
        assert issues(hass, entry) == set()


async def test_through_the_real_proxy(
    hass: HomeAssistant, llama_text: LlamaServer, tmp_path: Path
) -> None:
    """The real nginx auth proxy reserving slot 0 only: a pool reaching slot 1 is flagged; a
    proxy told of 2 slots in front of a 4-slot server is flagged too; the general key, which the
    proxy keeps off the reserved slots, is flagged."""
    proxy = await hass.async_add_executor_job(
        partial(
            start_proxy,
            llama_text.url,
            "proxy-key-Abc",
            llama_text.api_key or "",
            total_slots=2,
            log_dir=tmp_path,
        )
    )
    try:
        entry = stack_entry(hass, proxy.url, proxy.agent_key, agent(0, 1, title="Voice"))
        await setup_entry(hass, entry)
        voice = subentry_id(entry)
        assert issues(hass, entry) == {f"{voice}_slot_not_reserved", "proxy_slot_count_mismatch"}
        placeholders = issue(hass, entry, f"{voice}_slot_not_reserved").translation_placeholders
        assert placeholders == {"agent": "Voice", "slot": "1", "reserved": "0"}
        assert issue(hass, entry, "proxy_slot_count_mismatch").translation_placeholders == {
            "proxy_slots": "2",
            "server_slots": "4",
        }
        general = stack_entry(hass, proxy.url, proxy.proxy_key, unique_id="general")
        await setup_entry(hass, general)
        assert "general_key_in_use" in issues(hass, general)
    finally:
        await hass.async_add_executor_job(proxy.stop)


async def test_general_key_on_a_scoped_proxy(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """A proxy with an agent key, reached with the general key: the repair names the fix."""
    fake.proxy_status = {
        "service": "voice-stack-llm-auth",
        "reserved_slots": [0],
        "total_slots": 4,
        "scoped_keys": True,
        "key_scope": "general",
    }
    await poll(hass, init_integration)
    assert issues(hass, init_integration) == {"general_key_in_use"}
    fake.proxy_status["key_scope"] = "agent"
    await poll(hass, init_integration)
    assert issues(hass, init_integration) == set()


async def test_open_doors(hass: HomeAssistant, llama_text: LlamaServer, llama_factory: Any) -> None:
    """A proxy forwarding requests without the key, and llama-server without --api-key: each
    gets its own error-level repair, gone once the door is shut."""
    proxy = await ForwardingProxy(llama_text, "client-key").start()
    try:
        proxy.check_key = False
        entry = stack_entry(hass, proxy.url, "client-key")
        await setup_entry(hass, entry)
        found = issue(hass, entry, "proxy_accepts_without_key")
        assert (found.severity, found.translation_placeholders) == (
            ir.IssueSeverity.ERROR,
            {"url": proxy.url},
        )
        proxy.check_key = True
        await poll(hass, entry)
        assert issues(hass, entry) == set()
    finally:
        await proxy.stop()
    open_server = llama_factory("tiny-text", api_key=None, ctx_per_slot=512)
    direct = stack_entry(hass, open_server.url, "")
    await setup_entry(hass, direct)
    assert issues(hass, direct) == {"server_has_no_api_key"}


async def test_disabled_endpoints(hass: HomeAssistant, service_logs: Path) -> None:
    """Without --metrics and with --no-slots: the repairs name the flags."""
    port = free_port()
    argv = [
        a
        for a in llama_argv("tiny-text", port, api_key="k", extra_args=["--no-slots"])
        if a != "--metrics"
    ]
    server = LlamaServer(
        name="llama-server (flags)",
        argv=argv,
        port=port,
        log_path=service_logs / f"flags-{port}.log",
        api_key="k",
    )
    await hass.async_add_executor_job(server.start)
    try:
        entry = stack_entry(hass, server.url, "k", title="t")
        await setup_entry(hass, entry)
        assert issues(hass, entry) == {"metrics_disabled", "slots_endpoint_disabled"}
        assert issue(hass, entry, "metrics_disabled").translation_placeholders == {"title": "t"}
    finally:
        await hass.async_add_executor_job(server.stop)
