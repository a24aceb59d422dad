"""The gateway poller: its health, and the real speech requests' times from /metrics."""

from __future__ import annotations

import pytest
from homeassistant.core import HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry

from tests.integration.fakes import FakeGateway
from tests.integration.helpers import poll


@pytest.fixture
def gateway_url(fake_gateway: FakeGateway) -> str:
    return fake_gateway.url


async def test_speech_times_follow_the_gateway_s_own_requests(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake_gateway: FakeGateway
) -> None:
    """The mean over the requests since the last poll; the last figure while idle; none before
    the first request; a gateway restart starts over."""
    gateway = init_integration.runtime_data.coordinators.gateway
    assert gateway is not None
    assert (gateway.data.stt_ms, gateway.data.tts_ms) == (None, None)
    fake_gateway.latency = {"stt": (0.9, 3), "tts": (0.1, 1), "tts_stream": (0.1, 1)}
    await poll(hass, init_integration)
    assert gateway.data.stt_ms == pytest.approx(300.0)
    assert gateway.data.tts_ms == pytest.approx(100.0), "plain and streamed synthesis together"
    fake_gateway.latency = {"stt": (1.5, 4), "tts": (0.1, 1), "tts_stream": (0.1, 1)}
    await poll(hass, init_integration)
    assert gateway.data.stt_ms == pytest.approx(600.0)
    assert gateway.data.tts_ms == pytest.approx(100.0), "idle: the last figure stays"
    fake_gateway.latency = {"stt": (0.05, 1), "tts": (0.0, 0)}
    await poll(hass, init_integration)
    assert gateway.data.stt_ms == pytest.approx(50.0)


async def test_broken_replies(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake_gateway: FakeGateway
) -> None:
    """A 500, then a body that is not the gateway's JSON: the poll fails with a clear reason."""
    gateway = init_integration.runtime_data.coordinators.gateway
    assert gateway is not None
    fake_gateway.health_status = 500
    await poll(hass, init_integration)
    assert gateway.last_exception.translation_key == "probe_status"  # type: ignore[union-attr]
    fake_gateway.health_status = 200
    fake_gateway.health = {"no": "status"}
    await poll(hass, init_integration)
    assert gateway.last_exception.translation_key == "probe_malformed"  # type: ignore[union-attr]
