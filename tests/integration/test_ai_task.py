"""AI Task: text on its own slot (real llama-server), JSON with a schema, faults (fake)."""

from __future__ import annotations

from typing import Any

import probatio
import pytest
from homeassistant.components import ai_task
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import SUBENTRY_AI_TASK
from tests.integration.conftest import Server
from tests.integration.helpers import agent, slot_state, subentry_id
from voice_stack_dev.fakes.integration import FakeLlama, chunk, sse, stream_bytes, streaming
from voice_stack_dev.llama import LlamaServer


@pytest.fixture
def agents() -> list[dict[str, Any]]:
    return [agent(3, kind=SUBENTRY_AI_TASK)]


def _task_entity(hass: HomeAssistant) -> str:
    return next(s.entity_id for s in hass.states.async_all("ai_task"))


class TestRealServer:
    @pytest.fixture
    def server(self, llama_text: LlamaServer) -> Server:
        return Server.of(llama_text)

    async def test_generate_text_on_its_slot(
        self, hass: HomeAssistant, init_integration: MockConfigEntry, llama_text: LlamaServer
    ) -> None:
        result = await ai_task.async_generate_data(
            hass, task_name="greet", entity_id=_task_entity(hass), instructions="Say hello"
        )
        assert result.data == "Hello from the tiny test model."
        assert init_integration.runtime_data.timings[subentry_id(init_integration)].slot == 3
        assert (await hass.async_add_executor_job(slot_state, llama_text, 3))["n_prompt_tokens"] > 0


async def test_structured_output(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """A structure becomes a json_schema response_format; the JSON reply is parsed; a reply
    that is not JSON is a clear error."""
    replies = [b'{"answer": "yes"}', b"not json"]

    async def handler(request: Any) -> Any:
        text = replies.pop(0).decode()
        return await stream_bytes(request, sse(chunk({"content": text}), chunk({}, "stop")))

    fake.chat = handler
    structure = probatio.Schema({probatio.Required("answer"): str})
    result = await ai_task.async_generate_data(
        hass, task_name="q", entity_id=_task_entity(hass), instructions="?", structure=structure
    )
    assert result.data == {"answer": "yes"}
    sent = fake.requests[-1]["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["schema"]["required"] == ["answer"]
    with pytest.raises(HomeAssistantError, match="valid JSON"):
        await ai_task.async_generate_data(
            hass, task_name="q", entity_id=_task_entity(hass), instructions="?", structure=structure
        )


async def test_empty_reply(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """A stream that ends without any reply is a clear, translated error."""
    fake.chat = streaming(sse(chunk({}, "stop")))
    with pytest.raises(HomeAssistantError) as err:
        await ai_task.async_generate_data(
            hass, task_name="q", entity_id=_task_entity(hass), instructions="?"
        )
    assert err.value.translation_key == "no_reply"
