"""voice_stack_dev.fakes.speech as the benchmarks run it (its own process, paced, text tags),
behind a real gateway: a benchmark whose bookkeeping silently broke would report wrong figures."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator

import aiohttp
import pytest
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize

from voice_stack_dev.fakes.speech import held_ms, start_fake_speech, tag_text

from .conftest import GatewayFactory

TEXT = "Turn on the kitchen light please."


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    service = start_fake_speech(tmp_path_factory.mktemp("fake") / "fake.log")
    yield f"{service.url}/v1"
    service.stop()


async def first_audio(port: int, text: str) -> float:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        start = time.perf_counter()
        await client.write_event(Synthesize(text=text).event())
        while (event := await asyncio.wait_for(client.read_event(), 30)) is not None:
            if event.type == "audio-chunk":
                return (time.perf_counter() - start) * 1000
            assert event.type == "audio-start", event
    raise AssertionError("no audio")


async def direct_first_byte(session: aiohttp.ClientSession, url: str, text: str) -> float:
    start = time.perf_counter()
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
    async with session.post(f"{url}/audio/speech", json=body) as resp:
        await resp.content.readany()
        elapsed = (time.perf_counter() - start) * 1000
        await resp.read()
    return elapsed


async def test_held_time_is_recorded_per_tagged_request(
    paced: str, make_gateway: GatewayFactory
) -> None:
    gateway = await make_gateway(paced)
    direct_texts = [tag_text(TEXT, f"direct-{i}") for i in range(4)]
    ours_texts = [tag_text(TEXT, f"ours-{i}") for i in range(4)]
    async with aiohttp.ClientSession() as session:
        direct = await asyncio.gather(*(direct_first_byte(session, paced, t) for t in direct_texts))
        held_direct = await held_ms(session, paced, TEXT)
        await asyncio.gather(*(first_audio(gateway.port, t) for t in ours_texts))
        held_ours = await held_ms(session, paced, TEXT)
        assert await held_ms(session, paced, TEXT) == {}  # a read clears
        lengths = []  # the tag is neither spoken nor counted: as much audio as without it
        for text in (TEXT, direct_texts[0]):
            body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
            async with session.post(f"{paced}/audio/speech", json=body) as resp:
                lengths.append(len(await resp.read()))
        await held_ms(session, paced, TEXT)
    assert set(held_direct) == set(direct_texts)
    assert set(held_ours) == set(ours_texts)
    # the backend holds each request for its 150 ms first-byte delay, never less
    assert all(150 <= ms < 1000 for ms in [*held_direct.values(), *held_ours.values()])
    assert lengths[0] == lengths[1] == 100_800  # 6 words x 0.35 s x 24 kHz x 2 bytes
    transit = [d - held_direct[t] for d, t in zip(direct, direct_texts, strict=True)]
    assert 0 < statistics.median(transit) < 100


async def test_tags_pick_faults(paced: str) -> None:
    async with aiohttp.ClientSession() as session:
        body = {"model": "tts-1", "voice": "alloy", "input": "Fail [500]"}
        async with session.post(f"{paced}/audio/speech", json=body) as resp:
            assert resp.status == 500
        body = {"model": "tts-1", "voice": "alloy", "input": "Rate [22k]", "response_format": "pcm"}
        async with session.post(f"{paced}/audio/speech", json=body) as resp:
            data = await resp.read()
    assert resp.content_type == "audio/wav"
    assert int.from_bytes(data[24:28], "little") == 22050
