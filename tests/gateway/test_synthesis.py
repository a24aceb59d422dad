"""synthesis.py: plain and streamed synthesis, backend faults, formats, disconnects."""

from __future__ import annotations

import pytest
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_gateway.metrics import Kind

from .conftest import Clients, GatewayFactory, audio_of, first_error, tts_events, wait_for


@pytest.mark.parametrize(
    ("mode", "code", "fragment"),
    [
        ("status500", "backend-error", "HTTP 500 engine exploded"),
        ("hang", "backend-timeout", "timed out"),
        ("cut", "backend-bad-response", "cut the synthesis short"),
        ("garbage_wav", "backend-bad-response", "not WAV"),
        ("wrong_type", "backend-bad-response", "text/html"),
    ],
)
async def test_tts_faults(
    fake_speech: FakeSpeech,
    make_gateway: GatewayFactory,
    client: Clients,
    *,
    mode: str,
    code: str,
    fragment: str,
) -> None:
    gw = await make_gateway(fake_speech.url, first_byte_timeout=0.3, total_timeout=2.0)
    fake_speech.mode = mode
    async with client(gw) as c:
        err = first_error(await tts_events(c))
    assert err.data["code"] == code
    assert fragment in err.data["text"]
    fake_speech.mode = "ok"  # the gateway keeps serving
    async with client(gw) as c:
        assert audio_of(await tts_events(c))
    assert gw.metrics.errors[(Kind.TTS, code)] == 1


async def test_stall_mid_stream_times_out(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url, first_byte_timeout=0.3)
    fake_speech.mode = "stall"
    async with client(gw) as c:
        events = await tts_events(c)
    assert audio_of(events)  # audio came before the stall
    assert first_error(events).data["code"] == "backend-timeout"


async def test_wav_bodies_are_decoded_and_resampled(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    for mode in ("float_wav", "wav22k"):
        fake_speech.mode = mode
        async with client(gw) as c:
            events = await tts_events(c)
        rates = {e.data["rate"] for e in events if e.type in ("audio-start", "audio-chunk")}
        assert rates == {24000}
        pcm = audio_of(events)
        assert pcm
        assert len(pcm) % 2 == 0
    # float32 3000 samples -> int16; the trailing LIST chunk is not played
    fake_speech.mode = "float_wav"
    async with client(gw) as c:
        assert len(audio_of(await tts_events(c))) == 6000


async def test_one_format_when_a_sentence_comes_at_another_rate(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    fake_speech.tts_modes = ["ok", "wav22k"]
    async with client(gw) as c:
        await c.send(
            SynthesizeStart().event(),
            SynthesizeChunk(text="The first sentence. The second one differs. ").event(),
            SynthesizeStop().event(),
        )
        events = await c.read_until("synthesize-stopped")
    assert [e.type for e in events].count("audio-start") == 1
    assert {e.data["rate"] for e in events if e.type in ("audio-start", "audio-chunk")} == {24000}


async def test_streaming_failure_and_cancel_on_disconnect(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    fake_speech.mode = "status500"
    async with client(gw) as c:
        await c.send(SynthesizeStart().event(), SynthesizeChunk(text="One. Two. ").event())
        assert first_error(await c.read_until("error")).data["code"] == "backend-error"
        sent = len(fake_speech.requests)
        # HA keeps writing: more text, the compatibility synthesize, the stop; none of it may
        # start new synthesis or produce a second error
        await c.send(
            SynthesizeChunk(text="Three. ").event(),
            Synthesize(text="One. Two. Three. ").event(),
            SynthesizeStop().event(),
            Describe().event(),
        )
        assert [e.type for e in await c.read_until("info")] == ["info"]
    assert len(fake_speech.requests) == sent

    fake_speech.mode = "hang"
    text = "Alpha one. Beta two. Gamma three. Delta four. Epsilon five. "
    async with client(gw) as c:
        await c.send(SynthesizeStart().event(), SynthesizeChunk(text=text).event())
        await wait_for(lambda: len(fake_speech.requests) >= sent + 4)
    # disconnect: the four look-ahead requests in flight (default) are cancelled upstream
    await wait_for(lambda: fake_speech.cancelled >= 4)
    assert gw.metrics.active_sessions == 0
    assert fake_speech.cancelled == 4
    assert len(fake_speech.requests) == sent + 4  # the look-ahead of 4, not all five


async def test_a_sentence_fetched_ahead_may_wait_for_those_before_it(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    """Against a TTS server that synthesizes one request at a time, the sentences fetched
    ahead wait in its queue behind the ones before them: each may take one first-byte limit
    per sentence ahead of it, so a reply is not cut short while every sentence is on time."""
    gw = await make_gateway(fake_speech.url, first_byte_timeout=1.5, tts_concurrency=6)
    fake_speech.serial, fake_speech.delay = True, 0.3
    text = " ".join(f"This is sentence number {n} of six." for n in range(1, 7))
    async with client(gw) as c:
        await c.send(SynthesizeStart().event(), SynthesizeChunk(text=text).event())
        await c.send(SynthesizeStop().event())
        events = await c.read_until("synthesize-stopped", "error")
    assert [e.type for e in events if e.type == "error"] == []
    assert len(fake_speech.requests) == 6  # six waits of 0.3 s: the last one 1.8 s on


async def test_client_leaves_mid_audio(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    fake_speech.delay = 0.05
    gw = await make_gateway(fake_speech.url)
    for start in (
        [Synthesize(text="A long plain answer with many words in it.").event()],
        [SynthesizeStart().event(), SynthesizeChunk(text="One more. Two more. Three. ").event()],
    ):
        async with client(gw) as c:
            await c.send(*start)
            await c.read_until("audio-chunk")
        # the gateway notices, cancels, and goes on serving
        await wait_for(lambda: gw.metrics.active_sessions == 0)
    fake_speech.delay = 0.0
    async with client(gw) as c:
        assert audio_of(await tts_events(c))


async def test_a_stream_starts_its_audio_envelope_before_the_first_audio_exists(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    # HA starts its converter on audio-start: it must not wait for the TTS server's first audio
    gw = await make_gateway(fake_speech.url)
    fake_speech.mode = "hang"
    async with client(gw) as c:
        await c.send(SynthesizeStart().event(), SynthesizeChunk(text="Hello there. ").event())
        events = await c.read_until("audio-start", "audio-chunk")
    assert [e.type for e in events] == ["audio-start"]
    assert events[0].data["rate"] == 24000
