"""The Voice Stack integration: llama-server agents on dedicated slots."""

from __future__ import annotations

from homeassistant.const import Platform
from homeassistant.core import HomeAssistant
from homeassistant.exceptions import ConfigEntryAuthFailed, ConfigEntryNotReady
from homeassistant.helpers.aiohttp_client import async_get_clientsession

from . import health_issues, repairs
from .client import LlamaAuthError, LlamaClient, LlamaError
from .const import CONF_API_KEY, CONF_URL, DOMAIN
from .coordinator import async_setup_coordinators
from .models import VoiceStackConfigEntry, VoiceStackData
from .warm import SlotWarmer

PLATFORMS: list[Platform] = [
    Platform.AI_TASK,
    Platform.BINARY_SENSOR,
    Platform.CONVERSATION,
    Platform.SENSOR,
]


async def async_setup_entry(hass: HomeAssistant, entry: VoiceStackConfigEntry) -> bool:
    """Connect to the server, add the agents, start warming their slots."""
    client = LlamaClient(
        async_get_clientsession(hass), entry.data[CONF_URL], entry.data.get(CONF_API_KEY, "")
    )
    try:
        await client.health()
        props = await client.props()
    except LlamaAuthError as err:
        raise ConfigEntryAuthFailed(
            translation_domain=DOMAIN, translation_key="invalid_auth"
        ) from err
    except LlamaError as err:
        raise ConfigEntryNotReady(
            translation_domain=DOMAIN,
            translation_key="cannot_connect",
        ) from err
    data = VoiceStackData(client=client, props=props)
    data.warmer = SlotWarmer(hass, entry, client)
    entry.runtime_data = data
    data.coordinators = await async_setup_coordinators(hass, entry)
    await hass.config_entries.async_forward_entry_setups(entry, PLATFORMS)
    entry.async_on_unload(entry.add_update_listener(_async_update_listener))
    data.warmer.async_start()
    return True


async def _async_update_listener(hass: HomeAssistant, entry: VoiceStackConfigEntry) -> None:
    """Reload when agents change so slots and prompts are re-checked and re-warmed."""
    await hass.config_entries.async_reload(entry.entry_id)


async def async_unload_entry(hass: HomeAssistant, entry: VoiceStackConfigEntry) -> bool:
    """Unload the platforms."""
    return await hass.config_entries.async_unload_platforms(entry, PLATFORMS)


async def async_remove_entry(hass: HomeAssistant, entry: VoiceStackConfigEntry) -> None:
    """Drop the entry's repair issues."""
    repairs.async_clear_entry(hass, entry)
    health_issues.async_clear_entry(hass, entry)
