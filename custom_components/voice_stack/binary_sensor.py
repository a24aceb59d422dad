"""Health of each service as connectivity binary sensors, plus the proxy's key check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, override

from homeassistant.components.binary_sensor import (
    BinarySensorEntity,
    BinarySensorEntityDescription,
)
from homeassistant.components.binary_sensor.const import BinarySensorDeviceClass
from homeassistant.const import EntityCategory
from homeassistant.core import HomeAssistant
from homeassistant.helpers.device_registry import DeviceInfo
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

from .const import DEVICE_ASR, DEVICE_GATEWAY, DEVICE_LLM, DEVICE_PROXY, DEVICE_TTS
from .coordinator import GatewayCoordinator, LlamaCoordinator, ProxyCoordinator
from .devices import (
    backend_device_info,
    gateway_device_info,
    llm_device_info,
    proxy_device_info,
)
from .entity import VoiceStackServiceEntity
from .payloads import BackendHealth
from .runtime import VoiceStackConfigEntry

# Coordinator-fed entities: no polling of their own.
PARALLEL_UPDATES = 0

# Device-class name "Connectivity": binary_sensor.voice_stack_<device>_connectivity.
CONNECTIVITY: Final = BinarySensorEntityDescription(
    key="connectivity", device_class=BinarySensorDeviceClass.CONNECTIVITY
)
OPEN_ACCESS: Final = BinarySensorEntityDescription(
    key="accepts_requests_without_key",
    translation_key="accepts_requests_without_key",
    device_class=BinarySensorDeviceClass.PROBLEM,
    entity_category=EntityCategory.DIAGNOSTIC,
)


async def async_setup_entry(
    hass: HomeAssistant,
    entry: VoiceStackConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """One connectivity sensor per service, and the proxy's key check."""
    coordinators = entry.runtime_data.coordinators
    proxy_device = proxy_device_info(entry, coordinators.proxy.data)
    entities: list[BinarySensorEntity] = [
        LlamaConnectivity(
            coordinators.llm,
            entry,
            DEVICE_LLM,
            CONNECTIVITY,
            llm_device_info(entry, coordinators.llm.data),
        ),
        ServiceConnectivity(coordinators.proxy, entry, DEVICE_PROXY, CONNECTIVITY, proxy_device),
        ProxyOpenAccess(coordinators.proxy, entry, DEVICE_PROXY, OPEN_ACCESS, proxy_device),
    ]
    if (gateway := coordinators.gateway) is not None:
        gw_device = gateway_device_info(entry, gateway.data)
        entities.append(
            ServiceConnectivity(gateway, entry, DEVICE_GATEWAY, CONNECTIVITY, gw_device)
        )
        entities += [
            BackendConnectivity(
                gateway, entry, kind, CONNECTIVITY, backend_device_info(entry, kind, gateway.data)
            )
            for kind in (DEVICE_ASR, DEVICE_TTS)
        ]
    async_add_entities(entities)


class ServiceConnectivity(
    VoiceStackServiceEntity[LlamaCoordinator | ProxyCoordinator | GatewayCoordinator],
    BinarySensorEntity,
):
    """On while the service answers; off (never unavailable) when it does not."""

    @property
    @override
    def available(self) -> bool:
        return True

    @property
    @override
    def is_on(self) -> bool:
        return self.coordinator.reachable


class LlamaConnectivity(ServiceConnectivity):
    """llama-server answering 503 while it loads the model is up, not down: see `loading`."""

    coordinator: LlamaCoordinator

    @property
    @override
    def extra_state_attributes(self) -> Mapping[str, Any]:
        data = self.coordinator.data if self.coordinator.reachable else None
        return {"loading": bool(data and data.loading)}


class ProxyOpenAccess(VoiceStackServiceEntity[ProxyCoordinator], BinarySensorEntity):
    """Problem when the proxy lets a request without (or with a wrong) key through."""

    @property
    @override
    def is_on(self) -> bool | None:
        data = self.coordinator.data
        if data is None or (data.open_without_key is None and data.open_with_wrong_key is None):
            return None
        return data.lets_requests_through


class BackendConnectivity(VoiceStackServiceEntity[GatewayCoordinator], BinarySensorEntity):
    """An ASR or TTS server as the gateway's own probe sees it; unavailable without the gateway."""

    def __init__(
        self,
        coordinator: GatewayCoordinator,
        entry: VoiceStackConfigEntry,
        kind: str,
        description: BinarySensorEntityDescription,
        device_info: DeviceInfo,
    ) -> None:
        """Remember which backend of the gateway's report this entity shows."""
        super().__init__(coordinator, entry, kind, description, device_info)
        self._kind = kind

    @property
    def _backend(self) -> BackendHealth | None:
        data = self.coordinator.data
        return data.health.backend(self._kind) if data else None

    @property
    @override
    def available(self) -> bool:
        return super().available and self._backend is not None

    @property
    @override
    def is_on(self) -> bool | None:
        backend = self._backend
        if backend is None or backend.status == "unknown":
            return None
        return backend.status == "ok"

    @property
    @override
    def extra_state_attributes(self) -> Mapping[str, Any]:
        """The gateway's last error text; not its times, which it stamps on every probe (each
        poll would write a state row): the state's own last change tells when it went down."""
        if (backend := self._backend) is None:  # unavailable: HA shows no attributes
            return {}
        return {"last_error": backend.last_error}
