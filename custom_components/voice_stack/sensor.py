"""Speed and load sensors: per agent (pushed after every reply) and server-wide (polled)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, override

from homeassistant.components.sensor import (
    RestoreSensor,
    SensorDeviceClass,
    SensorEntity,
    SensorEntityDescription,
    SensorStateClass,
)
from homeassistant.config_entries import ConfigSubentry
from homeassistant.const import PERCENTAGE, EntityCategory, UnitOfTime
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.dispatcher import async_dispatcher_connect
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.typing import StateType
from homeassistant.helpers.update_coordinator import DataUpdateCoordinator

from .const import SUBENTRY_AI_TASK, SUBENTRY_CONVERSATION
from .coordinator import (
    GatewayCoordinator,
    LlamaCoordinator,
    LlamaData,
    ProxyCoordinator,
    ProxyData,
)
from .devices import (
    DEVICE_ASR,
    DEVICE_GATEWAY,
    DEVICE_LLM,
    DEVICE_PROXY,
    DEVICE_TTS,
    VoiceStackServiceEntity,
    add_agent_entities,
    agent_device_info,
    backend_device_info,
    backend_of,
    gateway_device_info,
    llm_device_info,
    proxy_device_info,
)
from .models import VoiceStackConfigEntry
from .probes import GatewayHealth
from .timings import Timings, signal_timings

# Coordinator-fed and pushed entities: no polling of their own.
PARALLEL_UPDATES = 0

TOKENS_PER_SECOND: Final = "tokens/s"
TOKENS: Final = "tokens"
SERVER_STATES: Final = ["ready", "loading", "unreachable"]


@dataclass(frozen=True, kw_only=True)
class AgentSensorDescription(SensorEntityDescription):
    """A figure read from the agent's latest reply timings."""

    value_fn: Callable[[Timings], float | None]


def _speed(key: str, **kwargs: Any) -> dict[str, Any]:
    """Shared fields of the tokens-per-second sensors."""
    return {
        "key": key,
        "translation_key": key,
        "native_unit_of_measurement": TOKENS_PER_SECOND,
        "state_class": SensorStateClass.MEASUREMENT,
        "suggested_display_precision": 1,
        **kwargs,
    }


def _percent(key: str, **kwargs: Any) -> dict[str, Any]:
    return {
        "key": key,
        "translation_key": key,
        "native_unit_of_measurement": PERCENTAGE,
        "state_class": SensorStateClass.MEASUREMENT,
        "suggested_display_precision": 0,
        **kwargs,
    }


AGENT_SENSORS: Final[tuple[AgentSensorDescription, ...]] = (
    AgentSensorDescription(
        **_speed("generation_speed"), value_fn=lambda t: t.generation_per_second
    ),
    AgentSensorDescription(**_speed("prompt_speed"), value_fn=lambda t: t.prompt_per_second),
    AgentSensorDescription(
        key="time_to_first_token",
        translation_key="time_to_first_token",
        native_unit_of_measurement=UnitOfTime.MILLISECONDS,
        device_class=SensorDeviceClass.DURATION,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda t: t.time_to_first_token_ms,
    ),
    AgentSensorDescription(**_percent("prompt_cache_reuse"), value_fn=lambda t: t.cache_reuse),
    AgentSensorDescription(
        **_percent("draft_acceptance", entity_registry_enabled_default=False),
        value_fn=lambda t: t.draft_acceptance,
    ),
)


@dataclass(frozen=True, kw_only=True)
class LlamaSensorDescription(SensorEntityDescription):
    """A server-wide figure from llama-server's /metrics, /slots or /health."""

    value_fn: Callable[[LlamaData], StateType]


def _rate(name: str) -> Callable[[LlamaData], float | None]:
    return lambda d: getattr(d.rates, name) if d.rates else None


def _latency(key: str = "response_time", **kwargs: Any) -> dict[str, Any]:
    return {
        "key": key,
        "translation_key": key,
        "native_unit_of_measurement": UnitOfTime.MILLISECONDS,
        "device_class": SensorDeviceClass.DURATION,
        "state_class": SensorStateClass.MEASUREMENT,
        "suggested_display_precision": 0,
        **kwargs,
    }


