"""The options flow: set, change or clear the gateway URL, checked before it is saved."""

from __future__ import annotations

from homeassistant.core import HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.helpers import device_registry as dr
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import CONF_GATEWAY_URL
from tests.integration.helpers import settle
from voice_stack_dev.fakes.integration import FakeGateway


async def test_set_refuse_clear_and_set_again(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake_gateway: FakeGateway
) -> None:
    entry = init_integration
    result = await hass.config_entries.options.async_init(entry.entry_id)
    assert result["type"] is FlowResultType.FORM
    for bad, error in (
        ("ftp://gateway", "invalid_url"),
        ("http://127.0.0.1:9", "gateway_cannot_connect"),
    ):
        result = await hass.config_entries.options.async_configure(
            result["flow_id"], {CONF_GATEWAY_URL: bad}
        )
        assert result["errors"] == {CONF_GATEWAY_URL: error}
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {CONF_GATEWAY_URL: f"{fake_gateway.url}/health/"}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    await settle(hass)
    assert entry.options == {CONF_GATEWAY_URL: fake_gateway.url}
    assert entry.runtime_data.coordinators.gateway is not None
    assert hass.states.get("binary_sensor.voice_stack_gateway_connectivity").state == "on"  # type: ignore[union-attr]

    result = await hass.config_entries.options.async_init(entry.entry_id)
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {CONF_GATEWAY_URL: ""}
    )
    await settle(hass)
    assert CONF_GATEWAY_URL not in entry.options
    assert entry.runtime_data.coordinators.gateway is None
    assert hass.states.get("binary_sensor.voice_stack_gateway_connectivity") is None
    names = {d.name for d in dr.async_entries_for_config_entry(dr.async_get(hass), entry.entry_id)}
    assert "Voice Stack gateway" not in names
