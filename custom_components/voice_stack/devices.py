"""One device per service of the stack, with stable identifiers and translated names, and one
device per agent (subentry) that its conversation or AI Task entity and speed sensors share,
and the device infos the entities are created with (as their coordinator last saw them).

Device names come from translations ("Voice Stack LLM server", ...), so entity ids are
deterministic (has_entity_name): e.g. sensor.voice_stack_llm_server_generation_speed. No
device links to a page: the proxy and llama-server want the key, which a browser does not send.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import TYPE_CHECKING, Final

from homeassistant.config_entries import ConfigEntry
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.device_registry import DeviceEntryType, DeviceInfo
from homeassistant.helpers.typing import UNDEFINED

from .const import (
    CONF_MODEL,
    DEVICE_ASR,
    DEVICE_GATEWAY,
    DEVICE_LLM,
    DEVICE_PROXY,
    DEVICE_TTS,
    DOMAIN,
)
from .payloads import GatewayData, LlamaData, ProxyData, model_name

if TYPE_CHECKING:
    from homeassistant.config_entries import ConfigSubentry
    from homeassistant.core import HomeAssistant
    from homeassistant.helpers.entity import Entity
    from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

_MANUFACTURER: Final = {
    DEVICE_LLM: "llama.cpp",
    DEVICE_PROXY: "Voice Stack",
    DEVICE_GATEWAY: "Voice Stack",
    DEVICE_ASR: "OpenAI-compatible",
    DEVICE_TTS: "OpenAI-compatible",
}
_MODEL: Final = {
    DEVICE_LLM: "llama-server",
    DEVICE_PROXY: "Auth proxy (nginx)",
    DEVICE_GATEWAY: "Wyoming gateway",
    DEVICE_ASR: "Speech-to-text server",
    DEVICE_TTS: "Text-to-speech server",
}


def device_identifier(entry: ConfigEntry, kind: str) -> tuple[str, str]:
    """Identifier of one service device of an entry."""
    return (DOMAIN, f"{entry.entry_id}_{kind}")


def service_device(
    entry: ConfigEntry, kind: str, *, model: str | None = None, sw_version: str | None = None
) -> DeviceInfo:
    """DeviceInfo of one service of the stack."""
    info = DeviceInfo(
        identifiers={device_identifier(entry, kind)},
        translation_key=kind,
        manufacturer=_MANUFACTURER[kind],
        model=model or _MODEL[kind],
        entry_type=DeviceEntryType.SERVICE,
    )
    if sw_version:
        info["sw_version"] = sw_version
    return info


def agent_device_info(subentry: ConfigSubentry) -> DeviceInfo:
    """The device of one agent, named after its subentry."""
    return DeviceInfo(
        identifiers={(DOMAIN, subentry.subentry_id)},
        name=subentry.title,
        manufacturer="llama.cpp",
        model=model_name(subentry.data.get(CONF_MODEL) or "") or "llama-server",
        entry_type=DeviceEntryType.SERVICE,
    )


def add_agent_entities(
    entry: ConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
    subentry_types: Container[str],
    build: Callable[[ConfigSubentry], Iterable[Entity]],
) -> None:
    """Add the entities `build` makes for each agent of these types, under its subentry."""
    for subentry in entry.subentries.values():
        if subentry.subentry_type in subentry_types:
            async_add_entities(build(subentry), config_subentry_id=subentry.subentry_id)


def update_device(
    hass: HomeAssistant,
    entry: ConfigEntry,
    kind: str,
    *,
    model: str | None = None,
    sw_version: str | None = None,
) -> None:
    """Fill in facts learned after the entities were created (model loaded, version known)."""
    registry = dr.async_get(hass)
    device = registry.async_get_device_by_identifier(device_identifier(entry, kind), entry.entry_id)
    if device is not None:  # the registry only writes what changed
        registry.async_update_device(
            device.id, model=model or UNDEFINED, sw_version=sw_version or UNDEFINED
        )


def remove_stale_devices(hass: HomeAssistant, entry: ConfigEntry, kinds: tuple[str, ...]) -> None:
    """Drop the devices of services no longer configured (the gateway URL was cleared)."""
    registry = dr.async_get(hass)
    for kind in kinds:
        device = registry.async_get_device_by_identifier(
            device_identifier(entry, kind), entry.entry_id
        )
        if device is not None:
            registry.async_remove_device(device.id)


def llm_device_info(entry: ConfigEntry, data: LlamaData | None) -> DeviceInfo:
    """The LLM server device, with model and build when the server already told them."""
    props = data.props if data else None
    return service_device(
        entry,
        DEVICE_LLM,
        model=props.model if props else None,
        sw_version=props.build if props else None,
    )


def proxy_device_info(entry: ConfigEntry, data: ProxyData | None) -> DeviceInfo:
    """The auth proxy device, named by the service its /proxy/status reports."""
    status = data.status if data else None
    return service_device(entry, DEVICE_PROXY, model=status.service if status else None)


def gateway_device_info(entry: ConfigEntry, data: GatewayData | None) -> DeviceInfo:
    """The gateway device, with its version once it answered."""
    return service_device(entry, DEVICE_GATEWAY, sw_version=data.health.version if data else None)


def backend_device_info(entry: ConfigEntry, kind: str, data: GatewayData | None) -> DeviceInfo:
    """An ASR or TTS device, with its model as the gateway reports it."""
    backend = data.health.backend(kind) if data else None
    return service_device(
        entry, kind, model=backend.models[0] if backend and backend.models else None
    )
