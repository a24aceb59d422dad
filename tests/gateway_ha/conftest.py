"""Real speech server + the gateway as a subprocess (gw venv), for HA's own wyoming client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from voice_stack_dev.gateway import start_gateway
from voice_stack_dev.procs import Service, free_port


@pytest.fixture(scope="session")
def gateway_process(
    speech_server: Service, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Service, int]]:
    """voice-stack-gateway from the gw venv; yields (service on its HTTP port, Wyoming port)."""
    port = free_port()
    service = start_gateway(
        speech_server.url,
        tmp_path_factory.mktemp("gateway") / "gateway.log",
        port=port,
        # high eagerness: a complete request ends after 400 ms of quiet, inside HA's 0.7 s
        # hold, so the satellite test can tell the gateway's end of turn from HA's
        env={
            "STT_STREAMING_MODELS": "tiny.en",
            "GATEWAY_TTS_OUTPUT_RATE": "22050",
            "STT_EAGERNESS": "high",
        },
    )
    try:
        yield service, port
    finally:
        service.stop()
