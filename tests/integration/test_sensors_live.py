"""Speed and health entities against the real stack: llama-server behind the nginx proxy,
the speech server and the gateway. Services are stopped and started again to flip health."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from homeassistant.components import conversation
from homeassistant.config_entries import ConfigEntry, ConfigEntryState
from homeassistant.const import STATE_OFF, STATE_ON, STATE_UNAVAILABLE, STATE_UNKNOWN
from homeassistant.core import Context, HomeAssistant
from homeassistant.data_entry_flow import FlowResultType
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers import entity_registry as er
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.components.diagnostics import (
    get_diagnostics_for_config_entry,
)
from syrupy.assertion import SnapshotAssertion
from syrupy.filters import props

from custom_components.voice_stack.const import (
    CONF_API_KEY,
    CONF_GATEWAY_URL,
    CONF_URL,
    DEFAULT_CONVERSATION_NAME,
    DOMAIN,
)

from .agent_helpers import agent
from .stack_fixtures import (
    PROXY_KEY,
    LiveStack,
    coordinators_of,
    run_live_stack,
    setup_stack_entry,
    wait_gateway,
)

pytestmark = pytest.mark.usefixtures("socket_enabled")


@pytest.fixture(scope="module")
def live_stack(service_logs: Path) -> Iterator[LiveStack]:
    """llama-server behind nginx, the speech server and the gateway, once for this module."""
    yield from run_live_stack(service_logs)


LLM = "binary_sensor.voice_stack_llm_server_connectivity"
PROXY = "binary_sensor.voice_stack_auth_proxy_connectivity"
OPEN = "binary_sensor.voice_stack_auth_proxy_accepts_requests_without_key"
GATEWAY = "binary_sensor.voice_stack_gateway_connectivity"
ASR = "binary_sensor.voice_stack_speech_to_text_connectivity"
TTS = "binary_sensor.voice_stack_text_to_speech_connectivity"
STATE = "sensor.voice_stack_llm_server_status"
AGENT = "sensor.voice_stack_conversation"
BACKEND_HISTORY = {"last_error", "last_error_at", "last_success"}  # depend on earlier tests
DASHBOARD = Path(__file__).parents[2] / "dashboards" / "voice_stack.yaml"
ENTITY_ID = re.compile(r"^(sensor|binary_sensor)\.[a-z0-9_]+$")


def _state(hass: HomeAssistant, entity_id: str) -> str:
    state = hass.states.get(entity_id)
    assert state is not None, f"{entity_id} does not exist"
    return state.state


def _number(hass: HomeAssistant, entity_id: str) -> float:
    return float(_state(hass, entity_id))


def _backend(health: dict[str, Any], name: str) -> str:
    return str(health["backends"][name]["status"])


async def _refresh(hass: HomeAssistant, entry: ConfigEntry) -> None:
    for coordinator in coordinators_of(entry).all():
        await coordinator.async_refresh()
    await hass.async_block_till_done()


async def _setup_live(
    hass: HomeAssistant, live_stack: LiveStack, *, with_agent: bool = True
) -> ConfigEntry:
    """An entry for the whole live stack (through the proxy, with the gateway), loaded."""
    agents = [agent(0, title=DEFAULT_CONVERSATION_NAME)] if with_agent else []
    return await setup_stack_entry(
        hass, live_stack.proxy.url, PROXY_KEY, live_stack.gateway_url, agents
    )


async def test_flows_set_up_live_health_entities(
    hass: HomeAssistant, live_stack: LiveStack
) -> None:
    """Configured through the real config and options flows, every service shows up as on."""
    assert await async_setup_component(hass, "homeassistant", {})
    result = await hass.config_entries.flow.async_init(DOMAIN, context={"source": "user"})
    assert result["type"] is FlowResultType.FORM
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"],
        {
            CONF_URL: live_stack.proxy.url,
            CONF_API_KEY: PROXY_KEY,
            CONF_GATEWAY_URL: "http://127.0.0.1:9",
        },
    )
    assert result["type"] is FlowResultType.FORM
    assert result["errors"] == {CONF_GATEWAY_URL: "gateway_cannot_connect"}
    result = await hass.config_entries.flow.async_configure(
        result["flow_id"],
        {
            CONF_URL: live_stack.proxy.url,
            CONF_API_KEY: PROXY_KEY,
            CONF_GATEWAY_URL: live_stack.gateway_url + "/health",
        },
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    entry = result["result"]
    assert entry.options == {CONF_GATEWAY_URL: live_stack.gateway_url}
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED

    for entity_id in (LLM, PROXY, GATEWAY, ASR, TTS):
        assert _state(hass, entity_id) == STATE_ON, entity_id
    assert _state(hass, OPEN) == STATE_OFF
    assert _state(hass, STATE) == "ready"
    assert _number(hass, "sensor.voice_stack_llm_server_slots") == 4
    assert _number(hass, "sensor.voice_stack_llm_server_busy_slots") <= 1  # the agent may warm

    # The options flow refuses a URL that is not http(s), clears the gateway (its entities and
    # devices go away with the reload), and sets it again.
    result = await hass.config_entries.options.async_init(entry.entry_id)
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {CONF_GATEWAY_URL: "ftp://gateway"}
    )
    assert result["errors"] == {CONF_GATEWAY_URL: "invalid_url"}
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {CONF_GATEWAY_URL: ""}
    )
    assert result["type"] is FlowResultType.CREATE_ENTRY
    await hass.async_block_till_done()
    assert CONF_GATEWAY_URL not in entry.options
    assert coordinators_of(entry).gateway is None
    assert hass.states.get(GATEWAY) is None
    names = {d.name for d in dr.async_entries_for_config_entry(dr.async_get(hass), entry.entry_id)}
    assert "Voice Stack gateway" not in names
    result = await hass.config_entries.options.async_init(entry.entry_id)
    result = await hass.config_entries.options.async_configure(
        result["flow_id"], {CONF_GATEWAY_URL: live_stack.gateway_url}
    )
    await hass.async_block_till_done()
    assert _state(hass, GATEWAY) == STATE_ON


async def test_speed_sensors_after_a_conversation_turn(
    hass: HomeAssistant, live_stack: LiveStack
) -> None:
    """A real reply pushes the agent's speed sensors; the next poll shows server throughput."""
    entry = await _setup_live(hass, live_stack)
    assert _state(hass, f"{AGENT}_generation_speed") == STATE_UNKNOWN

    agent_id = next(
        e.entity_id
        for e in hass.states.async_all("conversation")
        if e.entity_id != "conversation.home_assistant"
    )
    result = await conversation.async_converse(hass, "hello", None, Context(), agent_id=agent_id)
    assert result.response.speech["plain"]["speech"] == "Hello from the tiny test model."
    await hass.async_block_till_done()

    assert _number(hass, f"{AGENT}_generation_speed") > 0
    assert _number(hass, f"{AGENT}_prompt_speed") > 0
    assert _number(hass, f"{AGENT}_time_to_first_token") > 0
    assert 0 <= _number(hass, f"{AGENT}_prompt_cache_reuse") <= 100

    await _refresh(hass, entry)
    server = "sensor.voice_stack_llm_server"
    assert _number(hass, f"{server}_generation_throughput") > 0
    assert _number(hass, f"{server}_prompt_throughput") > 0
    assert _number(hass, f"{server}_generation_speed") > 0
    assert 0 <= _number(hass, f"{server}_prompt_cache_reuse") <= 100
    assert _number(hass, f"{server}_kv_cache_use") > 0
    assert _number(hass, f"{server}_requests_processing") >= 0  # window average
    attributes = hass.states.get(f"{server}_generation_throughput")
    assert attributes is not None
    assert attributes.attributes["unit_of_measurement"] == "tokens/s"
    assert attributes.attributes["state_class"] == "measurement"

    # Another window: the speed stays a measured figure, never a gap.
    await _refresh(hass, entry)
    assert _number(hass, f"{server}_generation_throughput") >= 0
    assert _number(hass, f"{server}_generation_speed") > 0


