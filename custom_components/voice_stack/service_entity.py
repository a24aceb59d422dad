"""The base of every service entity (fed by one coordinator), and each service's device info
filled from what its coordinator last saw."""

from __future__ import annotations

from typing import Any

from homeassistant.config_entries import ConfigEntry
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.entity import EntityDescription
from homeassistant.helpers.update_coordinator import CoordinatorEntity, DataUpdateCoordinator

from .const import DEVICE_GATEWAY, DEVICE_LLM, DEVICE_PROXY
from .devices import service_device
from .llama_data import LlamaData
from .service_data import GatewayData, ProxyData


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
