"""The unified-KV probe on a real llama-server: found, reported, and run once per setup."""

from __future__ import annotations

from typing import Any

import pytest
from homeassistant.core import HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack import kv_probe
from custom_components.voice_stack.chat import ChatClient
from tests.integration.conftest import RealLlama, Server
from tests.integration.helpers import agent, issue, issues, poll, setup_entry, slot_state
from voice_stack_dev.llama import LlamaServer


def _count_probes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []
    original = kv_probe.probe_unified_kv

    async def counting(chat: ChatClient, slot: int, other: int) -> bool | None:
        calls.append((slot, other))
        return await original(chat, slot, other)

    monkeypatch.setattr("custom_components.voice_stack.kv_probe.probe_unified_kv", counting)
    return calls


class TestUnified:
    @pytest.fixture
    def server(self, llama_factory: Any) -> Server:
        llama = llama_factory("tiny-text", ctx_per_slot=1024, extra_args=["--kv-unified"])
        return Server.of(llama)

    async def test_unified_cache_is_found_and_remembered(
        self,
        hass: HomeAssistant,
        mock_config_entry: MockConfigEntry,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """--kv-unified clears idle slots: a repair says how to fix it, and a reload does not
        probe again."""
        probes = _count_probes(monkeypatch)
        await setup_entry(hass, mock_config_entry)
        assert issues(hass, mock_config_entry) == {"unified_kv_cache"}
        assert issue(hass, mock_config_entry, "unified_kv_cache").translation_placeholders == {
            "slots": "4"
        }
        assert await hass.config_entries.async_reload(mock_config_entry.entry_id)
        await poll(hass, mock_config_entry)
        assert issues(hass, mock_config_entry) == {"unified_kv_cache"}
        assert len(probes) == 1


class TestSeparate(RealLlama):
    @pytest.fixture
    def agents(self) -> list[dict[str, Any]]:
        return [agent(0), agent(2)]

    async def test_probe_uses_agent_slots_once_per_setup(
        self,
        hass: HomeAssistant,
        mock_config_entry: MockConfigEntry,
        llama: LlamaServer,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """The probe runs on the agents' own slots; neither a reload nor a restart of the same
        server setup runs it again."""
        probes = _count_probes(monkeypatch)
        await setup_entry(hass, mock_config_entry)
        assert issues(hass, mock_config_entry) == set()
        assert probes == [(0, 2)]
        assert "id_task" not in await hass.async_add_executor_job(slot_state, llama, 1)
        assert mock_config_entry.runtime_data.repairs.findings.unified_kv is False

        assert await hass.config_entries.async_reload(mock_config_entry.entry_id)
        await poll(hass, mock_config_entry)
        await hass.async_add_executor_job(llama.restart)
        await poll(hass, mock_config_entry)
        assert probes == [(0, 2)], "same model, build and slots: the verdict is known"
