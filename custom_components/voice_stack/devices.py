"""One device per service of the stack, with stable identifiers and translated names, and one
device per agent (subentry) that its conversation or AI Task entity and speed sensors share.

Device names come from translations ("Voice Stack LLM server", ...), so entity ids are
deterministic (has_entity_name): e.g. sensor.voice_stack_llm_server_generation_throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import TYPE_CHECKING, Any, Final

from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.device_registry import DeviceEntryType, DeviceInfo
from homeassistant.helpers.entity import EntityDescription
from homeassistant.helpers.typing import UNDEFINED
from homeassistant.helpers.update_coordinator import CoordinatorEntity, DataUpdateCoordinator

from .const import CONF_MODEL, DOMAIN

if TYPE_CHECKING:
    from homeassistant.config_entries import ConfigEntry, ConfigSubentry
    from homeassistant.core import HomeAssistant
    from homeassistant.helpers.entity import Entity
    from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

    from .coordinator import GatewayCoordinator, LlamaCoordinator, ProxyCoordinator
    from .probes import BackendHealth, GatewayHealth

DEVICE_LLM: Final = "llm_server"
DEVICE_PROXY: Final = "auth_proxy"
DEVICE_GATEWAY: Final = "gateway"
DEVICE_ASR: Final = "asr"
DEVICE_TTS: Final = "tts"
GATEWAY_DEVICES: Final = (DEVICE_GATEWAY, DEVICE_ASR, DEVICE_TTS)

_MANUFACTURER: Final = {
    DEVICE_LLM: "llama.cpp",
    DEVICE_PROXY: "nginx",
    DEVICE_GATEWAY: "Voice Stack",
    DEVICE_ASR: "OpenAI-compatible",
    DEVICE_TTS: "OpenAI-compatible",
}
_MODEL: Final = {
    DEVICE_LLM: "llama-server",
    DEVICE_PROXY: "Bearer-token proxy",
    DEVICE_GATEWAY: "Wyoming gateway",
    DEVICE_ASR: "Speech-to-text server",
    DEVICE_TTS: "Text-to-speech server",
}


def device_identifier(entry: ConfigEntry, kind: str) -> tuple[str, str]:
    """Identifier of one service device of an entry."""
    return (DOMAIN, f"{entry.entry_id}_{kind}")


def service_device(
    entry: ConfigEntry,
    kind: str,
    *,
    model: str | None = None,
    sw_version: str | None = None,
    configuration_url: str | None = None,
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
    if configuration_url:
        info["configuration_url"] = configuration_url
    return info


def llm_device_info(entry: ConfigEntry, llm: LlamaCoordinator) -> DeviceInfo:
    """The LLM server device, with model and build when the server already told them."""
    props = llm.data.props if llm.data else None
    return service_device(
        entry,
        DEVICE_LLM,
        model=props.model if props else None,
        sw_version=props.build if props else None,
        configuration_url=llm.base_url,
    )


def proxy_device_info(entry: ConfigEntry, proxy: ProxyCoordinator) -> DeviceInfo:
    """The auth proxy device, named by the service its /proxy/status reports."""
    status = proxy.data.status if proxy.data else None
    return service_device(entry, DEVICE_PROXY, model=status.service if status else None)


def gateway_device_info(entry: ConfigEntry, gateway: GatewayCoordinator) -> DeviceInfo:
    """The gateway device, with its version once it answered."""
    version = gateway.data.version if gateway.data else None
    return service_device(entry, DEVICE_GATEWAY, sw_version=version)


def backend_of(health: GatewayHealth | None, kind: str) -> BackendHealth | None:
    """The ASR or TTS part of the gateway's report."""
    if health is None:
        return None
    return health.asr if kind == DEVICE_ASR else health.tts


def backend_device_info(entry: ConfigEntry, kind: str, gateway: GatewayCoordinator) -> DeviceInfo:
    """An ASR or TTS device: its model and its own URL as the gateway reports them."""
    backend = backend_of(gateway.data, kind)
    return service_device(
        entry,
        kind,
        model=backend.models[0] if backend and backend.models else None,
        configuration_url=backend.url if backend else None,
    )


def agent_device_info(subentry: ConfigSubentry) -> DeviceInfo:
    """The device of one agent, named after its subentry."""
    return DeviceInfo(
        identifiers={(DOMAIN, subentry.subentry_id)},
        name=subentry.title,
        manufacturer="llama.cpp",
        model=subentry.data.get(CONF_MODEL) or "llama-server",
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


class VoiceStackServiceEntity[CoordinatorT: DataUpdateCoordinator[Any]](
    CoordinatorEntity[CoordinatorT]
):
    """An entity of one service device, fed by that service's coordinator."""

    _attr_has_entity_name = True

    def __init__(
        self,
        coordinator: CoordinatorT,
        entry: ConfigEntry,
        kind: str,
        description: EntityDescription,
        device_info: DeviceInfo,
    ) -> None:
        """Bind to the coordinator; unique id = entry + device kind + key."""
        super().__init__(coordinator)
        self.entity_description = description
        self._attr_unique_id = f"{entry.entry_id}_{kind}_{description.key}"
        self._attr_device_info = device_info


def remove_stale_devices(hass: HomeAssistant, entry: ConfigEntry, kinds: tuple[str, ...]) -> None:
    """Drop the devices of services no longer configured (the gateway URL was cleared)."""
    registry = dr.async_get(hass)
    for kind in kinds:
        device = registry.async_get_device_by_identifier(
            device_identifier(entry, kind), entry.entry_id
        )
        if device is not None:
            registry.async_remove_device(device.id)
