"""The auth-proxy poller: the proxy's status and key scope, whether it turns away a request
without the key, and llama-server itself behind the URL."""

from __future__ import annotations

import pytest
from homeassistant.core import HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry

from tests.integration.conftest import Server
from tests.integration.fakes import FakeLlama
from tests.integration.helpers import poll
from voice_stack_dev.llama import LlamaServer


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
