"""The agent subentry flow: add a conversation agent or an AI Task, change one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from homeassistant.config_entries import SOURCE_USER
from homeassistant.const import CONF_NAME
from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType, InvalidData
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components import voice_stack
from custom_components.voice_stack.const import (
    CONF_LLM_HASS_API,
    CONF_MAX_HISTORY,
    CONF_MAX_TOKENS,
    CONF_MODEL,
    CONF_PROMPT,
    CONF_PROMPT_LAYOUT,
    CONF_REASONING,
    CONF_SAVE_SLOT,
    CONF_SLOTS,
    CONF_TEMPERATURE,
    CONF_TIMEOUT,
    SUBENTRY_AI_TASK,
    SUBENTRY_CONVERSATION,
)
from tests.integration.conftest import Server
from tests.integration.helpers import agent, issues, settle, setup_entry, stack_entry
from voice_stack_dev.fakes.integration import FAKE_KEY, LOADING_BODY, FakeLlama
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import NginxProxy, start_proxy

STRINGS = json.loads((Path(voice_stack.__file__).parent / "translations" / "en.json").read_text())[
    "config_subentries"
]


def _options(**over: Any) -> dict[str, Any]:
    return {
        CONF_MODEL: "tiny-text.gguf",
        CONF_SLOTS: ["1"],
        CONF_TEMPERATURE: 0.2,
        CONF_MAX_TOKENS: 64.0,
        CONF_TIMEOUT: 30.0,
        CONF_REASONING: "disabled",
        CONF_PROMPT_LAYOUT: "cache_stable",
        CONF_SAVE_SLOT: False,
        **over,
    }


def _suggested(result: Any) -> dict[str, Any]:
    schema = result["data_schema"].schema
    return {
        str(k): k.description["suggested_value"] for k in schema if getattr(k, "description", None)
    }


def _slot_choices(result: Any) -> list[str]:
    field = next(v for k, v in result["data_schema"].schema.items() if str(k) == CONF_SLOTS)
    return [o["value"] for o in field.config["options"]]


@pytest.fixture
def server(llama_text: LlamaServer) -> Server:
    return Server.of(llama_text)


async def test_add_and_change_agents(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """Straight to llama-server (no proxy, so nothing is reserved): a new agent is offered the
    slots no other agent uses, the lowest suggested, and the served model; AI Task has no
    prompt; reconfigure shows the current values and the agent's own slots."""
    entry = init_integration
    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_CONVERSATION), context={"source": SOURCE_USER}
    )
    assert result["type"] is FlowResultType.FORM
    suggested = _suggested(result)
    assert suggested[CONF_SLOTS] == ["1"]
    assert suggested[CONF_MODEL].endswith("tiny-text.gguf")
    assert _slot_choices(result) == ["1", "2", "3"]  # slot 0 is the first agent's
    result = await hass.config_entries.subentries.async_configure(
        result["flow_id"],
        {
            CONF_NAME: "Kitchen",
            **_options(
                **{
                    CONF_SLOTS: ["2", "1"],
                    CONF_PROMPT: "Be brief.",
                    CONF_LLM_HASS_API: ["assist"],
                    CONF_MAX_HISTORY: 4.0,
                }
            ),
        },
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    kitchen = next(s for s in entry.subentries.values() if s.title == "Kitchen")
    assert kitchen.data[CONF_SLOTS] == [1, 2]
    assert isinstance(kitchen.data[CONF_MAX_TOKENS], int)
    await hass.async_block_till_done()

    result = await hass.config_entries.subentries.async_init(
        (entry.entry_id, SUBENTRY_AI_TASK), context={"source": SOURCE_USER}
    )
    assert CONF_PROMPT not in {str(k) for k in result["data_schema"].schema}
    assert _suggested(result)[CONF_SLOTS] == ["3"]
    assert _slot_choices(result) == ["3"]
    result = await hass.config_entries.subentries.async_configure(
        result["flow_id"], {CONF_NAME: "Tasks", **_options(**{CONF_SLOTS: ["3"]})}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    await hass.async_block_till_done()

    result = await entry.start_subentry_reconfigure_flow(hass, kitchen.subentry_id)
    assert result["type"] is FlowResultType.FORM
    assert _suggested(result)[CONF_SLOTS] == ["1", "2"]
    assert _slot_choices(result) == ["1", "2"]  # its own; 0 and 3 are the others'
    result = await hass.config_entries.subentries.async_configure(
        result["flow_id"],
        _options(
            **{
                CONF_SLOTS: ["2"],
                CONF_PROMPT: "Be brief.",
                CONF_LLM_HASS_API: [],
                CONF_MAX_HISTORY: 4.0,
            }
        ),
    )
    assert result["type"] is FlowResultType.ABORT
    assert result["reason"] == "reconfigure_successful"
    assert entry.subentries[kitchen.subentry_id].data[CONF_SLOTS] == [2]


async def test_reconfigure_shows_the_served_model(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """An agent that names no model shows the model the server serves, not an empty field."""
    sub = next(iter(init_integration.subentries.values()))
    assert not sub.data.get(CONF_MODEL)
    result = await init_integration.start_subentry_reconfigure_flow(hass, sub.subentry_id)
    assert _suggested(result)[CONF_MODEL].endswith("tiny-text.gguf")


class TestFakeServer:
    @pytest.fixture
    def server(self, fake: FakeLlama) -> Server:
        return Server(fake.url, FAKE_KEY)

    async def test_aborts_when_the_server_is_gone_or_the_entry_not_loaded(
        self, hass: HomeAssistant, fake: FakeLlama, mock_config_entry: MockConfigEntry
    ) -> None:
        """Server gone after loading: cannot_connect. Not loaded: abort."""
        await setup_entry(hass, mock_config_entry)
        await fake.stop()
        result = await hass.config_entries.subentries.async_init(
            (mock_config_entry.entry_id, SUBENTRY_CONVERSATION), context={"source": SOURCE_USER}
        )
        assert result["reason"] == "cannot_connect"
        await hass.config_entries.async_unload(mock_config_entry.entry_id)
        result = await hass.config_entries.subentries.async_init(
            (mock_config_entry.entry_id, SUBENTRY_CONVERSATION), context={"source": SOURCE_USER}
        )
        assert result["reason"] == "entry_not_loaded"

    async def test_aborts_with_the_reason_while_the_model_loads(
        self, hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
    ) -> None:
        """llama-server restarted and loads its model again (its exact 503 body): the flow says
        so instead of "Failed to connect"."""
        fake.overrides["/v1/models"] = (503, LOADING_BODY)
        result = await hass.config_entries.subentries.async_init(
            (init_integration.entry_id, SUBENTRY_AI_TASK), context={"source": SOURCE_USER}
        )
        assert (result["type"], result["reason"]) == (FlowResultType.ABORT, "model_loading")


def _error_text(result: Any, kind: str = SUBENTRY_AI_TASK) -> str:
    """The form's base error as the user reads it (en.json filled in)."""
    text = STRINGS[kind]["error"][result["errors"]["base"]]
    return str(text).format(**result["description_placeholders"])


async def _add(hass: HomeAssistant, entry: MockConfigEntry, kind: str = SUBENTRY_AI_TASK) -> Any:
    return await hass.config_entries.subentries.async_init(
        (entry.entry_id, kind), context={"source": SOURCE_USER}
    )


class TestThroughTheRealProxy:
    """The real nginx auth proxy in front of a real llama-server, reserving slot 0 as compose
    does by default (LLM_RESERVED_SLOTS=0); the first agent has it, as the user step makes it."""

    @pytest.fixture
    def proxies(self, llama_text: LlamaServer, tmp_path: Path) -> Iterator[list[NginxProxy]]:
        """The running proxy is the last one (a test may restart it with other settings)."""
        running = [
            start_proxy(llama_text.url, "proxy-Key-1", llama_text.api_key or "", log_dir=tmp_path)
        ]
        yield running
        running[-1].stop()

    @pytest.fixture
    def server(self, proxies: list[NginxProxy]) -> Server:
        return Server(proxies[-1].url, proxies[-1].agent_key)

    @pytest.fixture
    def agents(self) -> list[dict[str, Any]]:
        return [agent(0, title="Assistant")]

    @staticmethod
    async def _reserve(
        hass: HomeAssistant, proxies: list[NginxProxy], llama: LlamaServer, *slots: int
    ) -> None:
        """What the user does on the GPU host: LLM_RESERVED_SLOTS, then ./stack up -d (the
        proxy restarts on its port with the new reservation)."""
        old = proxies[-1]
        await hass.async_add_executor_job(old.stop)
        proxies.append(
            await hass.async_add_executor_job(
                lambda: start_proxy(
                    llama.url,
                    old.proxy_key,
                    llama.api_key or "",
                    reserved_slots=slots,
                    port=old.port,
                    log_dir=old.log_path.parent.parent,
                )
            )
        )

    async def test_a_second_agent_gets_a_reserved_slot_or_says_what_to_change(
        self,
        hass: HomeAssistant,
        init_integration: MockConfigEntry,
        proxies: list[NginxProxy],
        llama_text: LlamaServer,
    ) -> None:
        """Every reserved slot taken: the form offers no slot (none is suggested behind the
        user's back) and says what to set on the GPU host. Once the proxy reserves slot 1, the
        same form offers slot 1 alone; the first agent's slot cannot be picked; no repair."""
        entry = init_integration
        result = await _add(hass, entry)
        assert result["type"] is FlowResultType.FORM
        assert result["errors"] == {"base": "no_reserved_slot_free"}
        assert (_slot_choices(result), _suggested(result)[CONF_SLOTS]) == ([], [])
        text = _error_text(result)
        assert "(0) is used by another agent (Assistant: 0)" in text
        assert "LLM_RESERVED_SLOTS=0,1 in compose/.env" in text
        assert "./stack up -d" in text

        await self._reserve(hass, proxies, llama_text, 0, 1)
        tasks = {CONF_NAME: "Tasks", **_options(**{CONF_SLOTS: []})}
        result = await hass.config_entries.subentries.async_configure(result["flow_id"], tasks)
        assert (result["type"], result["errors"]) == (
            FlowResultType.FORM,
            {CONF_SLOTS: "no_slot_picked"},
        )
        assert (_slot_choices(result), _suggested(result)[CONF_SLOTS]) == (["1"], ["1"])
        assert _suggested(result)[CONF_TEMPERATURE] == 0.2  # what the user typed is kept
        with pytest.raises(InvalidData):  # sharing the first agent's slot is not offered
            await hass.config_entries.subentries.async_configure(
                result["flow_id"], {**tasks, CONF_SLOTS: ["0"]}
            )
        result = await hass.config_entries.subentries.async_configure(
            result["flow_id"], {**tasks, CONF_SLOTS: ["1"]}
        )
        assert result["type"] is FlowResultType.CREATE_ENTRY
        await settle(hass)
        assert issues(hass, entry) == set()

        first = next(s for s in entry.subentries.values() if s.title == "Assistant")
        result = await entry.start_subentry_reconfigure_flow(hass, first.subentry_id)
        assert (_slot_choices(result), result["errors"]) == (["0"], {})

    async def test_a_slot_taken_meanwhile_is_refused(
        self,
        hass: HomeAssistant,
        init_integration: MockConfigEntry,
        proxies: list[NginxProxy],
        llama_text: LlamaServer,
    ) -> None:
        """Two forms open at once offer the same free slot: the second to be sent is refused."""
        await self._reserve(hass, proxies, llama_text, 0, 1)
        entry = init_integration
        first, second = await _add(hass, entry), await _add(hass, entry, SUBENTRY_CONVERSATION)
        assert _suggested(first)[CONF_SLOTS] == _suggested(second)[CONF_SLOTS] == ["1"]
        done = await hass.config_entries.subentries.async_configure(
            first["flow_id"], {CONF_NAME: "Tasks", **_options()}
        )
        assert done["type"] is FlowResultType.CREATE_ENTRY
        await settle(hass)
        refused = await hass.config_entries.subentries.async_configure(
            second["flow_id"], {CONF_NAME: "Kitchen", **_options(**{CONF_MAX_HISTORY: 4.0})}
        )
        assert refused["type"] is FlowResultType.FORM
        assert refused["errors"] == {CONF_SLOTS: "slot_taken", "base": "no_reserved_slot_free"}
        assert refused["description_placeholders"]["taken"] == "Assistant: 0, Tasks: 1"
        assert len(entry.subentries) == 2


async def test_every_slot_taken_without_a_proxy(
    hass: HomeAssistant, llama_text: LlamaServer
) -> None:
    """Straight to llama-server with every slot an agent's: the form says to add slots."""
    subs = [agent(n, title=f"A{n}") for n in range(4)]
    entry = stack_entry(hass, llama_text.url, llama_text.api_key or "", *subs)
    await setup_entry(hass, entry)
    result = await _add(hass, entry, SUBENTRY_CONVERSATION)
    assert result["errors"] == {"base": "no_free_slot"}
    text = _error_text(result, SUBENTRY_CONVERSATION)
    assert "set LLM_PARALLEL=5 and add 4 to LLM_RESERVED_SLOTS" in text
    assert "-np 5 " in text
