"""Fixtures shared by every suite: real servers started on free loopback ports, always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from voice_stack_dev.llama import LlamaServer, start_llama
from voice_stack_dev.procs import Service
from voice_stack_dev.service_logs import (  # noqa: F401 - a hook and a fixture, found by name
    pytest_collection_modifyitems,
    service_logs_fixture,
)
from voice_stack_dev.speech_server import start_speech_server


@pytest.fixture
def llama_factory(service_logs: Path) -> Iterator[Callable[..., LlamaServer]]:
    """Start llama-servers with any options; each is stopped when the test ends."""
    started: list[LlamaServer] = []

    def factory(model: str = "tiny-text", **kwargs: Any) -> LlamaServer:
        kwargs.setdefault("log_dir", service_logs)
        server = start_llama(model, **kwargs)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()


def _session_llama(service_logs: Path, model: str, **kwargs: Any) -> Iterator[LlamaServer]:
    server = start_llama(model, log_dir=service_logs, **kwargs)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_text(service_logs: Path) -> Iterator[LlamaServer]:
    """Tiny deterministic model: always answers "Hello from the tiny test model."."""
    yield from _session_llama(service_logs, "tiny-text")


@pytest.fixture(scope="session")
def llama_tool(service_logs: Path) -> Iterator[LlamaServer]:
    """Tiny deterministic model that calls get_time, then answers once it has the result."""
    yield from _session_llama(service_logs, "tiny-tool")


@pytest.fixture(scope="session")
def llama_smollm2(service_logs: Path) -> Iterator[LlamaServer]:
    """SmolLM2-135M-Instruct (Q4_1): a real small instruct model."""
    yield from _session_llama(service_logs, "smollm2", ctx_per_slot=4096)


@pytest.fixture(scope="session")
def speech_server(service_logs: Path) -> Iterator[Service]:
    """The local OpenAI-compatible speech server: Piper (joe) TTS and faster-whisper tiny.en."""
    service = start_speech_server(log_dir=service_logs)
    try:
        yield service
    finally:
        service.stop()
