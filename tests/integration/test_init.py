"""Setting an entry up and down: runtime data built once and complete, setup errors,
migration of one-slot agents to slot pools and of the throughput sensors' entity ids, removal."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from homeassistant.config_entries import SOURCE_REAUTH, ConfigEntry, ConfigEntryState
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers import entity_registry as er
from homeassistant.helpers import issue_registry as ir
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import (
    CONF_SLOT,
    CONF_SLOTS,
    CONF_URL,
    DEVICE_LLM,
    DOMAIN,
)
from tests.integration.conftest import LoadingLlama
from tests.integration.helpers import agent, issues, settle, setup_entry, stack_entry
from voice_stack_dev.fakes.integration import FakeLlama


async def test_runtime_data_is_complete(
    hass: HomeAssistant, init_integration: MockConfigEntry
) -> None:
    """Every part exists from the start (no optional fields, nothing filled in later)."""
    data = init_integration.runtime_data
    assert data.coordinators.llm.data is not None
    assert data.coordinators.proxy.data is not None
    assert data.coordinators.gateway is None  # none configured
    assert list(data.agents) == list(init_integration.subentries)
    assert data.primer.save_supported is None  # the agent does not save its slot
    assert await hass.config_entries.async_unload(init_integration.entry_id)
    assert init_integration.state is ConfigEntryState.NOT_LOADED


async def test_setup_with_a_rejected_key_starts_reauth(
    hass: HomeAssistant, fake: FakeLlama, mock_config_entry: MockConfigEntry
) -> None:
    fake.key = "another-key"
    await setup_entry(hass, mock_config_entry)
    assert mock_config_entry.state is ConfigEntryState.SETUP_ERROR
    flows = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    assert [f["context"]["source"] for f in flows] == [SOURCE_REAUTH]


async def test_setup_against_a_dead_server_retries(
    hass: HomeAssistant, fake: FakeLlama, mock_config_entry: MockConfigEntry
) -> None:
    await fake.stop()
    await setup_entry(hass, mock_config_entry)
    assert mock_config_entry.state is ConfigEntryState.SETUP_RETRY


async def test_setup_while_the_model_loads_retries_and_says_why(
    hass: HomeAssistant, loading_llama: LoadingLlama
) -> None:
    """A real llama-server still loading its model: setup is retried (not a half-made entry
    with every sensor unavailable), with the translated reason; once loaded, it sets up."""
    entry = stack_entry(hass, loading_llama.url, LoadingLlama.KEY, agent(0))
    await setup_entry(hass, entry)
    assert entry.state is ConfigEntryState.SETUP_RETRY
    assert entry.error_reason_translation_key == "model_loading_setup"
    assert entry.reason is not None
    assert "still loading its model" in entry.reason
    await hass.async_add_executor_job(loading_llama.loaded)
    await hass.config_entries.async_reload(entry.entry_id)
    await settle(hass)
    assert entry.state is ConfigEntryState.LOADED


async def test_one_slot_agents_become_slot_pools(hass: HomeAssistant, fake: FakeLlama) -> None:
    """Entries of version 1.1 keep their agents' slots, now as pools."""
    old: list[dict[str, Any]] = []
    for slot in (0, 2):
        raw = agent(slot)
        raw["data"] = {k: v for k, v in raw["data"].items() if k != CONF_SLOTS} | {CONF_SLOT: slot}
        old.append(raw)
    entry = stack_entry(hass, fake.url, fake.key, *old, minor_version=1)
    await setup_entry(hass, entry)
    assert entry.state is ConfigEntryState.LOADED
    assert entry.minor_version == 4
    assert [s.data[CONF_SLOTS] for s in entry.subentries.values()] == [[0], [2]]
    assert all(CONF_SLOT not in s.data for s in entry.subentries.values())
    assert [a.slots for a in entry.runtime_data.agents.values()] == [(0,), (2,)]


