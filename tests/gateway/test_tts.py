"""tts.py: a connection's synthesis requests, against real piper (and the fake for pinning)."""

from __future__ import annotations

from wyoming.info import Describe, SelectProgram
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_dev.procs import Service
from voice_stack_gateway.metrics import Kind
from voice_stack_gateway.synthesis import MAX_TEXT_CHARS

from .conftest import Clients, GatewayFactory, audio_of, first_error
from .test_stt import PHRASE, transcribe, words


async def test_plain_and_streamed_speech_is_heard_back(
    speech_server: Service, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(speech_server.url + "/v1", tts_output_rate=22050)
    async with client(gw) as c:
        await c.send(Describe().event())
        tts = (await c.read_until("info"))[-1].data["tts"][0]
    assert tts["supports_synthesize_streaming"] is True
    assert tts["version"] == "0.1.0"
    async with client(gw) as c:
        await c.send(Synthesize(text="Turn on the kitchen light.").event())
        events = await c.read_until("audio-stop")
    starts = [e for e in events if e.type == "audio-start"]
    assert len(starts) == 1
    assert starts[0].data["rate"] == 22050
    assert len(audio_of(events)) > 22050  # more than half a second of speech
    async with client(gw) as c:
        assert words(await transcribe(c, audio_of(events), 22050)) == PHRASE

    # a reply arriving word by word, the compatibility copy ignored, then recognised again
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
        assert PHRASE in words(await transcribe(c, audio_of(events), 22050))


async def test_select_program_pins_the_model(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    async with client(gw) as c:
        await c.send(
            SelectProgram(name="voice-stack-tts").event(),
            SelectProgram(name="kokoro").event(),
            Synthesize(text="Pinned model.").event(),
        )
        assert (await c.read_until("audio-stop"))[-1].type == "audio-stop"
        await c.send(Synthesize(text="A voice.", voice=SynthesizeVoice(name="v3")).event())
        assert (await c.read_until("audio-stop"))[-1].type == "audio-stop"
    assert fake_speech.requests[-2]["model"] == "kokoro"
    assert fake_speech.requests[-2]["voice"] == "af_heart"  # the first voice, now on kokoro
    assert (fake_speech.requests[-1]["voice"], fake_speech.requests[-1]["model"]) == (
        "v3",
        "kokoro",
    )


async def test_stream_mistakes(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    for event, code in (
        (Synthesize(text="  ").event(), "bad-request"),
        (SynthesizeChunk(text="hi").event(), "bad-request"),
        (SynthesizeStop().event(), "bad-request"),
    ):
        async with client(gw) as c:
            await c.send(event)
            assert first_error(await c.read_until("error")).data["code"] == code
    # a second synthesize-start replaces the first stream
    async with client(gw) as c:
        await c.send(SynthesizeStart().event(), SynthesizeChunk(text="Dropped ").event())
        await c.send(SynthesizeStart().event(), SynthesizeChunk(text="Spoken. ").event())
        await c.send(SynthesizeStop().event())
        assert (await c.read_until("synthesize-stopped"))[-1].type == "synthesize-stopped"
    assert fake_speech.requests[-1]["input"] == "Spoken."


async def test_text_past_the_limit_is_refused_and_the_connection_goes_on(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    over = "a" * (MAX_TEXT_CHARS + 1)
    too_long = f"Text longer than {MAX_TEXT_CHARS} characters was refused"
    async with client(gw) as c:
        await c.send(Synthesize(text=over).event())
        err = first_error(await c.read_until("audio-stop"))
        assert (err.data["code"], err.data["text"]) == ("payload-too-large", too_long)
        await c.send(SynthesizeStart().event(), SynthesizeChunk(text="Fine so far. ").event())
        await c.send(*(SynthesizeChunk(text="x" * 20_000).event() for _ in range(3)))
        events = await c.read_until("error")
        assert events[-1].data["code"] == "payload-too-large"
        await c.send(SynthesizeChunk(text="dropped").event(), SynthesizeStop().event())
        await c.send(Synthesize(text="Still here.").event())
        assert audio_of(await c.read_until("audio-stop"))
    assert gw.metrics.errors[(Kind.TTS, "payload-too-large")] == 1
    assert gw.metrics.errors[(Kind.TTS_STREAM, "payload-too-large")] == 1
