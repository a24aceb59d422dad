"""The flows' checks (validation.py): a URL as typed, the server behind it, the first agent's
slot, the gateway URL."""

from __future__ import annotations

import pytest
from homeassistant.core import HomeAssistant

from custom_components.voice_stack.const import CONF_GATEWAY_URL, CONF_URL
from custom_components.voice_stack.validation import (
    first_agent_slots,
    normalize_gateway_url,
    url_error,
    validate_gateway,
    validate_server,
)
from voice_stack_dev.fakes.integration import FAKE_KEY, FakeGateway, FakeLlama


@pytest.mark.parametrize(
    ("url", "key", "error"),
    [
        ("http://gpu-box:11434", "k", None),
        ("http://gpu-box:port", "k", "invalid_url"),
        ("ftp://gpu-box", "", "invalid_url"),
        ("http://", "", "invalid_url"),
        ("http://user:pass@gpu-box", "k", "url_has_credentials"),
        ("http://user:pass@gpu-box", "", None),
    ],
)
def test_url_error(url: str, key: str, error: str | None) -> None:
    assert url_error(url, key) == error


def test_normalize_gateway_url() -> None:
    assert normalize_gateway_url(" http://gw:10301/health/ ") == "http://gw:10301"
    assert normalize_gateway_url("") is None
    assert normalize_gateway_url(None) is None


async def test_validate_server(hass: HomeAssistant, fake: FakeLlama) -> None:
    errors, props = await validate_server(hass, fake.url, FAKE_KEY)
    assert errors == {}
    assert props is not None
    assert (await validate_server(hass, fake.url, "wrong"))[0] == {"base": "invalid_auth"}
    assert (await validate_server(hass, "nope://x", ""))[0] == {CONF_URL: "invalid_url"}


async def test_first_agent_slots(hass: HomeAssistant, fake: FakeLlama) -> None:
    """The lowest reserved slot; slot 0 without a proxy status or without a server."""
    _, props = await validate_server(hass, fake.url, FAKE_KEY)
    fake.proxy_status = {"service": "voice-stack-llm-auth", "reserved_slots": [2, 1]}
    assert await first_agent_slots(hass, fake.url, FAKE_KEY, props) == [1]
    fake.proxy_status = None
    assert await first_agent_slots(hass, fake.url, FAKE_KEY, props) == [0]
    await fake.stop()
    assert await first_agent_slots(hass, fake.url, FAKE_KEY, props) == [0]


async def test_validate_gateway(hass: HomeAssistant, fake_gateway: FakeGateway) -> None:
    assert await validate_gateway(hass, None) == {}
    assert await validate_gateway(hass, fake_gateway.url) == {}
    assert await validate_gateway(hass, "ftp://gw") == {CONF_GATEWAY_URL: "invalid_url"}
    not_usable = {CONF_GATEWAY_URL: "gateway_cannot_connect"}
    assert await validate_gateway(hass, "http://127.0.0.1:9") == not_usable
    fake_gateway.health_status = 500  # no usable gateway
    assert await validate_gateway(hass, fake_gateway.url) == not_usable
    fake_gateway.health_status = 200
    fake_gateway.health = {"state": "ok"}  # not the gateway's /health
    assert await validate_gateway(hass, fake_gateway.url) == not_usable
