"""Fixtures for the gateway suite (gw venv): the real speech server (from tests/conftest.py),
in-process gateways, the shared fault-injecting speech fake and a small Wyoming client."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.tts import Synthesize

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_gateway.config import Settings, parse_settings
from voice_stack_gateway.gateway import Gateway


def settings_for(stt_url: str, tts_url: str, **overrides: Any) -> Settings:
    base = parse_settings(
        ["--uri", "tcp://127.0.0.1:0", "--http-uri", "tcp://127.0.0.1:0",
         "--stt-openai-url", stt_url, "--tts-openai-url", tts_url],
        environ={},
    )  # fmt: skip
    return dataclasses.replace(base, **overrides)


GatewayFactory = Callable[..., Awaitable[Gateway]]


@pytest_asyncio.fixture
async def make_gateway() -> AsyncIterator[GatewayFactory]:
    """Start any number of in-process gateways; all are stopped afterwards. Each has refreshed
    its catalog from the backends once (pass `refreshed=False` not to wait)."""
    started: list[Gateway] = []

    async def factory(
        stt_url: str, tts_url: str | None = None, *, refreshed: bool = True, **overrides: Any
    ) -> Gateway:
        gateway = Gateway(settings_for(stt_url, tts_url or stt_url, **overrides))
        await gateway.start()
        started.append(gateway)
        if refreshed:
            await asyncio.wait_for(gateway.catalog.refreshed.wait(), 30)
        return gateway

    yield factory
    for gateway in started:
        await gateway.stop()


@pytest_asyncio.fixture
async def fake_speech() -> AsyncIterator[FakeSpeech]:
    fake = await FakeSpeech().start()
    yield fake
    await fake.stop()


async def speech_pcm(speech_server_url: str, text: str) -> bytes:
    """Piper speaking `text`, as 16 kHz 16-bit mono PCM (from the real speech server)."""
    body = {"input": text, "response_format": "pcm", "sample_rate": 16000}
    url = f"{speech_server_url}/v1/audio/speech"
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.read()


def silence(seconds: float, rate: int = 16000) -> bytes:
    return bytes(2 * int(seconds * rate))


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


Clients = Callable[[Gateway], Client]


@pytest.fixture
def client() -> Clients:
    return lambda gateway: Client(gateway.port)


def audio_of(events: list[Event]) -> bytes:
    return b"".join(e.payload or b"" for e in events if e.type == "audio-chunk")


def first_error(events: list[Event]) -> Event:
    errors = [e for e in events if e.type == "error"]
    assert errors, f"expected an error event, got {[e.type for e in events]}"
    return errors[0]


async def tts_events(c: Client, text: str = "Hello there.") -> list[Event]:
    """One plain synthesis, answered up to its audio-stop (or an error)."""
    await c.send(Synthesize(text=text).event())
    return await c.read_until("audio-stop")


async def stt_events(c: Client, pcm: bytes | None = None, rate: int = 16000) -> list[Event]:
    """One utterance (a second of quiet by default), answered up to its transcript."""
    pcm = b"\x01\x00" * rate if pcm is None else pcm
    await c.send(
        AudioStart(rate, 2, 1).event(), AudioChunk(rate, 2, 1, pcm).event(), AudioStop().event()
    )
    return await c.read_until("transcript-stop", "transcript")


async def wait_for(condition: Callable[[], bool], limit: float = 10.0) -> None:
    """Until `condition()` holds (checked every 20 ms), failing after `limit` seconds."""
    async with asyncio.timeout(limit):
        while not condition():  # noqa: ASYNC110 - polling state another task changes
            await asyncio.sleep(0.02)
