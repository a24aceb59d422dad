"""Real engines: speech synthesized through the gateway comes back as the same words."""

from __future__ import annotations

import re
from collections.abc import Callable

from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from voice_stack_dev.procs import Service
from voice_stack_gateway.gateway import Gateway

from .conftest import Client, GatewayFactory, audio_of

PHRASE = "turn on the kitchen light"


def words(text: str) -> str:
    return re.sub(r"[^a-z ]", "", text.lower()).strip()


async def transcribe(client: Client, pcm: bytes, rate: int, width: int = 2) -> list[str]:
    """Send audio in 1024-sample chunks; return the types and texts that come back."""
    await client.send(Transcribe(language="en").event(), AudioStart(rate, width, 1).event())
    step = 1024 * width
    for i in range(0, len(pcm), step):
        await client.send(AudioChunk(rate, width, 1, pcm[i : i + step]).event())
    await client.send(AudioStop().event())
    events = await client.read_until("transcript-stop")
    return [f"{e.type}:{e.data.get('text', '')}" for e in events]


async def test_round_trip_plain_and_streaming(
    speech_server: Service, make_gateway: GatewayFactory, client: Callable[[Gateway], Client]
) -> None:
    gw = await make_gateway(
        speech_server.url + "/v1", stt_streaming_models=("tiny.en",), tts_output_rate=22050
    )
    async with client(gw) as c:
        await c.send(Describe().event())
        info = (await c.read_until("info"))[-1]
    asr, tts = info.data["asr"][0], info.data["tts"][0]
    assert asr["supports_transcript_streaming"] is True
    assert tts["supports_synthesize_streaming"] is True
    assert tts["version"] == "0.1.0"

    async with client(gw) as c:
        await c.send(Synthesize(text="Turn on the kitchen light.").event())
        events = await c.read_until("audio-stop")
    starts = [e for e in events if e.type == "audio-start"]
    assert len(starts) == 1
    assert starts[0].data["rate"] == 22050
    pcm = audio_of(events)
    assert len(pcm) > 22050  # more than half a second of speech

    async with client(gw) as c:
        result = await transcribe(c, pcm, 22050)
    assert result[0] == "transcript-start:"
    assert any(r.startswith("transcript-chunk:") for r in result)
    final = next(r for r in result if r.startswith("transcript:"))
    assert words(final.split(":", 1)[1]) == PHRASE
    assert result[-1] == "transcript-stop:"

    # streaming synthesis of a reply arriving word by word, then recognised again
    async with client(gw) as c:
        await c.send(SynthesizeStart().event())
        for word in ["Okay.", "Turn", "on", "the", "kitchen", "light."]:
            await c.send(SynthesizeChunk(text=word + " ").event())
        await c.send(
            Synthesize(text="ignored compatibility copy").event(), SynthesizeStop().event()
        )
        events = await c.read_until("synthesize-stopped")
    assert events[-1].type == "synthesize-stopped"
    assert {e.data["rate"] for e in events if e.type == "audio-chunk"} == {22050}
    async with client(gw) as c:
        result = await transcribe(c, audio_of(events), 22050)
    final = next(r for r in result if r.startswith("transcript:"))
    assert PHRASE in words(final.split(":", 1)[1])
