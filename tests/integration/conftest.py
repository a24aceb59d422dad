"""Fixtures for the Home Assistant integration tests (phcc, HA in-process)."""

from __future__ import annotations

import pytest

# Import the integration before the hass fixture so phcc resolves custom_components.
from custom_components.voice_stack.const import DOMAIN  # noqa: F401


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations(enable_custom_integrations: None) -> None:
    """Let HA load custom_components/voice_stack."""
