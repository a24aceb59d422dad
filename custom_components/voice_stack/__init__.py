"""The Voice Stack integration: llama-server agents on their own slots, and the stack's health."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from typing import Any, Final, cast

import openai
from homeassistant.config_entries import ConfigEntry
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant, callback, split_entity_id
from homeassistant.exceptions import ConfigEntryNotReady
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers.aiohttp_client import async_get_clientsession
from homeassistant.helpers.httpx_client import get_async_client
from homeassistant.util import slugify

from .agent import Agent
from .chat import ChatClient
from .client import GatewayClient, LlamaClient, ProxyClient
from .const import (
    CONF_API_KEY,
    CONF_GATEWAY_URL,
    CONF_SLOT,
    CONF_SLOTS,
    CONF_URL,
    DEVICE_LLM,
    DOMAIN,
    GATEWAY_DEVICES,
    LOGGER,
    SUBENTRY_AI_TASK,
    SUBENTRY_CONVERSATION,
)
from .coordinator import (
    GatewayCoordinator,
    LlamaCoordinator,
    ProxyCoordinator,
    VoiceStackCoordinator,
)
from .devices import remove_stale_devices
from .kv_probe import UnifiedKvProbe
from .repairs import Repairs, clear_issues
from .runtime import Coordinators, VoiceStackConfigEntry, VoiceStackData
from .slots import SlotScheduler
from .warm import SlotPrimer, WarmUp
from .watcher import ServerWatcher

PLATFORMS: list[Platform] = [
    Platform.AI_TASK,
    Platform.BINARY_SENSOR,
    Platform.CONVERSATION,
    Platform.SENSOR,
]
_AGENT_TYPES = (SUBENTRY_CONVERSATION, SUBENTRY_AI_TASK)
# llama-server ignores the key when it has none, but the SDK insists on one.
_NO_KEY = "no-key"


async def async_setup_entry(hass: HomeAssistant, entry: VoiceStackConfigEntry) -> bool:
    """Connect to the server, poll the stack once, add the agents, start warming their slots."""
    session = async_get_clientsession(hass)
    url, api_key = entry.data[CONF_URL], entry.data.get(CONF_API_KEY, "")
    client = LlamaClient(session, url, api_key)
    # The first poll is the check: unreachable is "not ready", a rejected key starts reauth.
    coordinators = await _first_polls(hass, entry, client, ProxyClient(session, url, api_key))
    chat = ChatClient(await _openai_client(hass, entry))
    agents = {
        subentry.subentry_id: Agent(hass, subentry)
        for subentry in entry.subentries.values()
        if subentry.subentry_type in _AGENT_TYPES
    }
    scheduler = SlotScheduler()
    repairs = Repairs(hass, entry, coordinators.llm, coordinators.proxy, agents)
    primer = SlotPrimer(chat, client)
    probe = UnifiedKvProbe(hass, chat, scheduler, coordinators.llm.base_url)
    warm_up = WarmUp(agents, scheduler, primer, probe, repairs)
    watcher = ServerWatcher(hass, entry, coordinators.llm, scheduler, warm_up)
    entry.runtime_data = VoiceStackData(
        client=client,
        chat=chat,
        coordinators=coordinators,
        agents=agents,
        scheduler=scheduler,
        repairs=repairs,
        primer=primer,
        watcher=watcher,
    )
    await hass.config_entries.async_forward_entry_setups(entry, PLATFORMS)
    entry.async_on_unload(entry.add_update_listener(_async_update_listener))
    repairs.async_start()
    watcher.async_start()
    return True


async def _openai_client(hass: HomeAssistant, entry: ConfigEntry) -> openai.AsyncOpenAI:
    """An SDK client on HA's shared httpx client (the URL is the server root, the SDK's is /v1)."""
    client = openai.AsyncOpenAI(
        api_key=entry.data.get(CONF_API_KEY) or _NO_KEY,
        base_url=f"{entry.data[CONF_URL].rstrip('/')}/v1",
        # HA 2026.10 hands out a legacy httpx client, which the SDK accepts at run time.
        http_client=cast(Any, get_async_client(hass)),
        max_retries=0,
    )
    # The SDK reads platform facts from disk once; do it outside the event loop.
    await hass.async_add_executor_job(client.platform_headers)
    return client


async def _first_polls(
    hass: HomeAssistant, entry: ConfigEntry, client: LlamaClient, proxy: ProxyClient
) -> Coordinators:
    """Create the coordinators and poll each once: llama-server must answer with its model
    loaded (else setup is retried, saying why); the proxy or the gateway being down is a
    state their sensors show."""
    gateway_url = entry.options.get(CONF_GATEWAY_URL) or entry.data.get(CONF_GATEWAY_URL)
    coordinators = Coordinators(
        llm=LlamaCoordinator(hass, entry, client),
        proxy=ProxyCoordinator(hass, entry, proxy),
        gateway=GatewayCoordinator(
            hass, entry, GatewayClient(async_get_clientsession(hass), str(gateway_url))
        )
        if gateway_url
        else None,
    )
    if gateway_url is None:
        remove_stale_devices(hass, entry, GATEWAY_DEVICES)
    await coordinators.llm.async_config_entry_first_refresh()
    if coordinators.llm.data.loading:
        # Nothing to set up yet: no model, no slots, no props. (A server that starts loading
        # again later is a state the sensors show; only setup waits for it.)
        raise ConfigEntryNotReady(translation_domain=DOMAIN, translation_key="model_loading_setup")
    others: list[VoiceStackCoordinator[Any, Any]] = [coordinators.proxy]
    if coordinators.gateway is not None:
        others.append(coordinators.gateway)
    await asyncio.gather(*(c.async_refresh() for c in others))
    return coordinators


async def _async_update_listener(hass: HomeAssistant, entry: VoiceStackConfigEntry) -> None:
    """Reload when agents change so slots and prompts are re-checked and re-warmed."""
    await hass.config_entries.async_reload(entry.entry_id)


# The 2026.11 anchors (ollama, llama_cpp) return None from setup and unload, and unload with
# async_unload_platforms_or_raise. HA 2026.10.4, the oldest release supported, has no such
# method and takes only a bool from async_setup_entry, async_unload_entry and
# async_migrate_entry (None is logged as an error and fails setup; unload asserts a bool);
# 2026.11 accepts a bool from a custom integration. So the three return a bool, and a platform
# that fails to unload is a False (which 2026.11 turns into the same error the method raises).


async def async_unload_entry(hass: HomeAssistant, entry: VoiceStackConfigEntry) -> bool:
    """Unload the platforms."""
    return await hass.config_entries.async_unload_platforms(entry, PLATFORMS)


async def async_remove_entry(hass: HomeAssistant, entry: VoiceStackConfigEntry) -> None:
    """Drop the entry's repair issues."""
    clear_issues(hass, entry)


