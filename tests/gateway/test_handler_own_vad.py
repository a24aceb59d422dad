"""stt/handler.py with --stt-own-vad: the gateway ends every turn itself (Home Assistant runs no
VAD then): words that read complete after the endpoint, other words after the longer hold or
soon after HA's own, HA's 15 s cap, and an empty transcript when no speech came by then (the
decisions: test_turn.py),
behind a gateway (fake speech server answering with chosen words), driven by the order of
events, never by the wall clock."""

from __future__ import annotations

import logging

import pytest
from wyoming.audio import AudioChunk, AudioStop

from voice_stack_bench.endpoint.corpus import load_corpus, speak
from voice_stack_bench.room.acoustics import ROOMS
from voice_stack_bench.room.scene import Scene, in_room
from voice_stack_dev.procs import Service
from voice_stack_gateway.gateway import Gateway
from voice_stack_gateway.metrics import Kind
from voice_stack_gateway.stt.turn import CAP_MS

from .conftest import Clients, GatewayFactory, silence, wait_for
from .test_handler import (
    Worded,
    early,
    fed,
    phrases,  # noqa: F401 (a fixture)
    start,
    texts,
    turn_end,
    worded,  # noqa: F401 (a fixture)
)

HOLD = 1300


# --- behind the gateway ------------------------------------------------------------------------


async def own_gateway(make_gateway: GatewayFactory, fake: Worded) -> Gateway:
    return await make_gateway(fake.url, stt_own_vad=True, stt_incomplete_hold_ms=HOLD)


def ended(gw: Gateway) -> bool:
    (conn,) = gw.connections
    turn = conn.stt.turn
    assert turn is not None
    return not turn.listening


async def test_incomplete_words_are_answered_after_the_hold(
    phrases: dict[str, bytes],  # noqa: F811
    worded: Worded,  # noqa: F811
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "voice_stack_gateway")
    gw = await own_gateway(make_gateway, worded)
    worded.texts = ["Turn on the"]
    async with client(gw) as c:
        await start(c, phrases["light"] + silence(1.0))  # no audio-stop, ever
        await wait_for(lambda: "Early transcript 1: 'Turn on the'" in caplog.text)  # judged
        await fed(c)
        assert not ended(gw)  # a second's pause: the words cannot end, the turn goes on
        for _ in range(10):  # 0.64 s more
            await c.send(AudioChunk(16000, 2, 1, silence(0.064)).event())
        assert texts(await c.read_until("transcript")) == ["transcript:Turn on the"]
        await c.send(AudioStop().event())
        await fed(c)  # nothing answers the late audio-stop
    assert len(worded.requests) == 1  # the early transcript covered the audio
    assert turn_end(gw) == {"gateway": 0, "client": 0, "gateway_hold": 1}
    assert early(gw) == {"hit": 1, "miss": 0, "wasted": 0}
    assert gw.metrics.requests[Kind.STT] == 1
    assert "Turn ended by the gateway's own VAD before audio-stop: a 1300 ms pause" in caplog.text
    assert "'Turn on the' does not read complete" in caplog.text
    assert 'gateway_stt_turn_end_total{by="gateway_hold"} 1' in gw.metrics.prometheus()


async def test_no_speech_is_an_empty_transcript_at_the_cap(
    worded: Worded,  # noqa: F811
    make_gateway: GatewayFactory,
    client: Clients,
) -> None:
    """Home Assistant turns the empty transcript into "No text recognized"; no backend call."""
    gw = await own_gateway(make_gateway, worded)
    async with client(gw) as c:
        await start(c, silence(CAP_MS / 1000 - 0.02))
        await fed(c)
        assert not ended(gw)
        await c.send(AudioChunk(16000, 2, 1, silence(0.02)).event())
        assert texts(await c.read_until("transcript")) == ["transcript:"]
    assert worded.requests == []
    assert turn_end(gw) == {"gateway": 0, "client": 0, "gateway_no_speech": 1}
    assert gw.metrics.latency[Kind.STT].n == 0  # nothing was transcribed


