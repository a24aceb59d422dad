"""Fixtures for the Home Assistant integration tests (phcc, HA in-process)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

# Import the integration before the hass fixture so phcc resolves custom_components.
from custom_components.voice_stack.const import DOMAIN  # noqa: F401
from tests.integration.fake_llama import FakeLlama


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations(enable_custom_integrations: None) -> None:
    """Let HA load custom_components/voice_stack."""


@pytest.fixture
async def fake() -> AsyncIterator[FakeLlama]:
    """A fake llama-server on loopback (faults a real one cannot show), stopped after the test."""
    server = await FakeLlama().start()
    yield server
    await server.stop()