async def async_migrate_entry(hass: HomeAssistant, entry: ConfigEntry) -> bool:
    """1.1 -> 1.2: an agent's one `slot` number becomes its pool `slots`; 1.2 -> 1.3: the URL
    is no longer the unique id (entries have none; the flow refuses a duplicate URL); 1.3 ->
    1.4: the LLM server's "Generation load" and "Prompt load" sensors, now "... throughput",
    get the entity ids a new install gives them, unless the user chose theirs.

    HA itself refuses an entry of a higher major version; a higher minor one is compatible.
    """
    if entry.minor_version < 2:
        for subentry in entry.subentries.values():
            if CONF_SLOT in subentry.data and CONF_SLOTS not in subentry.data:
                data = {k: v for k, v in subentry.data.items() if k != CONF_SLOT}
                data[CONF_SLOTS] = [int(subentry.data[CONF_SLOT])]
                hass.config_entries.async_update_subentry(entry, subentry, data=data)
        hass.config_entries.async_update_entry(entry, minor_version=2)
        LOGGER.debug("Migrated %s to version 1.2 (slot pools)", entry.title)
    if entry.minor_version < 3:
        hass.config_entries.async_update_entry(entry, unique_id=None, minor_version=3)
        LOGGER.debug("Migrated %s to version 1.3 (no URL as unique id)", entry.title)
    if entry.minor_version < 4:
        _rename_throughput_entity_ids(hass, entry)
        hass.config_entries.async_update_entry(entry, minor_version=4)
        LOGGER.debug("Migrated %s to version 1.4 (throughput sensors' entity ids)", entry.title)
    return True


# The LLM server sensors renamed in 1.4: (key in the unique id, object id of the old name, of
# the new one).
_RENAMED_SENSORS: Final = (
    ("generation_throughput", "generation_load", "generation_throughput"),
    ("prompt_throughput", "prompt_load", "prompt_throughput"),
)
# What HA appends to an entity id that was taken when it made it (a second entry's _2).
_TAKEN_SUFFIX: Final = re.compile(r"(_(?:[2-9]|[1-9]\d+))?")


@callback
def _rename_throughput_entity_ids(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Rename the entry's two throughput sensors (found by unique id, which does not change)
    from the entity id HA made of their old name to the one it makes of the new: only an id
    still exactly as HA made it (device name + old name, with HA's _2, _3 if it was taken) and
    only to a free id. The recorder follows the rename, so history and statistics stay."""
    entities = er.async_get(hass)
    devices = dr.async_get(hass)
    for key, old, new in _RENAMED_SENSORS:
        unique_id = f"{entry.entry_id}_{DEVICE_LLM}_{key}"
        entity_id = entities.async_get_entity_id(Platform.SENSOR, DOMAIN, unique_id)
        entity = entities.async_get(entity_id) if entity_id else None
        if entity is None:
            continue
        device = devices.async_get(entity.device_id) if entity.device_id else None
        names = (device.name_by_user, device.name) if device else ()
        new_id = _default_id_renamed(entity.entity_id, names, old, new)
        if new_id is None:
            LOGGER.debug("Kept %s: not the id made of its old name", entity.entity_id)
        elif entities.async_is_registered(new_id) or not hass.states.async_available(new_id):
            LOGGER.info("Kept %s: %s is taken by another entity", entity.entity_id, new_id)
        else:
            entities.async_update_entity(entity.entity_id, new_entity_id=new_id)
            LOGGER.info("Renamed %s to %s (the sensor's new name)", entity.entity_id, new_id)


def _default_id_renamed(
    entity_id: str, device_names: Iterable[str | None], old: str, new: str
) -> str | None:
    """The id HA makes of the new name when entity_id is the one it made of the old name on
    the device (by its name or the one the user gave it), else None."""
    domain, object_id = split_entity_id(entity_id)
    for prefix in {slugify(name) for name in device_names if name}:
        head = f"{prefix}_{old}"
        rest = object_id.removeprefix(head)
        if object_id.startswith(head) and _TAKEN_SUFFIX.fullmatch(rest):
            return f"{domain}.{prefix}_{new}{rest}"
    return None
