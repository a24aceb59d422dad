"""32 concurrent sessions (plain TTS, streaming TTS, STT) all complete without errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from voice_stack_gateway.gateway import Gateway

from .conftest import Client, GatewayFactory, audio_of
from .fake_backend import FakeBackend


async def one_session(c: Client, n: int) -> str:
    kind = n % 3
    if kind == 0:
        await c.send(Synthesize(text=f"Session {n} says hello.").event())
        events = await c.read_until("audio-stop")
        assert audio_of(events)
    elif kind == 1:
        await c.send(SynthesizeStart().event())
        for word in f"Session {n} streams. Two sentences here.".split(" "):
            await c.send(SynthesizeChunk(text=word + " ").event())
        await c.send(SynthesizeStop().event())
        events = await c.read_until("synthesize-stopped")
        assert audio_of(events)
    else:
        await c.send(AudioStart(16000, 2, 1).event())
        for _ in range(10):
            await c.send(AudioChunk(16000, 2, 1, b"\x02\x00" * 1600).event())
        await c.send(AudioStop().event())
        events = await c.read_until("transcript")
    return events[-1].type


async def test_32_concurrent_sessions(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Callable[[Gateway], Client]
) -> None:
    fake_backend.delay = 0.05
    gw = await make_gateway(fake_backend.url)

    async def run(n: int) -> str:
        async with client(gw) as c:
            return await one_session(c, n)

    results = await asyncio.gather(*(run(n) for n in range(32)))
    assert sorted(set(results)) == ["audio-stop", "synthesize-stopped", "transcript"]
    assert not gw.metrics.errors
    assert (
        gw.metrics.requests["tts"] + gw.metrics.requests["tts_stream"] + gw.metrics.requests["stt"]
        == 32
    )