async def test_the_url_is_no_longer_the_unique_id(hass: HomeAssistant, fake: FakeLlama) -> None:
    """Entries of version 1.2 had their URL as unique id: 1.3 has none (duplicates are refused
    by URL in the flow instead)."""
    entry = stack_entry(hass, fake.url, fake.key, agent(0), minor_version=2, unique_id=fake.url)
    await setup_entry(hass, entry)
    assert entry.state is ConfigEntryState.LOADED
    assert (entry.minor_version, entry.unique_id) == (4, None)
    assert entry.data[CONF_URL] == fake.url


async def test_a_newer_entry_is_not_downgraded(hass: HomeAssistant, fake: FakeLlama) -> None:
    entry = stack_entry(hass, fake.url, fake.key, version=2)
    await setup_entry(hass, entry)
    assert entry.state is ConfigEntryState.MIGRATION_ERROR


async def test_a_newer_minor_version_loads_unchanged(hass: HomeAssistant, fake: FakeLlama) -> None:
    """1.5 would be written by a newer Voice Stack that stayed compatible: nothing to migrate."""
    entry = stack_entry(hass, fake.url, fake.key, agent(1), minor_version=5)
    await setup_entry(hass, entry)
    assert entry.state is ConfigEntryState.LOADED
    assert entry.minor_version == 5
    assert [s.data[CONF_SLOTS] for s in entry.subentries.values()] == [[1]]


GENERATION = "generation_throughput"
PROMPT = "prompt_throughput"


def old_throughput_sensors(
    hass: HomeAssistant, entry: ConfigEntry, name_by_user: str | None = None, **object_ids: str
) -> dict[str, str]:
    """Register the entry's LLM server device and its two throughput sensors as a Voice Stack
    before 1.4 left them (named "... load"), with these object ids (by key; the old default
    ones unless given); their unique ids by key."""
    devices = dr.async_get(hass)
    device = devices.async_get_or_create(
        config_entry_id=entry.entry_id,
        identifiers={(DOMAIN, f"{entry.entry_id}_{DEVICE_LLM}")},
        name="Voice Stack LLM server",
    )
    if name_by_user:
        devices.async_update_device(device.id, name_by_user=name_by_user)
    defaults = {GENERATION: "generation_load", PROMPT: "prompt_load"}
    unique_ids = {}
    for key, old in defaults.items():
        unique_ids[key] = f"{entry.entry_id}_{DEVICE_LLM}_{key}"
        er.async_get(hass).async_get_or_create(
            "sensor",
            DOMAIN,
            unique_ids[key],
            config_entry=entry,
            device_id=device.id,
            suggested_object_id=object_ids.get(key, f"voice_stack_llm_server_{old}"),
            original_name=old.replace("_", " ").capitalize(),
        )
    return unique_ids


def entity_ids(hass: HomeAssistant, unique_ids: dict[str, str]) -> dict[str, str | None]:
    """The sensors' entity ids now, by key."""
    registry = er.async_get(hass)
    return {k: registry.async_get_entity_id("sensor", DOMAIN, u) for k, u in unique_ids.items()}


