"""stt.py: a connection's transcription requests and their answers (real faster-whisper, and
the fake for what whisper cannot be made to do)."""

from __future__ import annotations

import re

import pytest
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.info import SelectProgram
from wyoming.tts import Synthesize

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_dev.procs import Service
from voice_stack_gateway.metrics import Kind

from .conftest import Client, Clients, GatewayFactory, audio_of, first_error, stt_events

PHRASE = "turn on the kitchen light"


def words(transcript_events: list[str]) -> str:
    """The words of the final transcript, lower case, without punctuation."""
    final = next(r for r in transcript_events if r.startswith("transcript:"))
    return re.sub(r"[^a-z ]", "", final.split(":", 1)[1].lower()).strip()


async def transcribe(client: Client, pcm: bytes, rate: int, width: int = 2) -> list[str]:
    """Send audio in 1024-sample chunks; return the types and texts that come back."""
    await client.send(Transcribe(language="en").event(), AudioStart(rate, width, 1).event())
    step = 1024 * width
    for i in range(0, len(pcm), step):
        await client.send(AudioChunk(rate, width, 1, pcm[i : i + step]).event())
    await client.send(AudioStop().event())
    events = await client.read_until("transcript")
    if events[0].type == "transcript-start":
        events += await client.read_until("transcript-stop")
    return [f"{e.type}:{e.data.get('text', '')}" for e in events]


async def test_streaming_model_round_trip(
    speech_server: Service, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(
        speech_server.url + "/v1", stt_streaming_models=("tiny.en",), stt_early_pause_ms=0
    )
    assert gw.catalog.describe.data["asr"][0]["supports_transcript_streaming"] is True
    async with client(gw) as c:
        await c.send(Synthesize(text="Turn on the kitchen light.").event())
        pcm = audio_of(await c.read_until("audio-stop"))
    async with client(gw) as c:
        result = await transcribe(c, pcm, 24000)
    assert result[0] == "transcript-start:"
    assert any(r.startswith("transcript-chunk:") for r in result)
    assert words(result) == PHRASE
    assert result[-1] == "transcript-stop:"
    assert gw.metrics.latency[Kind.STT].n == 1


@pytest.mark.parametrize("mode", ["sse_garbage", "sse", "sse_no_done"])
async def test_streamed_replies(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients, mode: str
) -> None:
    gw = await make_gateway(
        fake_speech.url, stt_models=("whisper-fake",), stt_streaming_models=("whisper-fake",)
    )
    fake_speech.mode = mode
    async with client(gw) as c:
        events = await stt_events(c)
        if mode == "sse_garbage":
            assert first_error(events).data["code"] == "backend-bad-response"
            return
        events += await c.read_until("transcript-stop")
    types = [e.type for e in events]
    assert types == [
        "transcript-start", "transcript-chunk", "transcript-chunk", "transcript", "transcript-stop"
    ]  # fmt: skip
    assert events[3].data["text"] == "hello world"
    assert fake_speech.requests[-1]["stream"] == "true"


async def test_any_input_format(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url, stt_models=("whisper-fake",), stt_prompt="Kitchen")
    for rate, width, channels in [(48000, 4, 2), (22050, 2, 2), (8000, 1, 1), (44100, 3, 1)]:
        async with client(gw) as c:
            second = b"\x10" * (rate * width * channels)
            await c.send(
                Transcribe(name="whisper-fake", language="en").event(),
                AudioStart(rate, width, channels).event(),
            )
            for i in range(0, len(second), 3000):  # chunks that split samples
                await c.send(AudioChunk(rate, width, channels, second[i : i + 3000]).event())
            await c.send(AudioStop().event())
            assert (await c.read_until("transcript"))[-1].type == "transcript"
        uploaded = fake_speech.requests[-1]
        assert (uploaded["model"], uploaded["language"], uploaded["prompt"]) == (
            "whisper-fake", "en", "Kitchen"
        )  # fmt: skip
        # one second at 16 kHz mono 16-bit (+44 header), within resampler rounding
        assert abs(int(uploaded["bytes"]) - 44 - 32000) <= 8, (rate, width, channels)
    async with client(gw) as c:  # a chunk may declare another format than audio-start
        await c.send(
            AudioStart(16000, 2, 1).event(),
            AudioChunk(8000, 2, 1, b"\0\0" * 8000).event(),
            AudioStop().event(),
        )
        assert (await c.read_until("transcript"))[-1].type == "transcript"
    assert abs(int(fake_speech.requests[-1]["bytes"]) - 44 - 32000) <= 8


async def test_select_program_pins_the_model(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url, stt_models=("a", "b"))
    async with client(gw) as c:
        await c.send(SelectProgram(name="b").event())
        assert (await stt_events(c))[-1].type == "transcript"
        await c.send(Transcribe(name="a").event())  # a transcribe naming a model wins
        assert (await stt_events(c))[-1].type == "transcript"
    assert [r["model"] for r in fake_speech.requests[-2:]] == ["b", "a"]


async def test_audio_mistakes(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url, stt_max_seconds=0.5)
    cases = [
        ([AudioChunk(16000, 2, 1, b"\0\0" * 100).event()], "bad-request"),
        ([AudioStop().event()], "bad-request"),
        ([AudioStart(0, 2, 1).event()], "bad-audio-format"),
        (
            [AudioStart(16000, 2, 1).event(), AudioChunk(16000, 9, 1, b"\0").event()],
            "bad-audio-format",
        ),
        (
            [AudioStart(16000, 2, 1).event(), AudioChunk(16000, 2, 1, b"\0\0" * 9000).event()],
            "audio-too-long",
        ),
    ]
    for events, code in cases:
        async with client(gw) as c:
            await c.send(*events)
            assert first_error(await c.read_until("error")).data["code"] == code, events
            # the same connection goes on: a new utterance is answered
            assert (await stt_events(c, b"\x01\x00" * 1600))[-1].type == "transcript"
    assert gw.metrics.errors[(Kind.STT, "audio-too-long")] == 1
