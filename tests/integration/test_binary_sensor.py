"""Connectivity of every service and the proxy's key check: a snapshot of the states (fakes),
the sensors' views of a loading or broken service, and the real stack with services stopped."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from homeassistant.components.recorder import Recorder, history
from homeassistant.const import STATE_OFF, STATE_ON, STATE_UNAVAILABLE, STATE_UNKNOWN, Platform
from homeassistant.core import HomeAssistant
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.translation import async_get_translations
from homeassistant.util import dt as dt_util
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.components.recorder.common import (
    async_wait_recording_done,
)
from syrupy.assertion import SnapshotAssertion

from custom_components.voice_stack.const import DOMAIN
from tests.integration.helpers import entities_snapshot, poll, setup_entry, stack_entry
from tests.integration.live_stack import LiveStack, wait_gateway
from voice_stack_dev.fakes.integration import FakeGateway, FakeLlama

LLM = "binary_sensor.voice_stack_llm_server_connectivity"
PROXY = "binary_sensor.voice_stack_auth_proxy_connectivity"
OPEN = "binary_sensor.voice_stack_auth_proxy_accepts_requests_without_key"
GATEWAY = "binary_sensor.voice_stack_gateway_connectivity"
ASR = "binary_sensor.voice_stack_speech_to_text_connectivity"
TTS = "binary_sensor.voice_stack_text_to_speech_connectivity"
STATUS = "sensor.voice_stack_llm_server_status"


def _state(hass: HomeAssistant, entity_id: str) -> str:
    state = hass.states.get(entity_id)
    assert state is not None, f"{entity_id} does not exist"
    return state.state


@pytest.fixture
def gateway_url(fake_gateway: FakeGateway) -> str:
    return fake_gateway.url


class TestFakes:
    @pytest.fixture
    def platforms(self) -> list[Platform]:
        return [Platform.BINARY_SENSOR]

    async def test_every_binary_sensor(
        self, hass: HomeAssistant, init_integration: MockConfigEntry, snapshot: SnapshotAssertion
    ) -> None:
        assert entities_snapshot(hass, init_integration, "binary_sensor") == snapshot

    async def test_the_key_check_reads_no_or_yes(
        self, hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
    ) -> None:
        """The state reads "No" or "Yes", not the problem class's "OK" or "Problem": it
        answers the entity's name, "Accepts requests without key" (the frontend takes an
        entity's own state translation first)."""
        strings = await async_get_translations(hass, "en", "entity", {DOMAIN})
        shown = f"component.{DOMAIN}.entity.binary_sensor.accepts_requests_without_key.state"
        assert (_state(hass, OPEN), strings[f"{shown}.off"]) == (STATE_OFF, "No")
        fake.key = None  # a proxy that lets any request through
        await poll(hass, init_integration)
        assert (_state(hass, OPEN), strings[f"{shown}.on"]) == (STATE_ON, "Yes")

    async def test_loading_server_and_unprobed_backend(
        self,
        hass: HomeAssistant,
        init_integration: MockConfigEntry,
        fake: FakeLlama,
        fake_gateway: FakeGateway,
    ) -> None:
        """Loading is connected (with loading=true); a backend the gateway has not probed is
        unknown, one it does not report is unavailable."""
        fake.overrides["/health"] = (503, '{"error": {"type": "unavailable_error"}}')
        fake_gateway.health["backends"] = {"asr": {"status": "unknown", "models": []}}
        await poll(hass, init_integration)
        llm = hass.states.get(LLM)
        assert llm is not None
        assert (llm.state, llm.attributes["loading"]) == (STATE_ON, True)
        assert (_state(hass, ASR), _state(hass, TTS)) == (STATE_UNKNOWN, STATE_UNAVAILABLE)


async def _rows(hass: HomeAssistant, entity_ids: list[str], since: datetime) -> dict[str, int]:
    """The state rows the recorder wrote for each entity since `since`."""
    await async_wait_recording_done(hass)
    found: dict[str, list[Any]] = await hass.async_add_executor_job(
        lambda: history.get_significant_states(
            hass,
            since,
            entity_ids=entity_ids,
            include_start_time_state=False,
            significant_changes_only=False,  # attribute changes too: every row there is
        )
    )
    return {entity_id: len(found.get(entity_id, [])) for entity_id in entity_ids}


