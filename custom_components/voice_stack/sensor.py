"""Speed and load sensors: per agent (pushed after every reply) and per service (polled), and
what each shows: one description type per data source, every field written out.

Two kinds of tokens/s figures, named apart on purpose: an agent's "Reply speed" and the
server's "Generation speed" are tokens per second *while generating*; the server's
"Generation throughput" and "Prompt throughput" are tokens per wall-clock second over the last
poll, idle time included, i.e. how much the server got through, not how fast it writes.
"""

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
from homeassistant.const import PERCENTAGE, EntityCategory, UnitOfTime
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers.dispatcher import async_dispatcher_connect
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback
from homeassistant.helpers.typing import StateType
from homeassistant.helpers.update_coordinator import DataUpdateCoordinator

from .agent import Agent
from .const import (
    DEVICE_ASR,
    DEVICE_GATEWAY,
    DEVICE_LLM,
    DEVICE_PROXY,
    DEVICE_TTS,
    SUBENTRY_AI_TASK,
    SUBENTRY_CONVERSATION,
)
from .coordinator import GatewayCoordinator, LlamaCoordinator, ProxyCoordinator
from .devices import (
    add_agent_entities,
    agent_device_info,
    backend_device_info,
    gateway_device_info,
    llm_device_info,
    proxy_device_info,
)
from .entity import VoiceStackServiceEntity
from .payloads import GatewayData, LlamaData, ProxyData
from .runtime import VoiceStackConfigEntry
from .timings import Timings, signal_timings

TOKENS_PER_SECOND: Final = "tokens/s"
TOKENS: Final = "tokens"
SERVER_STATES: Final = ["ready", "loading", "unreachable"]


@dataclass(frozen=True, kw_only=True)
class AgentSensorDescription(SensorEntityDescription):
    """A figure of the agent's latest reply."""

    value_fn: Callable[[Timings], float | None]


@dataclass(frozen=True, kw_only=True)
class LlamaSensorDescription(SensorEntityDescription):
    """A server-wide figure from llama-server's /metrics, /slots or /health."""

    value_fn: Callable[[LlamaData], StateType]


@dataclass(frozen=True, kw_only=True)
class ProxySensorDescription(SensorEntityDescription):
    """A figure from the auth proxy poll."""

    value_fn: Callable[[ProxyData], StateType]


@dataclass(frozen=True, kw_only=True)
class GatewaySensorDescription(SensorEntityDescription):
    """A figure from the gateway's poll, shown on the gateway's, the ASR's or the TTS's device."""

    device: str
    value_fn: Callable[[GatewayData], StateType]


AGENT_SENSORS: Final[tuple[AgentSensorDescription, ...]] = (
    AgentSensorDescription(
        key="generation_speed",
        translation_key="reply_speed",
        native_unit_of_measurement=TOKENS_PER_SECOND,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=1,
        value_fn=lambda t: t.generation_per_second,
    ),
    AgentSensorDescription(
        key="prompt_speed",
        translation_key="prompt_speed",
        native_unit_of_measurement=TOKENS_PER_SECOND,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=1,
        value_fn=lambda t: t.prompt_per_second,
    ),
    AgentSensorDescription(
        key="time_to_first_token",
        translation_key="time_to_first_token",
        native_unit_of_measurement=UnitOfTime.MILLISECONDS,
        device_class=SensorDeviceClass.DURATION,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda t: t.time_to_first_token_ms,
    ),
    AgentSensorDescription(
        key="prompt_cache_reuse",
        translation_key="prompt_cache_reuse",
        native_unit_of_measurement=PERCENTAGE,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda t: t.cache_reuse,
    ),
    AgentSensorDescription(
        key="draft_acceptance",
        translation_key="draft_acceptance",
        native_unit_of_measurement=PERCENTAGE,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        entity_registry_enabled_default=False,
        value_fn=lambda t: t.draft_acceptance,
    ),
)

