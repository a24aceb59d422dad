"""utterance.py: one utterance's audio, converted as it arrives and watched for pauses."""

from __future__ import annotations

import asyncio

import pytest
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop

from voice_stack_dev.fake_speech import FakeSpeech
from voice_stack_dev.procs import Service
from voice_stack_gateway.metrics import EarlyResult

from .conftest import Clients, GatewayFactory, silence, speech_pcm


@pytest.fixture(scope="module")
def phrase(speech_server: Service) -> bytes:
    return asyncio.run(speech_pcm(speech_server.url, "Turn on the kitchen light."))


async def test_pauses_are_found_whatever_rate_is_uploaded(
    phrase: bytes, fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    """The detector hears 16 kHz; an upload at another rate gets its own conversion."""
    gw = await make_gateway(fake_speech.url, stt_rate=24000)
    audio = phrase + silence(1.0)
    async with client(gw) as c:
        await c.send(Transcribe(language="en").event(), AudioStart(16000, 2, 1).event())
        await c.send(AudioChunk(16000, 2, 1, audio).event(), AudioStop().event())
        transcript = (await c.read_until("transcript"))[-1]
    assert transcript.type == "transcript"
    assert gw.metrics.early[EarlyResult.HIT] == 1
    # the early request is the audio up to the cut, at 24 kHz: more than the phrase, less than all
    uploaded = int(fake_speech.requests[-1]["bytes"]) - 44
    assert len(phrase) * 3 // 2 < uploaded < len(audio) * 3 // 2


async def test_transcribe_names_model_and_language(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url, stt_models=("a", "b"), stt_prompt="Küche")
    async with client(gw) as c:
        await c.send(Transcribe(name="b", language="de").event(), AudioStart(16000, 2, 1).event())
        await c.send(AudioChunk(16000, 2, 1, silence(0.2)).event(), AudioStop().event())
        assert (await c.read_until("transcript"))[-1].type == "transcript"
    fields = fake_speech.requests[-1]
    assert (fields["model"], fields["language"], fields["prompt"]) == ("b", "de", "Küche")
    assert fields["response_format"] == "json"
    assert "stream" not in fields
