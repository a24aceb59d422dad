"""The pollers (coordinator.py). llama-server: loading is up-but-not-ready, a rejected key starts
reauth, hung or failing endpoints make it unreachable, malformed replies never escape, devices
follow /props. The auth proxy: its status and key scope, whether it turns away a request without
the key, and llama-server itself behind the URL. The gateway: its health, and the real speech
requests' times from /metrics."""

from __future__ import annotations

import pytest
from homeassistant.core import HomeAssistant
from homeassistant.helpers import device_registry as dr
from homeassistant.helpers.update_coordinator import UpdateFailed
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import DOMAIN
from tests.integration.conftest import Server
from tests.integration.helpers import poll, setup_entry, stack_entry
from voice_stack_dev.fakes.integration import FakeGateway, FakeLlama, metrics_text
from voice_stack_dev.llama import LlamaServer


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
    monkeypatch.setattr("custom_components.voice_stack.client.PROBE_TIMEOUT", 0.2)
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


async def test_status_and_key_scope(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    fake.proxy_status = {
        "service": "voice-stack-llm-auth",
        "reserved_slots": [0, 1],
        "total_slots": 4,
        "scoped_keys": True,
        "key_scope": "agent",
    }
    await poll(hass, init_integration)
    data = init_integration.runtime_data.coordinators.proxy.data
    assert data.status is not None
    assert (data.status.reserved_slots, data.status.key_scope) == ((0, 1), "agent")
    assert (data.open_without_key, data.open_with_wrong_key) == (False, False)


async def test_malformed_status_and_an_undecidable_door(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake: FakeLlama
) -> None:
    """A status that is not the proxy's is no status; a 404 neither refuses nor serves."""
    fake.proxy_status = {"reserved_slots": "0"}
    fake.overrides["/v1/models"] = (404, "{}")
    await poll(hass, init_integration)
    data = init_integration.runtime_data.coordinators.proxy.data
    assert data.status is None
    assert data.open_without_key is None


class TestDirect:
    @pytest.fixture
    def server(self, llama_text: LlamaServer) -> Server:
        return Server.of(llama_text)

    async def test_llama_server_itself(
        self, hass: HomeAssistant, init_integration: MockConfigEntry
    ) -> None:
        """Pointed at llama-server itself: no /proxy/status, reachable, keyed."""
        proxy = init_integration.runtime_data.coordinators.proxy
        assert proxy.reachable
        assert proxy.data.status is None
        assert proxy.data.lets_requests_through is False


@pytest.fixture
def gateway_url(fake_gateway: FakeGateway) -> str:
    return fake_gateway.url


async def test_speech_times_follow_the_gateway_s_own_requests(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake_gateway: FakeGateway
) -> None:
    """The mean over the requests since the last poll; the last figure while idle; none before
    the first request; a gateway restart starts over."""
    gateway = init_integration.runtime_data.coordinators.gateway
    assert gateway is not None
    assert (gateway.data.stt_ms, gateway.data.tts_ms) == (None, None)
    fake_gateway.latency = {"stt": (0.9, 3), "tts": (0.1, 1), "tts_stream": (0.1, 1)}
    await poll(hass, init_integration)
    assert gateway.data.stt_ms == pytest.approx(300.0)
    assert gateway.data.tts_ms == pytest.approx(100.0), "plain and streamed synthesis together"
    fake_gateway.latency = {"stt": (1.5, 4), "tts": (0.1, 1), "tts_stream": (0.1, 1)}
    await poll(hass, init_integration)
    assert gateway.data.stt_ms == pytest.approx(600.0)
    assert gateway.data.tts_ms == pytest.approx(100.0), "idle: the last figure stays"
    fake_gateway.latency = {"stt": (0.05, 1), "tts": (0.0, 0)}
    await poll(hass, init_integration)
    assert gateway.data.stt_ms == pytest.approx(50.0)


async def test_transcription_time_is_after_audio_stop_only(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake_gateway: FakeGateway
) -> None:
    """The turns the gateway ends itself (`stt_turn`, timed from the end of speech, with no
    audio-stop) stay out of the transcription time: it is what Home Assistant waited after
    audio-stop."""
    gateway = init_integration.runtime_data.coordinators.gateway
    assert gateway is not None
    fake_gateway.latency = {"stt_turn": (0.004, 4)}
    await poll(hass, init_integration)
    assert gateway.data.stt_ms is None
    fake_gateway.latency = {"stt": (0.8, 2), "stt_turn": (0.012, 12)}
    await poll(hass, init_integration)
    assert gateway.data.stt_ms == pytest.approx(400.0)


async def test_broken_replies(
    hass: HomeAssistant, init_integration: MockConfigEntry, fake_gateway: FakeGateway
) -> None:
    """A 500, then a body that is not the gateway's JSON: the poll fails with a clear reason."""
    gateway = init_integration.runtime_data.coordinators.gateway
    assert gateway is not None
    fake_gateway.health_status = 500
    await poll(hass, init_integration)
    assert gateway.last_exception.translation_key == "probe_status"  # type: ignore[union-attr]
    fake_gateway.health_status = 200
    fake_gateway.health = {"no": "status"}
    await poll(hass, init_integration)
    assert gateway.last_exception.translation_key == "probe_malformed"  # type: ignore[union-attr]
