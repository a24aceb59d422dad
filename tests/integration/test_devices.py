"""devices.py: what the device pages show."""

from __future__ import annotations

from typing import Any

import pytest
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import CONF_MODEL, DOMAIN
from custom_components.voice_stack.payloads import model_name
from tests.integration.helpers import agent


@pytest.mark.parametrize(
    ("model", "shown"),
    [
        ("/work/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1"),
        ("local", "local"),
        ("gemma-3-12b-it", "gemma-3-12b-it"),
    ],
)
def test_model_name(model: str, shown: str) -> None:
    assert model_name(model) == shown


@pytest.fixture
def agents() -> list[dict[str, Any]]:
    """An agent whose model is what llama-server lists without --alias: the file's path."""
    return [agent(0, title="Kitchen", **{CONF_MODEL: "/srv/models/SmolLM2-135M-Instruct.gguf"})]


async def test_the_agent_device_shows_the_models_name_not_its_path(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    subentry_id = next(iter(init_integration.subentries))
    device = dr.async_get(hass).async_get_device_by_identifier(
        (DOMAIN, subentry_id), init_integration.entry_id
    )
    assert device is not None
    assert device.model == "SmolLM2-135M-Instruct"
