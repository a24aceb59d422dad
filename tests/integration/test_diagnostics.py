"""Diagnostics: what every poller and the warm-up saw, the agents and their last timings; never
the key, the prompt or a URL."""

from __future__ import annotations

from typing import Any

import pytest
from freezegun.api import FrozenDateTimeFactory
from homeassistant.core import HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.components.diagnostics import (
    get_diagnostics_for_config_entry,
)
from syrupy.assertion import SnapshotAssertion
from syrupy.filters import props

from tests.integration.conftest import Server
from tests.integration.helpers import agent
from voice_stack_dev.fakes.integration import FAKE_KEY, FakeGateway, FakeLlama

PRIVATE = ("gpu-box.lan", "speech.lan", "10.0.0.7", "/home/alice")


@pytest.fixture
def gateway_url(fake_gateway: FakeGateway) -> str:
    """A gateway whose ASR backend failed with an error text naming its URL and address."""
    fake_gateway.health["backends"]["asr"]["last_error"] = (
        "asr backend http://speech.lan:8000/v1 is unreachable: Cannot connect to host"
        " speech.lan:8000 ssl:default [Connect call failed ('10.0.0.7', 8000)]"
    )
    return fake_gateway.url


@pytest.fixture
def server(fake: FakeLlama) -> Server:
    """A model file in a private folder."""
    fake.props["model_path"] = "/home/alice/models/fake-model.gguf"
    return Server(fake.url, FAKE_KEY)


@pytest.fixture
def agents() -> list[dict[str, Any]]:
    return [agent(0, 1, title="Voice on gpu-box.lan", prompt="A secret household prompt")]


async def test_diagnostics(
    freezer: FrozenDateTimeFactory,
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    hass_client: Any,
    snapshot: SnapshotAssertion,
) -> None:
    diag = await get_diagnostics_for_config_entry(hass, hass_client, init_integration)
    text = str(diag)
    for secret in (FAKE_KEY, "A secret household prompt", "127.0.0.1", *PRIVATE):
        assert secret not in text, secret
    # `at` and `polled_at` are monotonic clock readings: they differ from run to run
    assert diag == snapshot(exclude=props("at", "polled_at"))