async def test_speech_to_the_cap_is_answered_by_the_whole_audio(
    phrases: dict[str, bytes],  # noqa: F811
    worded: Worded,  # noqa: F811
    make_gateway: GatewayFactory,
    client: Clients,
) -> None:
    gw = await own_gateway(make_gateway, worded)
    seconds = CAP_MS / 1000
    talk = phrases["light"] + phrases["blinds"]  # speech with no pause as long as the hold
    audio = (talk * (int(seconds * 32000) // len(talk) + 1))[: int(seconds * 32000)]
    async with client(gw) as c:
        await start(c, audio[:-640])
        await fed(c)
        assert not ended(gw)
        await c.send(AudioChunk(16000, 2, 1, audio[-640:]).event())
        assert texts(await c.read_until("transcript")) == [
            f"transcript:heard {int(seconds * 32000) + 44} bytes"
        ]
    assert turn_end(gw) == {"gateway": 0, "client": 0, "gateway_cap": 1}


async def test_a_streaming_model_streams_the_empty_transcript(
    worded: Worded,  # noqa: F811
    make_gateway: GatewayFactory,
    client: Clients,
) -> None:
    gw = await make_gateway(
        worded.url,
        stt_own_vad=True,
        stt_models=("whisper-fake",),
        stt_streaming_models=("whisper-fake",),
    )
    async with client(gw) as c:
        await start(c, silence(CAP_MS / 1000))
        events = await c.read_until("transcript-stop")
    assert texts(events) == ["transcript-start:", "transcript:", "transcript-stop:"]


@pytest.mark.parametrize(
    ("heard", "total_ms", "ends", "too_noisy"),
    [
        ("living/hvac@20", 4000, {"gateway": 1, "client": 0}, 0),
        ("living/hvac@3", CAP_MS + 500, {"gateway": 0, "client": 0, "gateway_hold": 1}, 1),
    ],
)
async def test_a_room_with_a_fan_ends_on_the_words_or_the_hold_not_the_cap(
    heard: str,
    total_ms: int,
    ends: dict[str, int],
    too_noisy: int,
    phrases: dict[str, bytes],  # noqa: F811
    worded: Worded,  # noqa: F811
    make_gateway: GatewayFactory,
    client: Clients,
) -> None:
    """A fan 20 dB below the voice (issue 34): before 2026-12-03 the detector never saw a pause
    there, and every turn ran to the 15 s cap; now the words end it. A fan 3 dB below: too noisy
    to judge pauses, so no end by the words; webrtcvad hears the fan as speech to the cap, HA's
    microVAD hears the pause, and the hold ends the turn (HA runs no VAD to leave it to). The
    fan goes on to the end of the audio; no audio-stop, ever."""
    audio, _last = in_room("Turn on the kitchen light.", phrases["light"], heard, 300, total_ms)
    gw = await own_gateway(make_gateway, worded)
    worded.texts = ["Turn on the kitchen light."]
    async with client(gw) as c:
        await start(c, audio)
        assert texts(await c.read_until("transcript")) == ["transcript:Turn on the kitchen light."]
    assert turn_end(gw) == ends
    assert gw.metrics.too_noisy == too_noisy


async def test_a_turn_ends_soon_after_has_own_hold_would_have_ended_it(
    speech_server: Service,
    worded: Worded,  # noqa: F811
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The room bench's living room, dishes 5 dB below the voice (b06 in piper, seed 753): the
    own VAD's 1300 ms hold ends 2.2 s after the last word (test_early.py), HA's own hold 1.5 s
    after it. The gateway counts HA's hold (ha_hold.py) and ends the turn HA_MARGIN_MS after
    it would have (with words that cannot end, not while the detector hears sound). Before
    2026-12-05 the own VAD ended such turns up to 11.5 s later than HA's hold."""
    caplog.set_level(logging.DEBUG, "voice_stack_gateway")
    entry = next(e for e in load_corpus().entries if e.id == "b06")
    spoken = (await speak(speech_server.url, (entry,)))[0]
    audio = Scene(spoken, "piper", ROOMS["living"], "dishes", 5.0, seed=753).audio(300, 15000)
    gw = await own_gateway(make_gateway, worded)
    worded.texts = ["Turn on the"]
    async with client(gw) as c:
        await start(c, audio)  # no audio-stop, ever
        assert texts(await c.read_until("transcript")) == ["transcript:Turn on the"]
    assert turn_end(gw) == {"gateway": 0, "client": 0, "gateway_ha_hold": 1}
    assert "Home Assistant's own hold would have ended it" in caplog.text