async def test_health_flips_when_services_stop_and_recovers(
    hass: HomeAssistant, live_stack: LiveStack, caplog: pytest.LogCaptureFixture
) -> None:
    """Stop each service: its entity flips, dependants go unavailable, one log line each way."""
    entry = await _setup_live(hass, live_stack, with_agent=False)
    caplog.set_level(logging.INFO)

    await hass.async_add_executor_job(live_stack.llama.stop)
    await _refresh(hass, entry)
    await _refresh(hass, entry)
    assert _state(hass, LLM) == STATE_OFF
    assert _state(hass, STATE) == "unreachable"
    assert _state(hass, "sensor.voice_stack_llm_server_busy_slots") == STATE_UNAVAILABLE
    assert _state(hass, PROXY) == STATE_ON  # nginx itself still answers
    assert caplog.text.count("Error fetching voice_stack llm_server data") == 1
    assert "/health answered with HTTP 502" in caplog.text  # nginx: upstream gone

    await hass.async_add_executor_job(live_stack.llama.start)
    await _refresh(hass, entry)
    assert _state(hass, LLM) == STATE_ON
    assert _state(hass, STATE) == "ready"
    assert _number(hass, "sensor.voice_stack_llm_server_busy_slots") == 0
    assert caplog.text.count("Fetching voice_stack llm_server data recovered") == 1

    await hass.async_add_executor_job(live_stack.speech.stop)
    await wait_gateway(
        hass, live_stack.gateway_url, lambda h: h["backends"]["asr"]["status"] == "down"
    )
    await _refresh(hass, entry)
    assert (_state(hass, ASR), _state(hass, TTS), _state(hass, GATEWAY)) == (
        STATE_OFF,
        STATE_OFF,
        STATE_ON,
    )
    asr = hass.states.get(ASR)
    assert asr is not None
    assert "ASR" in str(asr.attributes["last_error"])

    await hass.async_add_executor_job(live_stack.gateway.stop)
    await _refresh(hass, entry)
    assert _state(hass, GATEWAY) == STATE_OFF
    assert _state(hass, ASR) == STATE_UNAVAILABLE  # unknown without the gateway's probe
    assert _state(hass, "sensor.voice_stack_gateway_active_sessions") == STATE_UNAVAILABLE

    await hass.async_add_executor_job(live_stack.speech.start)
    await hass.async_add_executor_job(live_stack.gateway.start)
    await wait_gateway(
        hass, live_stack.gateway_url, lambda h: h["backends"]["tts"]["status"] == "ok"
    )
    await _refresh(hass, entry)
    assert (_state(hass, ASR), _state(hass, TTS), _state(hass, GATEWAY)) == (
        STATE_ON,
        STATE_ON,
        STATE_ON,
    )

    await hass.async_add_executor_job(live_stack.proxy.stop)
    await _refresh(hass, entry)
    assert (_state(hass, PROXY), _state(hass, LLM), _state(hass, OPEN)) == (
        STATE_OFF,
        STATE_OFF,
        STATE_UNAVAILABLE,
    )
    await hass.async_add_executor_job(live_stack.proxy.start)
    await _refresh(hass, entry)
    assert (_state(hass, PROXY), _state(hass, LLM)) == (STATE_ON, STATE_ON)


