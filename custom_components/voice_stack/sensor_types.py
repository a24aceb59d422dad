"""What each sensor shows: one description type per data source, every field written out.

Two kinds of speed figures, named apart on purpose: an agent's "Reply speed" and the
server's "Generation speed" are tokens per second *while generating*; the server's
"Generation load" and "Prompt load" are tokens per wall-clock second over the last poll,
idle time included, i.e. how busy the server is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from homeassistant.components.sensor import (
    SensorDeviceClass,
    SensorEntityDescription,
    SensorStateClass,
)
from homeassistant.const import PERCENTAGE, EntityCategory, UnitOfTime
from homeassistant.helpers.typing import StateType

from .const import DEVICE_ASR, DEVICE_GATEWAY, DEVICE_TTS
from .llama_data import LlamaData
from .service_data import GatewayData, ProxyData
from .timings import Timings

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
        translation_key="generation_load",
        native_unit_of_measurement=TOKENS_PER_SECOND,
        state_class=SensorStateClass.MEASUREMENT,
        suggested_display_precision=1,
        value_fn=lambda d: d.rates.generation_throughput if d.rates else None,
    ),
    LlamaSensorDescription(
        key="prompt_throughput",
        translation_key="prompt_load",
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
