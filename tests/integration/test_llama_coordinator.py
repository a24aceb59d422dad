"""The llama-server poller: loading is up-but-not-ready, a rejected key starts reauth, hung or
failing endpoints make it unreachable, malformed replies never escape, devices follow /props."""

from __future__ import annotations

import pytest
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.update_coordinator import UpdateFailed
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import DOMAIN
from tests.integration.fakes import FakeLlama, metrics_text
from tests.integration.helpers import poll, setup_entry, stack_entry


async def test_figures_of_a_poll(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """Props, slots and counters arrive typed; rates need a second scrape."""
    fake.metrics = metrics_text(prompt=100, cached=50, predicted=40, seconds=2)
    fake.slots[1] = {
        "id": 1,
        "n_ctx": 4096,
        "is_processing": True,
        "id_task": 7,
        "n_prompt_tokens": 96,
    }
    await poll(hass, init_integration)
    data = init_integration.runtime_data.coordinators.llm.data
    assert (data.props.model_file, data.props.build, data.total_slots) == (
        "fake-model",
        "b1-fake",
        4,
    )  # type: ignore[union-attr]
    assert (data.slots.busy, data.slots.slot(1).id_task) == (1, 7)  # type: ignore[union-attr]
    assert data.counters.predicted_tokens == 40  # type: ignore[union-attr]
    assert (data.requests_processing, data.requests_deferred) == (0, 0)


async def test_loading_is_up_but_not_ready(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """503 "Loading model": reachable, loading; afterwards the device shows the new model."""
    entry = init_integration
    fake.overrides["/health"] = (
        503,
        '{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}',
    )
    await poll(hass, entry)
    llm = entry.runtime_data.coordinators.llm
    assert llm.reachable
    assert llm.data.loading
    del fake.overrides["/health"]
    fake.props = {**fake.props, "model_path": "/models/new-model.gguf", "build_info": "b2"}
    await poll(hass, entry)
    assert not llm.data.loading
    devices = dr.async_entries_for_config_entry(dr.async_get(hass), entry.entry_id)
    server = next(d for d in devices if (DOMAIN, f"{entry.entry_id}_llm_server") in d.identifiers)
    assert (server.model, server.sw_version) == ("new-model", "b2")


async def test_rejected_key_while_polling_starts_reauth(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    fake.overrides["/metrics"] = (401, "{}")
    await poll(hass, init_integration)
    flows = hass.config_entries.flow.async_progress_by_handler(DOMAIN)
    assert [f["context"]["source"] for f in flows] == ["reauth"]


async def test_hung_and_failing_endpoints(
    hass: HomeAssistant,
    init_integration: MockConfigEntry,
    fake: FakeLlama,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A /slots that hangs past the timeout, a 500 on /metrics: the poll fails, then recovers."""
    llm = init_integration.runtime_data.coordinators.llm
    monkeypatch.setattr("custom_components.voice_stack.coordinator.PROBE_TIMEOUT", 0.2)
    fake.delays["/slots"] = 2.0
    await poll(hass, init_integration)
    assert not llm.reachable
    assert llm.last_exception.translation_key == "probe_timeout"  # type: ignore[union-attr]
    fake.delays.clear()
    fake.overrides["/metrics"] = (500, "{}")
    await poll(hass, init_integration)
    assert not llm.last_update_success
    assert llm.last_exception.translation_key == "probe_status"  # type: ignore[union-attr]
    del fake.overrides["/metrics"]
    await poll(hass, init_integration)
    assert llm.last_update_success


async def test_malformed_replies(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    llm = init_integration.runtime_data.coordinators.llm
    fake.overrides["/slots"] = (200, '{"not": "a list"}')
    await poll(hass, init_integration)
    error = llm.last_exception
    assert isinstance(error, UpdateFailed)
    assert (error.translation_key, error.translation_placeholders) == (
        "slots_malformed",
        {"url": f"{fake.url}/slots"},
    )
    del fake.overrides["/slots"]
    fake.overrides["/props"] = (200, "[]")
    await poll(hass, init_integration)
    assert llm.last_exception.translation_key == "props_malformed"  # type: ignore[union-attr]


async def test_credentials_in_the_url_never_reach_the_log(
    hass: HomeAssistant, fake: FakeLlama, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry whose URL carries user:pass@ (basic auth): an outage is logged without them."""
    fake.key = None
    url = fake.url.replace("http://", "http://admin:S3cret-pass@")
    entry = stack_entry(hass, url, "")
    await setup_entry(hass, entry)
    await fake.stop()
    await poll(hass, entry)
    assert "Error fetching voice_stack llm_server data" in caplog.text
    assert "S3cret-pass" not in caplog.text
    assert "admin" not in caplog.text