async def test_throughput_sensors_get_the_ids_of_their_new_names(
    hass: HomeAssistant, fake: FakeLlama, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry of 1.3 made before "Generation load" and "Prompt load" became "... throughput":
    the ids HA made of the old names become those of the new ones (as the dashboard names
    them); the unique ids, and so the entities' history, stay."""
    caplog.set_level(logging.INFO)
    entry = stack_entry(hass, fake.url, fake.key, agent(0), minor_version=3)
    unique_ids = old_throughput_sensors(hass, entry)
    await setup_entry(hass, entry)
    assert entry.state is ConfigEntryState.LOADED
    assert entry.minor_version == 4
    assert entity_ids(hass, unique_ids) == {
        GENERATION: "sensor.voice_stack_llm_server_generation_throughput",
        PROMPT: "sensor.voice_stack_llm_server_prompt_throughput",
    }
    assert hass.states.get("sensor.voice_stack_llm_server_generation_throughput") is not None
    assert hass.states.get("sensor.voice_stack_llm_server_generation_load") is None
    assert (
        "Renamed sensor.voice_stack_llm_server_prompt_load to"
        " sensor.voice_stack_llm_server_prompt_throughput" in caplog.text
    )


@pytest.mark.parametrize(
    ("name_by_user", "old", "new"),
    [
        # A second entry's sensor, whose id HA suffixed because the first entry's had it.
        (None, "voice_stack_llm_server_generation_load_2", "voice_stack_llm_server_{}_2"),
        # The user renamed the device and let HA rename its entities' ids.
        ("GPU box", "gpu_box_generation_load", "gpu_box_{}"),
    ],
)
async def test_ids_made_of_the_device_name_follow(
    hass: HomeAssistant, fake: FakeLlama, name_by_user: str | None, old: str, new: str
) -> None:
    entry = stack_entry(hass, fake.url, fake.key, agent(0), minor_version=3)
    unique_ids = old_throughput_sensors(hass, entry, name_by_user, generation_throughput=old)
    await setup_entry(hass, entry)
    assert entity_ids(hass, unique_ids)[GENERATION] == f"sensor.{new.format(GENERATION)}"


async def test_a_customised_id_is_kept(hass: HomeAssistant, fake: FakeLlama) -> None:
    """An id the user chose is theirs (the other sensor's default one is still renamed)."""
    entry = stack_entry(hass, fake.url, fake.key, agent(0), minor_version=3)
    unique_ids = old_throughput_sensors(hass, entry, generation_throughput="gpu_generation_load")
    await setup_entry(hass, entry)
    assert entity_ids(hass, unique_ids) == {
        GENERATION: "sensor.gpu_generation_load",
        PROMPT: "sensor.voice_stack_llm_server_prompt_throughput",
    }


async def test_an_id_taken_by_another_entity_is_left_alone(
    hass: HomeAssistant, fake: FakeLlama, caplog: pytest.LogCaptureFixture
) -> None:
    """The new id belongs to someone else (here a template sensor): the old one stays."""
    caplog.set_level(logging.INFO)
    er.async_get(hass).async_get_or_create(
        "sensor",
        "template",
        "mine",
        suggested_object_id="voice_stack_llm_server_generation_throughput",
    )
    entry = stack_entry(hass, fake.url, fake.key, agent(0), minor_version=3)
    unique_ids = old_throughput_sensors(hass, entry)
    await setup_entry(hass, entry)
    assert entry.state is ConfigEntryState.LOADED
    assert entity_ids(hass, unique_ids) == {
        GENERATION: "sensor.voice_stack_llm_server_generation_load",
        PROMPT: "sensor.voice_stack_llm_server_prompt_throughput",
    }
    assert "sensor.voice_stack_llm_server_generation_throughput is taken" in caplog.text


async def test_an_entry_of_1_4_keeps_the_ids_it_has(hass: HomeAssistant, fake: FakeLlama) -> None:
    """The rename is the migration's, once: an id set back to the old one later stays."""
    entry = stack_entry(hass, fake.url, fake.key, agent(0))
    unique_ids = old_throughput_sensors(hass, entry)
    await setup_entry(hass, entry)
    assert entity_ids(hass, unique_ids) == {
        GENERATION: "sensor.voice_stack_llm_server_generation_load",
        PROMPT: "sensor.voice_stack_llm_server_prompt_load",
    }


async def test_removing_the_entry_removes_its_issues(hass: HomeAssistant, fake: FakeLlama) -> None:
    entry = stack_entry(hass, fake.url, fake.key, agent(0), agent(0))
    await setup_entry(hass, entry)
    assert issues(hass, entry) == {"shared_slot_0"}
    await hass.config_entries.async_remove(entry.entry_id)
    assert not [i for d, i in ir.async_get(hass).issues if d == DOMAIN]


def test_setup_and_unload_return_a_bool_while_ha_2026_10_is_supported() -> None:
    """HA 2026.10.4 has no async_unload_platforms_or_raise and wants a bool from setup and
    unload; 2026.11 has the method (the anchors' way). This fails on the first supported HA
    that differs, the moment to do as the anchors do."""
    from homeassistant.config_entries import ConfigEntries
    from homeassistant.const import MAJOR_VERSION, MINOR_VERSION

    has_it = hasattr(ConfigEntries, "async_unload_platforms_or_raise")
    assert has_it == ((MAJOR_VERSION, MINOR_VERSION) >= (2026, 11))