def _dashboard_entities(node: Any) -> set[str]:
    """Every entity id the dashboard YAML mentions, wherever it sits in the cards."""
    if isinstance(node, dict):
        return set().union(*(_dashboard_entities(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_dashboard_entities(v) for v in node))
    return {node} if isinstance(node, str) and ENTITY_ID.match(node) else set()


async def test_dashboard_references_only_created_entities(
    hass: HomeAssistant, live_stack: LiveStack
) -> None:
    """Each entity of dashboards/voice_stack.yaml exists, is enabled and has a state."""
    referenced = _dashboard_entities(yaml.safe_load(DASHBOARD.read_text()))
    assert len(referenced) >= 15
    entry = await _setup_live(hass, live_stack)
    registry = er.async_get(hass)
    created = {e.entity_id for e in er.async_entries_for_config_entry(registry, entry.entry_id)}
    assert referenced <= created, sorted(referenced - created)
    for entity_id in referenced:
        assert hass.states.get(entity_id) is not None, f"{entity_id} is disabled by default"


def _volatile(value: Any) -> Any:
    """Numbers and URLs differ between runs (speeds, ports): keep only their kind."""
    if isinstance(value, str) and value.startswith("http://127.0.0.1:"):
        return "<loopback url>"
    if isinstance(value, datetime):
        return "<time>"
    try:
        float(value)
    except TypeError, ValueError:
        return value
    return "<number>"


async def test_entities_and_devices_snapshot(
    hass: HomeAssistant, live_stack: LiveStack, snapshot: SnapshotAssertion
) -> None:
    """Registry entries, states and devices of every sensor and binary sensor (all enabled)."""
    entry = await _setup_live(hass, live_stack)
    registry = er.async_get(hass)
    disabled = set()
    for entity in er.async_entries_for_config_entry(registry, entry.entry_id):
        if entity.disabled_by is not None:
            disabled.add(entity.entity_id)
            registry.async_update_entity(entity.entity_id, disabled_by=None)
    await hass.config_entries.async_reload(entry.entry_id)
    await hass.async_block_till_done()

    entities = sorted(
        (e for e in er.async_entries_for_config_entry(registry, entry.entry_id)
         if e.domain in ("sensor", "binary_sensor")),
        key=lambda e: e.entity_id,
    )  # fmt: skip
    for entity in entities:
        state = hass.states.get(entity.entity_id)
        assert state is not None, entity.entity_id
        assert {
            "unique_id": entity.unique_id.replace(entry.entry_id, "<entry>").replace(
                next(iter(entry.subentries)), "<agent>"
            ),
            "translation_key": entity.translation_key,
            "original_device_class": entity.original_device_class,
            "entity_category": entity.entity_category,
            "disabled_by_default": entity.entity_id in disabled,
            "unit": entity.unit_of_measurement,
            "state": _volatile(state.state),
            "attributes": {
                k: _volatile(v) for k, v in state.attributes.items() if k not in BACKEND_HISTORY
            },
        } == snapshot(name=entity.entity_id)

    devices = dr.async_entries_for_config_entry(dr.async_get(hass), entry.entry_id)
    assert sorted(
        (
            {
                "name": d.name,
                "manufacturer": d.manufacturer,
                "model": d.model,
                "sw_version": d.sw_version,
                "configuration_url": _volatile(d.configuration_url),
                "entry_type": d.entry_type,
            }
            for d in devices
        ),
        key=lambda d: str(d["name"]),
    ) == snapshot(name="devices")


async def test_health_diagnostics(
    hass: HomeAssistant, live_stack: LiveStack, hass_client: Any, snapshot: SnapshotAssertion
) -> None:
    """Diagnostics carry what every poller last saw, and never the key."""
    entry = await _setup_live(hass, live_stack, with_agent=False)
    diag = await get_diagnostics_for_config_entry(hass, hass_client, entry)
    assert PROXY_KEY not in str(diag)
    health = diag["health"]
    assert health["llm_server"]["data"]["slots"]["total"] == 4
    assert health["auth_proxy"]["data"]["open_without_key"] is False
    assert health["gateway"]["data"]["asr"]["status"] == "ok"
    volatile = props(
        "latency_ms",
        "at",
        "uptime_s",
        "last_success",
        "last_error",
        "last_error_at",
        "url",
        "kv_used_tokens",
        "prompt_tokens",
        "prompt_cached",
        "prompt_seconds",
        "predicted_tokens",
        "predicted_seconds",
        "requests_processing",
        "busy",
    )
    assert health == snapshot(exclude=volatile)
