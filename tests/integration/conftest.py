"""Fixtures of the integration suite (phcc, HA in-process), chained as HA core's are:

`server` (what the entry points at; a fake llama-server unless a module overrides it with a
real one) and `agents` -> `mock_config_entry` -> `platforms` -> `init_integration`.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import PropertyMock, patch

import pytest
from homeassistant.config_entries import ConfigEntryState
from homeassistant.const import Platform
from homeassistant.core import HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry
from pytest_homeassistant_custom_component.syrupy import HomeAssistantSnapshotExtension
from syrupy.assertion import SnapshotAssertion

# Import the integration before the hass fixture so phcc resolves custom_components.
from custom_components import voice_stack
from custom_components.voice_stack.const import (
    CONF_GATEWAY_URL,
    DEFAULT_CONVERSATION_NAME,
)
from tests.integration.helpers import agent, setup_entry, stack_entry
from tests.integration.live_stack import LiveStack, run_live_stack
from voice_stack_dev.fakes.integration import FAKE_KEY, FakeGateway, FakeLlama, FakeOllama
from voice_stack_dev.llama import LlamaServer, llama_argv
from voice_stack_dev.procs import free_port, http_status


@dataclass(frozen=True)
class Server:
    """Where an entry points: URL and the key Voice Stack sends."""

    url: str
    key: str

    @classmethod
    def of(cls, llama: LlamaServer) -> Server:
        """A real llama-server, reached directly with its own key."""
        return cls(llama.url, llama.api_key or "")


class RealLlama:
    """Base of a test class whose entry points at a real tiny llama-server, reached directly."""

    ctx_per_slot = 1024

    @pytest.fixture
    def llama(self, llama_factory: Any) -> LlamaServer:
        return llama_factory("tiny-text", ctx_per_slot=self.ctx_per_slot)

    @pytest.fixture
    def server(self, llama: LlamaServer) -> Server:
        return Server.of(llama)


class LoadingLlama:
    """A real llama-server that stays in its loading state until `loaded()` is called.

    Its model file is a FIFO that nothing writes: llama-server opens its HTTP side first, then
    blocks in open() on the model, answering every request meanwhile with 503 "Loading model",
    as it does while a large model loads. `loaded()` stops it and starts, on the same port and
    with the same key, a llama-server that has loaded its model (the load has "finished").
    """

    KEY = "loading-llama-key"

    def __init__(self, factory: Callable[..., LlamaServer], fifo: Path, logs: Path) -> None:
        """Start it held at loading (blocking; it answers once its port is open)."""
        self._factory = factory
        self.port = free_port()
        argv = llama_argv("tiny-text", self.port, api_key=self.KEY, ctx_per_slot=512)
        argv[argv.index("-m") + 1] = str(fifo)
        self.server = LlamaServer(
            name="llama-server (held loading)",
            argv=argv,
            port=self.port,
            log_path=logs / f"llama-loading-{self.port}.log",
            health_path=None,  # ready as soon as its port is open: /health stays 503
            api_key=self.KEY,
        ).start()
        assert http_status(f"{self.url}/health") == 503, self.server.log_tail()

    @property
    def url(self) -> str:
        return self.server.url

    def loaded(self) -> LlamaServer:
        """The load finished: the same URL and key now reach a ready llama-server."""
        self.server.stop()
        return self._factory("tiny-text", port=self.port, api_key=self.KEY, ctx_per_slot=512)


@pytest.fixture
def loading_llama(
    llama_factory: Callable[..., LlamaServer], service_logs: Path, tmp_path: Path
) -> Iterator[LoadingLlama]:
    """A real llama-server still loading its model (see LoadingLlama), stopped afterwards."""
    fifo = tmp_path / "model-being-loaded.gguf"
    os.mkfifo(fifo)
    loading = LoadingLlama(llama_factory, fifo, service_logs)
    yield loading
    loading.server.stop()


@pytest.fixture(autouse=True)
def auto_enable_custom_integrations(enable_custom_integrations: None) -> None:
    """Let HA load custom_components/voice_stack."""


@pytest.fixture(autouse=True)
def loopback_sockets(socket_enabled: None) -> None:
    """Every test here talks to servers on loopback (real ones, or a fake for faults)."""


@pytest.fixture(autouse=True)
async def finalize_generators(hass: HomeAssistant) -> AsyncIterator[None]:
    """Run the finalizers of abandoned async generators before HA checks for lingering tasks.

    When a stream fails, the openai SDK leaves its inner event generator suspended; only the
    garbage collector reaches it, and asyncio then closes it in a task of its own. Collecting
    here makes that happen at a fixed point instead of whenever the GC runs.
    """
    yield
    for _ in range(10):
        gc.collect()
        await asyncio.sleep(0)  # the finalizers' tasks start
        closing = [t for t in asyncio.all_tasks() if "athrow" in repr(t.get_coro())]
        if not closing:
            return
        await asyncio.wait(closing, timeout=5)


@pytest.fixture
async def fake() -> AsyncIterator[FakeLlama]:
    """A fake llama-server (faults a real one cannot show), stopped after the test."""
    server = await FakeLlama().start()
    yield server
    await server.stop()


@pytest.fixture
async def fake_gateway() -> AsyncIterator[FakeGateway]:
    """A fake gateway /health and /metrics with fixed figures."""
    server = await FakeGateway().start()
    yield server
    await server.stop()


@pytest.fixture
async def fake_ollama() -> AsyncIterator[FakeOllama]:
    """Ollama's identifying replies (the entry flow names it), stopped after the test."""
    server = await FakeOllama().start()
    yield server
    await server.stop()