LLAMA_SENSORS: Final[tuple[LlamaSensorDescription, ...]] = (
    LlamaSensorDescription(
        key="generation_speed",
        translation_key="generation_speed",
        native_unit_of_measurement=TOKENS_PER_SECOND,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=1,
        value_fn=lambda d: d.rates.generation_speed if d.rates else None,
    ),
    LlamaSensorDescription(
        key="prompt_speed",
        translation_key="prompt_speed",
        native_unit_of_measurement=TOKENS_PER_SECOND,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=1,
        entity_registry_enabled_default=False,
        value_fn=lambda d: d.rates.prompt_speed if d.rates else None,
    ),
    LlamaSensorDescription(
        key="generation_throughput",
        translation_key="generation_throughput",
        native_unit_of_measurement=TOKENS_PER_SECOND,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=1,
        value_fn=lambda d: d.rates.generation_throughput if d.rates else None,
    ),
    LlamaSensorDescription(
        key="prompt_throughput",
        translation_key="prompt_throughput",
        native_unit_of_measurement=TOKENS_PER_SECOND,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=1,
        value_fn=lambda d: d.rates.prompt_throughput if d.rates else None,
    ),
    LlamaSensorDescription(
        key="prompt_cache_reuse",
        translation_key="prompt_cache_reuse",
        native_unit_of_measurement=PERCENTAGE,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda d: d.rates.cache_reuse if d.rates else None,
    ),
    LlamaSensorDescription(
        key="draft_acceptance",
        translation_key="draft_acceptance",
        native_unit_of_measurement=PERCENTAGE,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        entity_registry_enabled_default=False,
        value_fn=lambda d: d.rates.draft_acceptance if d.rates else None,
    ),
    LlamaSensorDescription(
        key="requests_processing",
        translation_key="requests_processing",
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda d: d.requests_processing,
    ),
    LlamaSensorDescription(
        key="requests_deferred",
        translation_key="requests_deferred",
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        entity_registry_enabled_default=False,
        value_fn=lambda d: d.requests_deferred,
    ),
    LlamaSensorDescription(
        key="busy_slots",
        translation_key="busy_slots",
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda d: d.slots.busy if d.slots else None,
    ),
    LlamaSensorDescription(
        key="kv_cache_use",
        translation_key="kv_cache_use",
        native_unit_of_measurement=PERCENTAGE,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda d: d.slots.kv_use if d.slots else None,
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
        suggested_display_precision=0,
        value_fn=lambda d: d.slots.total if d.slots else None,
    ),
    LlamaSensorDescription(
        key="context_per_slot",
        translation_key="context_per_slot",
        native_unit_of_measurement=TOKENS,
        entity_category=EntityCategory.DIAGNOSTIC,
        suggested_display_precision=0,
        value_fn=lambda d: d.slots.context_per_slot if d.slots else None,
    ),
    LlamaSensorDescription(
        key="response_time",
        translation_key="health_check_time",
        native_unit_of_measurement=UnitOfTime.MILLISECONDS,
        device_class=SensorDeviceClass.DURATION,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        entity_category=EntityCategory.DIAGNOSTIC,
        entity_registry_enabled_default=False,
        value_fn=lambda d: d.latency_ms,
    ),
)

SERVER_STATE: Final = SensorEntityDescription(
    key="server_state",
    translation_key="server_state",
    device_class=SensorDeviceClass.ENUM,
    options=SERVER_STATES,
    entity_category=EntityCategory.DIAGNOSTIC,
)

PROXY_SENSORS: Final[tuple[ProxySensorDescription, ...]] = (
    ProxySensorDescription(
        key="response_time",
        translation_key="health_check_time",
        native_unit_of_measurement=UnitOfTime.MILLISECONDS,
        device_class=SensorDeviceClass.DURATION,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        entity_category=EntityCategory.DIAGNOSTIC,
        entity_registry_enabled_default=False,
        value_fn=lambda d: d.latency_ms,
    ),
)


def _probe_ms(kind: str) -> Callable[[GatewayData], StateType]:
    return lambda d: b.latency_ms if (b := d.health.backend(kind)) else None


GATEWAY_SENSORS: Final[tuple[GatewaySensorDescription, ...]] = (
    GatewaySensorDescription(
        key="active_sessions",
        translation_key="active_sessions",
        device=DEVICE_GATEWAY,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda d: d.health.active_sessions,
    ),
    GatewaySensorDescription(
        key="transcription_time",
        translation_key="transcription_time",
        device=DEVICE_ASR,
        native_unit_of_measurement=UnitOfTime.MILLISECONDS,
        device_class=SensorDeviceClass.DURATION,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda d: d.stt_ms,
    ),
    GatewaySensorDescription(
        key="time_to_first_audio",
        translation_key="time_to_first_audio",
        device=DEVICE_TTS,
        native_unit_of_measurement=UnitOfTime.MILLISECONDS,
        device_class=SensorDeviceClass.DURATION,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=0,
        value_fn=lambda d: d.tts_ms,
    ),
    *(
        GatewaySensorDescription(
            key="response_time",
            translation_key="health_check_time",
            device=kind,
            native_unit_of_measurement=UnitOfTime.MILLISECONDS,
            device_class=SensorDeviceClass.DURATION,
            state_class=SensorStateClass.MEASUREMENT,
            suggested_display_precision=0,
            entity_category=EntityCategory.DIAGNOSTIC,
            entity_registry_enabled_default=False,
            value_fn=_probe_ms(kind),
        )
        for kind in (DEVICE_ASR, DEVICE_TTS)
    ),
)


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