class TestRecorder:
    """Against Home Assistant's real recorder (SQLite in memory)."""

    @pytest.fixture
    def mock_recorder_before_hass(self, async_setup_recorder_instance: Any) -> None:
        """The recorder's database is prepared before hass starts (phcc's order)."""

    async def test_the_recorder_writes_a_row_only_when_a_value_changed(
        self,
        recorder_mock: Recorder,
        hass: HomeAssistant,
        init_integration: MockConfigEntry,
        fake_gateway: FakeGateway,
    ) -> None:
        """The gateway stamps every probe (last_success, and last_error_at while a backend is down):
        polls that bring only new stamps write no state row for any entity of the entry; a backend
        going down writes one row for its sensor."""
        registry = er.async_get(hass)
        ours = [
            e.entity_id
            for e in er.async_entries_for_config_entry(registry, init_integration.entry_id)
            if hass.states.get(e.entity_id) is not None
        ]
        assert ASR in ours
        await poll(hass, init_integration)  # the rates of the first poll window (a real change)
        since = dt_util.utcnow()
        await async_wait_recording_done(hass)
        backends = fake_gateway.health["backends"]
        stamp = datetime(2026, 12, 1, tzinfo=UTC)
        for n in range(1, 5):
            for backend in backends.values():
                backend["last_success"] = (stamp + timedelta(seconds=30 * n)).isoformat()
            await poll(hass, init_integration)
        assert await _rows(hass, ours, since) == dict.fromkeys(ours, 0), (
            "stamps alone are no change"
        )

        backends["asr"].update(status="down", last_error="ASR refused the connection")
        for n in range(1, 5):
            backends["asr"]["last_error_at"] = (stamp + timedelta(seconds=200 + 30 * n)).isoformat()
            await poll(hass, init_integration)
        assert _state(hass, ASR) == STATE_OFF
        assert await _rows(hass, ours, since) == {e: int(e == ASR) for e in ours}


async def test_health_flips_when_services_stop_and_recover(
    hass: HomeAssistant, live_stack: LiveStack, caplog: pytest.LogCaptureFixture
) -> None:
    """Stop each service of the real stack: its entity flips, dependants go unavailable, one log
    line each way; every service is running again at the end."""
    entry = stack_entry(
        hass,
        live_stack.proxy.url,
        live_stack.agent_key,
        options={"gateway_url": live_stack.gateway.url},
    )
    await setup_entry(hass, entry)
    caplog.set_level(logging.INFO)
    for entity_id in (LLM, PROXY, GATEWAY, ASR, TTS):
        assert _state(hass, entity_id) == STATE_ON, entity_id
    assert _state(hass, OPEN) == STATE_OFF

    await hass.async_add_executor_job(live_stack.llama.stop)
    await poll(hass, entry)
    await poll(hass, entry)
    assert (_state(hass, LLM), _state(hass, STATUS), _state(hass, PROXY)) == (
        STATE_OFF,
        "unreachable",
        STATE_ON,  # nginx itself still answers
    )
    assert caplog.text.count("Error fetching voice_stack llm_server data") == 1
    assert "/health answered with HTTP 502" in caplog.text  # nginx: upstream gone
    await hass.async_add_executor_job(live_stack.llama.start)
    await poll(hass, entry)
    assert (_state(hass, LLM), _state(hass, STATUS)) == (STATE_ON, "ready")
    assert caplog.text.count("Fetching voice_stack llm_server data recovered") == 1

    await hass.async_add_executor_job(live_stack.speech.stop)
    await wait_gateway(
        hass, live_stack.gateway.url, lambda h: h["backends"]["asr"]["status"] == "down"
    )
    await poll(hass, entry)
    assert (_state(hass, ASR), _state(hass, TTS), _state(hass, GATEWAY)) == (
        STATE_OFF,
        STATE_OFF,
        STATE_ON,
    )
    asr = hass.states.get(ASR)
    assert asr is not None
    assert "ASR" in str(asr.attributes["last_error"])
    await hass.async_add_executor_job(live_stack.gateway.stop)
    await poll(hass, entry)
    assert (_state(hass, GATEWAY), _state(hass, ASR)) == (STATE_OFF, STATE_UNAVAILABLE)
    await hass.async_add_executor_job(live_stack.speech.start)
    await hass.async_add_executor_job(live_stack.gateway.start)
    await wait_gateway(
        hass, live_stack.gateway.url, lambda h: h["backends"]["tts"]["status"] == "ok"
    )
    await poll(hass, entry)
    assert (_state(hass, ASR), _state(hass, TTS), _state(hass, GATEWAY)) == (
        STATE_ON,
        STATE_ON,
        STATE_ON,
    )

    await hass.async_add_executor_job(live_stack.proxy.stop)
    await poll(hass, entry)
    assert (_state(hass, PROXY), _state(hass, LLM), _state(hass, OPEN)) == (
        STATE_OFF,
        STATE_OFF,
        STATE_UNAVAILABLE,
    )
    await hass.async_add_executor_job(live_stack.proxy.start)
    await poll(hass, entry)
    assert (_state(hass, PROXY), _state(hass, LLM)) == (STATE_ON, STATE_ON)