_DIAGNOSTIC_OFF: Final[dict[str, Any]] = {
    "entity_category": EntityCategory.DIAGNOSTIC,
    "entity_registry_enabled_default": False,
}

LLAMA_SENSORS: Final[tuple[LlamaSensorDescription, ...]] = (
    LlamaSensorDescription(
        **_speed("generation_throughput"), value_fn=_rate("generation_throughput")
    ),
    LlamaSensorDescription(**_speed("prompt_throughput"), value_fn=_rate("prompt_throughput")),
    LlamaSensorDescription(**_speed("generation_speed"), value_fn=_rate("generation_speed")),
    LlamaSensorDescription(
        **_speed("prompt_speed", entity_registry_enabled_default=False),
        value_fn=_rate("prompt_speed"),
    ),
    LlamaSensorDescription(**_percent("prompt_cache_reuse"), value_fn=_rate("cache_reuse")),
    LlamaSensorDescription(
        **_percent("draft_acceptance", entity_registry_enabled_default=False),
        value_fn=_rate("draft_acceptance"),
    ),
    LlamaSensorDescription(
        key="requests_processing",
        translation_key="requests_processing",
        state_class=SensorStateClass.MEASUREMENT,
        value_fn=lambda d: d.requests_processing,
    ),
    LlamaSensorDescription(
        key="requests_deferred",
        translation_key="requests_deferred",
        state_class=SensorStateClass.MEASUREMENT,
        entity_registry_enabled_default=False,
        value_fn=lambda d: d.requests_deferred,
    ),
    LlamaSensorDescription(
        key="busy_slots",
        translation_key="busy_slots",
        state_class=SensorStateClass.MEASUREMENT,
        value_fn=lambda d: d.slots.busy if d.slots else None,
    ),
    LlamaSensorDescription(
        **_percent("kv_cache_use"), value_fn=lambda d: d.slots.kv_use if d.slots else None
    ),
    LlamaSensorDescription(
        key="generated_tokens",
        translation_key="generated_tokens",
        native_unit_of_measurement=TOKENS,
        state_class=SensorStateClass.TOTAL_INCREASING,
        entity_registry_enabled_default=False,
        value_fn=lambda d: int(d.counters.predicted_tokens) if d.counters else None,
    ),
    LlamaSensorDescription(
        key="processed_prompt_tokens",
        translation_key="processed_prompt_tokens",
        native_unit_of_measurement=TOKENS,
        state_class=SensorStateClass.TOTAL_INCREASING,
        entity_registry_enabled_default=False,
        value_fn=lambda d: int(d.counters.prompt_tokens) if d.counters else None,
    ),
    LlamaSensorDescription(
        key="total_slots",
        translation_key="total_slots",
        entity_category=EntityCategory.DIAGNOSTIC,
        value_fn=lambda d: d.slots.total if d.slots else None,
    ),
    LlamaSensorDescription(
        key="context_per_slot",
        translation_key="context_per_slot",
        native_unit_of_measurement=TOKENS,
        entity_category=EntityCategory.DIAGNOSTIC,
        value_fn=lambda d: d.slots.context_per_slot if d.slots else None,
    ),
    LlamaSensorDescription(**_latency(**_DIAGNOSTIC_OFF), value_fn=lambda d: d.latency_ms),
)

SERVER_STATE: Final = SensorEntityDescription(
    key="server_state",
    translation_key="server_state",
    device_class=SensorDeviceClass.ENUM,
    options=SERVER_STATES,
    entity_category=EntityCategory.DIAGNOSTIC,
)


@dataclass(frozen=True, kw_only=True)
class ProxySensorDescription(SensorEntityDescription):
    """A figure from the auth proxy probe."""

    value_fn: Callable[[ProxyData], StateType]


PROXY_SENSORS: Final[tuple[ProxySensorDescription, ...]] = (
    ProxySensorDescription(**_latency(**_DIAGNOSTIC_OFF), value_fn=lambda d: d.latency_ms),
)


@dataclass(frozen=True, kw_only=True)
class GatewaySensorDescription(SensorEntityDescription):
    """A figure from the gateway's /health, about the gateway or one backend."""

    value_fn: Callable[[GatewayHealth], StateType]


