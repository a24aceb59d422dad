"""AI Task, slot save/restore and diagnostics against a real llama-server."""

from __future__ import annotations

from typing import Any

import probatio
import pytest
from homeassistant.components import ai_task
from homeassistant.core import Context, HomeAssistant
from homeassistant.exceptions import HomeAssistantError
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.components.diagnostics import (
    get_diagnostics_for_config_entry,
)
from syrupy.assertion import SnapshotAssertion
from syrupy.filters import props

from custom_components.voice_stack.const import CONF_SAVE_SLOT, SUBENTRY_AI_TASK
from tests.integration.agent_helpers import agent, make_entry, setup_entry, slot_state
from tests.integration.fake_llama import FakeLlama, chunk, sse, stream_bytes
from voice_stack_dev.llama import LlamaServer

pytestmark = pytest.mark.usefixtures("socket_enabled")


async def _setup(hass: HomeAssistant, entry: MockConfigEntry) -> None:
    await setup_entry(hass, entry)
    warmer = entry.runtime_data.warmer
    assert warmer is not None
    await warmer.async_check()


def _task_entity(hass: HomeAssistant) -> str:
    return next(s.entity_id for s in hass.states.async_all("ai_task"))


async def test_ai_task_generate_text(hass: HomeAssistant, llama_text: LlamaServer) -> None:
    """Generate data on the AI Task's own slot."""
    entry = make_entry(llama_text.url, llama_text.api_key, [agent(3, kind=SUBENTRY_AI_TASK)])
    await _setup(hass, entry)
    result = await ai_task.async_generate_data(
        hass, task_name="greet", entity_id=_task_entity(hass), instructions="Say hello"
    )
    assert result.data == "Hello from the tiny test model."
    assert entry.runtime_data.timings[next(iter(entry.subentries))].slot == 3
    assert (await hass.async_add_executor_job(slot_state, llama_text, 3))["n_prompt_tokens"] > 0


async def test_ai_task_structured(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A structure becomes a json_schema response_format; the JSON reply is parsed (fake server)."""
    replies = [b'{"answer": "yes"}', b"not json"]

    async def handler(request: Any) -> Any:
        text = replies.pop(0).decode()
        return await stream_bytes(
            request, sse(chunk({"content": text}), chunk({}, "stop"), "data: [DONE]\n\n")
        )

    fake.chat = handler
    entry = make_entry(fake.url, "k", [agent(0, kind=SUBENTRY_AI_TASK)])
    await _setup(hass, entry)
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
            hass,
            task_name="q",
            entity_id=_task_entity(hass),
            instructions="?",
            structure=structure,
        )


async def test_slot_save_and_restore(
    hass: HomeAssistant, llama_factory: Any, tmp_path: Any
) -> None:
    """With --slot-save-path the warm slot is saved, and restored after a restart."""
    server = llama_factory(
        "tiny-text", ctx_per_slot=1024, extra_args=["--slot-save-path", str(tmp_path)]
    )
    entry = make_entry(server.url, server.api_key, [agent(1, **{CONF_SAVE_SLOT: True})])
    await _setup(hass, entry)
    warmer = entry.runtime_data.warmer
    assert warmer is not None
    assert warmer.save_supported is True
    saved = list(tmp_path.glob("voice_stack_*.bin"))
    assert len(saved) == 1
    await hass.async_add_executor_job(server.restart)
    await warmer.async_check()
    slot = await hass.async_add_executor_job(slot_state, server, 1)
    assert slot["n_prompt_tokens"] > 0
    assert next(iter(entry.subentries)) in warmer.warmed


async def test_slot_save_unsupported(hass: HomeAssistant, llama_text: LlamaServer) -> None:
    """Without --slot-save-path the option is ignored after one 501."""
    entry = make_entry(llama_text.url, llama_text.api_key, [agent(2, **{CONF_SAVE_SLOT: True})])
    await _setup(hass, entry)
    assert entry.runtime_data.warmer is not None
    assert entry.runtime_data.warmer.save_supported is False


async def test_diagnostics(
    hass: HomeAssistant, llama_text: LlamaServer, hass_client: Any, snapshot: SnapshotAssertion
) -> None:
    """Diagnostics: no key, no prompt; server props, slots and last timings."""
    entry = make_entry(llama_text.url, llama_text.api_key, [agent(0, title="Voice")])
    await _setup(hass, entry)
    agent_id = next(
        s.entity_id for s in hass.states.async_all("conversation") if "voice" in s.entity_id
    )
    from homeassistant.components import conversation

    await conversation.async_converse(hass, "hi", None, Context(), agent_id=agent_id)
    diag = await get_diagnostics_for_config_entry(hass, hass_client, entry)
    text = str(diag)
    assert llama_text.api_key not in text
    assert diag["entry"]["data"] == {"url": "**REDACTED**", "api_key": "**REDACTED**"}
    assert diag["server"]["props"]["total_slots"] == 4
    (timings,) = diag["timings"].values()
    assert timings["slot"] == 0
    assert timings["generated_tokens"] > 0
    volatile = props(
        "received_at",
        "prompt_per_second",
        "generation_per_second",
        "time_to_first_token_ms",
        "model_path",
        "model_alias",
        "prefix_tokens",
        "cached_tokens",
        "prompt_tokens",
        "cache_reuse",
        "entry_id",
        "subentry_id",
        "coordinators",
        "health",
    )
    agents = {v["title"]: v for v in diag["agents"].values()}
    assert {k: v for k, v in diag.items() if k in ("entry", "server")} | {
        "agents": agents,
        "timings": [timings],
    } == snapshot(exclude=volatile)


async def test_ai_task_empty_stream(hass: HomeAssistant, fake: FakeLlama) -> None:
    """A stream that ends without any reply is a clear, translated error (fake server)."""

    async def handler(request: Any) -> Any:
        return await stream_bytes(request, sse(chunk({}, "stop"), "data: [DONE]\n\n"))

    fake.chat = handler
    entry = make_entry(fake.url, "k", [agent(0, kind=SUBENTRY_AI_TASK)])
    await _setup(hass, entry)
    with pytest.raises(HomeAssistantError) as err:
        await ai_task.async_generate_data(
            hass, task_name="q", entity_id=_task_entity(hass), instructions="?"
        )
    assert err.value.translation_key == "no_reply"
