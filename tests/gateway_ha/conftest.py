"""Real speech server + the gateway as a subprocess (gw venv), for HA's own wyoming client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from voice_stack_dev.paths import venv_bin
from voice_stack_dev.procs import Service, free_port


@pytest.fixture(scope="session")
def gateway_process(
    speech_server: Service, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Service, int]]:
    """voice-stack-gateway from the gw venv; yields (service on its HTTP port, Wyoming port)."""
    port, http_port = free_port(), free_port()
    backend = speech_server.url + "/v1"
    service = Service(
        name="voice-stack-gateway",
        argv=[
            str(venv_bin("gw", "voice-stack-gateway")),
            "--uri",
            f"tcp://127.0.0.1:{port}",
            "--http-uri",
            f"tcp://127.0.0.1:{http_port}",
        ],
        port=http_port,
        log_path=tmp_path_factory.mktemp("gateway") / "gateway.log",
        env={
            "STT_OPENAI_URL": backend,
            "TTS_OPENAI_URL": backend,
            "STT_STREAMING_MODELS": "tiny.en",
            "GATEWAY_TTS_OUTPUT_RATE": "22050",
        },
    )
    service.start()
    try:
        yield service, port
    finally:
        service.stop()
