"""Fixtures for the gateway suite (gw venv): the real speech server, an in-process gateway, a
fault-injecting fake backend and a small Wyoming client."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from wyoming.client import AsyncTcpClient
from wyoming.event import Event

from voice_stack_gateway.config import Settings, parse_settings
from voice_stack_gateway.gateway import Gateway

from .fake_backend import FakeBackend


def settings_for(stt_url: str, tts_url: str, **overrides: Any) -> Settings:
    base = parse_settings(
        [
            "--uri",
            "tcp://127.0.0.1:0",
            "--http-uri",
            "tcp://127.0.0.1:0",
            "--stt-openai-url",
            stt_url,
            "--tts-openai-url",
            tts_url,
        ],
        environ={},
    )
    return dataclasses.replace(base, **overrides)


GatewayFactory = Callable[..., Awaitable[Gateway]]


@pytest_asyncio.fixture
async def make_gateway() -> AsyncIterator[GatewayFactory]:
    """Start any number of in-process gateways; all are stopped afterwards."""
    started: list[Gateway] = []

    async def factory(stt_url: str, tts_url: str | None = None, **overrides: Any) -> Gateway:
        gateway = Gateway(settings_for(stt_url, tts_url or stt_url, **overrides))
        await gateway.start()
        started.append(gateway)
        return gateway

    yield factory
    for gateway in started:
        await gateway.stop()


@pytest_asyncio.fixture
async def fake_backend() -> AsyncIterator[FakeBackend]:
    backend = FakeBackend()
    await backend.start()
    yield backend
    await backend.stop()


class Client:
    """A Wyoming client with a read timeout on every event (tests never hang)."""

    def __init__(self, port: int) -> None:
        self._client = AsyncTcpClient("127.0.0.1", port)

    async def __aenter__(self) -> Client:
        await self._client.connect()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self._client.disconnect()

    async def send(self, *events: Event) -> None:
        for event in events:
            await self._client.write_event(event)

    async def read(self, limit: float = 15.0) -> Event | None:
        return await asyncio.wait_for(self._client.read_event(), limit)

    async def read_until(self, *types: str, limit: float = 30.0) -> list[Event]:
        """Events up to and including the first of `types` (or an error, or EOF)."""
        events: list[Event] = []
        while True:
            event = await self.read(limit)
            if event is None:
                return events
            events.append(event)
            if event.type in types or event.type == "error":
                return events


@pytest.fixture
def client() -> Callable[[Gateway], Client]:
    return lambda gateway: Client(gateway.port)


def audio_of(events: list[Event]) -> bytes:
    return b"".join(e.payload or b"" for e in events if e.type == "audio-chunk")


def first_error(events: list[Event]) -> Event:
    errors = [e for e in events if e.type == "error"]
    assert errors, f"expected an error event, got {[e.type for e in events]}"
    return errors[0]