GATEWAY_SENSORS: Final[tuple[GatewaySensorDescription, ...]] = (
    GatewaySensorDescription(
        key="active_sessions",
        translation_key="active_sessions",
        state_class=SensorStateClass.MEASUREMENT,
        value_fn=lambda h: h.active_sessions,
    ),
)


def _backend_latency(kind: str) -> GatewaySensorDescription:
    return GatewaySensorDescription(
        **_latency(), value_fn=lambda h: b.latency_ms if (b := backend_of(h, kind)) else None
    )


BACKEND_SENSORS: Final[dict[str, tuple[GatewaySensorDescription, ...]]] = {
    kind: (_backend_latency(kind),) for kind in (DEVICE_ASR, DEVICE_TTS)
}


async def async_setup_entry(
    hass: HomeAssistant,
    entry: VoiceStackConfigEntry,
    async_add_entities: AddConfigEntryEntitiesCallback,
) -> None:
    """Add the server, proxy and gateway sensors, and the speed sensors of every agent."""
    coordinators = entry.runtime_data.coordinators
    if coordinators is None:
        return
    llm, proxy, gateway = coordinators.llm, coordinators.proxy, coordinators.gateway
    llm_device = llm_device_info(entry, llm)
    entities: list[SensorEntity] = [
        LlamaSensor(llm, entry, DEVICE_LLM, description, llm_device)
        for description in LLAMA_SENSORS
    ]
    entities.append(ServerStateSensor(llm, entry, DEVICE_LLM, SERVER_STATE, llm_device))
    proxy_device = proxy_device_info(entry, proxy)
    entities += [
        ProxySensor(proxy, entry, DEVICE_PROXY, description, proxy_device)
        for description in PROXY_SENSORS
    ]
    if gateway is not None:
        entities += gateway_sensors(entry, gateway)
    async_add_entities(entities)
    add_agent_entities(
        entry,
        async_add_entities,
        (SUBENTRY_CONVERSATION, SUBENTRY_AI_TASK),
        lambda subentry: [AgentSpeedSensor(entry, subentry, d) for d in AGENT_SENSORS],
    )


def gateway_sensors(
    entry: VoiceStackConfigEntry, gateway: GatewayCoordinator
) -> list[SensorEntity]:
    """Sensors of the gateway and of the two backends it probes."""
    gw_device = gateway_device_info(entry, gateway)
    entities: list[SensorEntity] = [
        GatewaySensor(gateway, entry, DEVICE_GATEWAY, d, gw_device) for d in GATEWAY_SENSORS
    ]
    for kind, descriptions in BACKEND_SENSORS.items():
        device = backend_device_info(entry, kind, gateway)
        entities += [GatewaySensor(gateway, entry, kind, d, device) for d in descriptions]
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
    """A figure of the auth proxy probe."""

    entity_description: ProxySensorDescription


class GatewaySensor(_DescribedSensor[GatewayCoordinator]):
    """A figure from the gateway's /health."""

    entity_description: GatewaySensorDescription


class AgentSpeedSensor(RestoreSensor):
    """A figure of an agent's latest reply, pushed by the agent over the dispatcher."""

    _attr_has_entity_name = True
    _attr_should_poll = False
    entity_description: AgentSensorDescription

    def __init__(
        self,
        entry: VoiceStackConfigEntry,
        subentry: ConfigSubentry,
        description: AgentSensorDescription,
    ) -> None:
        """Attach to the agent's own device (same identifiers and name as the agent entity)."""
        self.entity_description = description
        self._entry = entry
        self._subentry_id = subentry.subentry_id
        self._attr_unique_id = f"{subentry.subentry_id}_{description.key}"
        self._attr_device_info = agent_device_info(subentry)

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
    def _on_timings(self, subentry_id: str, timings: Timings) -> None:
        if subentry_id != self._subentry_id:
            return
        value = self.entity_description.value_fn(timings)
        if value is None:
            return  # e.g. no drafts in this reply: keep the last measured figure
        self._attr_native_value = value
        self.async_write_ha_state()
