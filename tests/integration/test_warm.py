"""Priming, saving and restoring a slot on a real llama-server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from homeassistant.components import conversation
from homeassistant.core import Context, HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import CONF_SAVE_SLOT
from custom_components.voice_stack.warm import slot_file
from tests.integration.conftest import Server
from tests.integration.helpers import agent, agent_entity, poll, slot_state
from voice_stack_dev.fakes.integration import FAKE_KEY, FakeLlama
from voice_stack_dev.llama import LlamaServer


@pytest.fixture
def llama(llama_factory: Any, tmp_path: Path) -> LlamaServer:
    """A server that can save slots."""
    return llama_factory(
        "tiny-text", ctx_per_slot=1024, extra_args=["--slot-save-path", str(tmp_path)]
    )


@pytest.fixture
def server(llama: LlamaServer) -> Server:
    return Server.of(llama)


@pytest.fixture
def agents() -> list[dict[str, Any]]:
    return [agent(1, **{CONF_SAVE_SLOT: True})]


async def test_saved_after_priming_and_restored_after_a_restart(
    hass: HomeAssistant, init_integration: MockConfigEntry, llama: LlamaServer, tmp_path: Path
) -> None:
    """With --slot-save-path the primed slot is saved, and restored first after a restart."""
    data = init_integration.runtime_data
    assert data.primer.save_supported is True
    agent_obj = next(iter(data.agents.values()))
    assert (tmp_path / slot_file(agent_obj, 1)).is_file()
    assert data.repairs.findings.prefix_tokens[agent_obj.id] > 0

    restores: list[int] = []
    original = data.client.slot_action

    async def spy(slot: int, action: str, filename: str | None = None) -> dict[str, Any]:
        reply = await original(slot, action, filename)
        if action == "restore":
            restores.append(int(reply["n_restored"]))
        return reply

    data.client.slot_action = spy  # type: ignore[method-assign]
    await hass.async_add_executor_job(llama.restart)
    await poll(hass, init_integration)
    assert len(restores) == 1
    assert restores[0] > 0, "the saved slot was loaded back"
    result = await conversation.async_converse(
        hass, "hello", None, Context(), agent_id=agent_entity(hass, init_integration)
    )
    assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
    assert data.timings[agent_obj.id].cached_tokens > 0


class TestWithoutSavePath:
    @pytest.fixture
    def server(self, llama_text: LlamaServer) -> Server:
        return Server.of(llama_text)

    async def test_saving_is_skipped(
        self, hass: HomeAssistant, init_integration: MockConfigEntry, llama_text: LlamaServer
    ) -> None:
        """Without --slot-save-path the option is dropped after one 501; the slot is primed."""
        assert init_integration.runtime_data.primer.save_supported is False
        assert (await hass.async_add_executor_job(slot_state, llama_text, 1))["n_prompt_tokens"] > 0


class TestSlotFilesUnreachable:
    @pytest.fixture
    def server(self, fake: FakeLlama) -> Server:
        fake.overrides["/slots/1"] = (503, "{}")  # the proxy: llama-server cannot be reached
        return Server(fake.url, FAKE_KEY)

    async def test_priming_goes_on_and_saving_is_tried_again(
        self, init_integration: MockConfigEntry, fake: FakeLlama
    ) -> None:
        """A failed restore or save is not a verdict on the server: the next warm-up retries."""
        assert fake.warm_requests[-1]["id_slot"] == 1  # primed after the failed restore
        assert init_integration.runtime_data.primer.save_supported is None
