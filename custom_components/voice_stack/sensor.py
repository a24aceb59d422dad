"""Speed and load sensors: per agent (pushed after every reply) and per service (polled)."""

from __future__ import annotations

from typing import Any, override

from homeassistant.components.sensor import RestoreSensor, SensorEntity
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.dispatcher import async_dispatcher_connect
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.typing import StateType
from homeassistant.helpers.update_coordinator import DataUpdateCoordinator

from .agent import Agent
from .const import DEVICE_GATEWAY, DEVICE_LLM, DEVICE_PROXY, SUBENTRY_AI_TASK, SUBENTRY_CONVERSATION
from .devices import add_agent_entities, agent_device_info
from .gateway_coordinator import GatewayCoordinator
from .llama_coordinator import LlamaCoordinator
from .models import VoiceStackConfigEntry
from .proxy_coordinator import ProxyCoordinator
from .sensor_types import (
    AGENT_SENSORS,
    GATEWAY_SENSORS,
    LLAMA_SENSORS,
    PROXY_SENSORS,
    SERVER_STATE,
    AgentSensorDescription,
    GatewaySensorDescription,
    LlamaSensorDescription,
    ProxySensorDescription,
)
from .service_entity import (
    VoiceStackServiceEntity,
    backend_device_info,
    gateway_device_info,
    llm_device_info,
    proxy_device_info,
)
from .timings import Timings, signal_timings

# Coordinator-fed and pushed entities: no polling of their own.
PARALLEL_UPDATES = 0


async def async_setup_entry(
    hass: HomeAssistant,
    entry: VoiceStackConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the server, proxy and gateway sensors, and the speed sensors of every agent."""
    coordinators = entry.runtime_data.coordinators
    llm, proxy = coordinators.llm, coordinators.proxy
    llm_device = llm_device_info(entry, llm.data)
    proxy_device = proxy_device_info(entry, proxy.data)
    entities: list[SensorEntity] = [
        *(LlamaSensor(llm, entry, DEVICE_LLM, d, llm_device) for d in LLAMA_SENSORS),
        ServerStateSensor(llm, entry, DEVICE_LLM, SERVER_STATE, llm_device),
        *(ProxySensor(proxy, entry, DEVICE_PROXY, d, proxy_device) for d in PROXY_SENSORS),
    ]
    if (gateway := coordinators.gateway) is not None:
        entities += gateway_sensors(entry, gateway)
    async_add_entities(entities)
    agents = entry.runtime_data.agents
    add_agent_entities(
        entry,
        async_add_entities,
        (SUBENTRY_CONVERSATION, SUBENTRY_AI_TASK),
        lambda subentry: [
            AgentSpeedSensor(entry, agents[subentry.subentry_id], d) for d in AGENT_SENSORS
        ],
    )


def gateway_sensors(
    entry: VoiceStackConfigEntry, gateway: GatewayCoordinator
) -> list[SensorEntity]:
    """Sensors of the gateway and of the two speech servers behind it."""
    entities: list[SensorEntity] = []
    for description in GATEWAY_SENSORS:
        if description.device == DEVICE_GATEWAY:
            device = gateway_device_info(entry, gateway.data)
        else:
            device = backend_device_info(entry, description.device, gateway.data)
        entities.append(GatewaySensor(gateway, entry, description.device, description, device))
    return entities


class _DescribedSensor[CoordinatorT: DataUpdateCoordinator[Any]](
    VoiceStackServiceEntity[CoordinatorT], SensorEntity
):
    """A figure its description reads from the coordinator's latest data (none before it)."""

    entity_description: LlamaSensorDescription | ProxySensorDescription | GatewaySensorDescription

    @property
    @override
    def native_value(self) -> StateType:
        data = self.coordinator.data
        return self.entity_description.value_fn(data) if data else None


class LlamaSensor(_DescribedSensor[LlamaCoordinator]):
    """A server-wide llama-server figure; unavailable while the server is down or loading."""

    entity_description: LlamaSensorDescription

    @property
    @override
    def available(self) -> bool:
        data = self.coordinator.data
        return super().available and data is not None and not data.loading


class ServerStateSensor(VoiceStackServiceEntity[LlamaCoordinator], SensorEntity):
    """ready / loading / unreachable: stays available, it is the answer when the rest is not."""

    @property
    @override
    def available(self) -> bool:
        return True

    @property
    @override
    def native_value(self) -> str:
        if not self.coordinator.reachable:
            return "unreachable"
        return "loading" if self.coordinator.data.loading else "ready"


class ProxySensor(_DescribedSensor[ProxyCoordinator]):
    """A figure of the auth proxy poll."""

    entity_description: ProxySensorDescription


class GatewaySensor(_DescribedSensor[GatewayCoordinator]):
    """A figure from the gateway's poll."""

    entity_description: GatewaySensorDescription


class AgentSpeedSensor(RestoreSensor):
    """A figure of an agent's latest reply, pushed by the agent over the dispatcher."""

    _attr_has_entity_name = True
    _attr_should_poll = False
    entity_description: AgentSensorDescription

    def __init__(
        self, entry: VoiceStackConfigEntry, agent: Agent, description: AgentSensorDescription
    ) -> None:
        """Attach to the agent's own device (same identifiers and name as the agent entity)."""
        self.entity_description = description
        self._entry = entry
        self._agent_id = agent.id
        self._attr_unique_id = f"{agent.id}_{description.key}"
        self._attr_device_info = agent_device_info(agent.subentry)

    @override
    async def async_added_to_hass(self) -> None:
        await super().async_added_to_hass()
        # runtime_data.timings starts empty with each setup: the last figure comes from restore.
        if (restored := await self.async_get_last_sensor_data()) is not None:
            self._attr_native_value = restored.native_value
        self.async_on_remove(
            async_dispatcher_connect(
                self.hass, signal_timings(self._entry.entry_id), self._on_timings
            )
        )

    @callback
    def _on_timings(self, agent_id: str, timings: Timings) -> None:
        if agent_id != self._agent_id:
            return
        value = self.entity_description.value_fn(timings)
        if value is None:
            return  # e.g. no drafts in this reply: keep the last measured figure
        self._attr_native_value = value
        self.async_write_ha_state()