@pytest.fixture(scope="session")
def live_stack(service_logs: Path) -> Iterator[LiveStack]:
    """llama-server behind nginx, the speech server and the gateway, once per session."""
    yield from run_live_stack(service_logs)


@pytest.fixture
def snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """Snapshots in HA core's format (registry entries, states, flows)."""
    return snapshot.use_extension(HomeAssistantSnapshotExtension)


@pytest.fixture
def entity_registry_enabled_by_default() -> Iterator[None]:
    """Every entity enabled, the ones disabled by default included (for snapshots)."""
    with patch(
        "homeassistant.helpers.entity.Entity.entity_registry_enabled_default",
        return_value=True,
        new_callable=PropertyMock,
    ):
        yield


@pytest.fixture
def server(fake: FakeLlama) -> Server:
    """The server the entry points at (modules with a real llama-server override this)."""
    return Server(fake.url, FAKE_KEY)


@pytest.fixture
def agents() -> list[dict[str, Any]]:
    """The entry's agent subentries: one conversation agent on slot 0."""
    return [agent(0, title=DEFAULT_CONVERSATION_NAME)]


@pytest.fixture
def gateway_url() -> str | None:
    """The entry's gateway option (none by default)."""
    return None


@pytest.fixture
def mock_config_entry(
    hass: HomeAssistant, server: Server, agents: list[dict[str, Any]], gateway_url: str | None
) -> MockConfigEntry:
    """The entry, as the config flow creates it, added to HA (not set up)."""
    for index, subentry in enumerate(agents):
        subentry.setdefault("subentry_id", f"agent{index}")
    return stack_entry(
        hass,
        server.url,
        server.key,
        *agents,
        entry_id="voicestacktestentry",
        title="fake-model on 127.0.0.1",
        options={CONF_GATEWAY_URL: gateway_url} if gateway_url else {},
    )


@pytest.fixture
def platforms() -> list[Platform]:
    """The platforms to load (a platform's own test module narrows it)."""
    return list(voice_stack.PLATFORMS)


@pytest.fixture
async def init_integration(
    hass: HomeAssistant,
    mock_config_entry: MockConfigEntry,
    platforms: list[Platform],
    monkeypatch: pytest.MonkeyPatch,
) -> MockConfigEntry:
    """The entry set up through HA, its first warm-up done."""
    monkeypatch.setattr(voice_stack, "PLATFORMS", platforms)
    await setup_entry(hass, mock_config_entry)
    assert mock_config_entry.state is ConfigEntryState.LOADED
    return mock_config_entry
