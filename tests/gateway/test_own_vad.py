"""own_vad.py: with --stt-own-vad the gateway ends every turn itself (Home Assistant runs no VAD
then): words that read complete after the endpoint, other words after the longer hold, HA's
15 s cap, and an empty transcript when no speech came by then. First the decision on scripted
frames, then behind a gateway (fake speech server answering with chosen words), driven by the
order of events, never by the wall clock."""

from __future__ import annotations

import logging
from typing import cast

import pytest
from wyoming.audio import AudioChunk, AudioStop

from voice_stack_dev.wavs import tone
from voice_stack_gateway.gateway import Gateway
from voice_stack_gateway.metrics import Kind
from voice_stack_gateway.own_vad import CAP_MS, HA_HOLD_MS, Without, hold_for
from voice_stack_gateway.transcription import Transcription

from .conftest import Clients, GatewayFactory, silence, wait_for
from .test_endpoint import (
    LOUD,
    QUIET,
    Turn,
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
CAP_FRAMES = CAP_MS // 20


def own(*, accept: bool = True) -> Turn:
    return Turn(accept=accept, hold_ms=HOLD)


async def test_complete_words_end_at_the_endpoint_as_before() -> None:
    t = own()
    await t.answered_at_the_cut("Turn on the kitchen light.")
    t.feed(QUIET, 5)  # 400 ms
    assert t.ended == [t.requests[0]]
    assert t.counts() == {"gateway": 1, "client": 0}
    await t.turn.close()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Turn on the", "'Turn on the' does not read complete: ends on 'the'"),
        (None, "early transcription 1 failed"),
    ],
)
async def test_other_words_end_after_the_hold(text: str | None, why: str) -> None:
    t = own()
    await t.answered_at_the_cut(text)
    t.feed(QUIET, HOLD // 20 - 16)  # 1280 ms: a pause where a request cannot end goes on
    assert not t.ended
    t.feed(QUIET, 1)  # 1300 ms
    assert t.ended == [Without.AUDIO]  # answered as at audio-stop: early or whole audio
    assert t.early.current is cast(Transcription, t.requests[0])  # not taken: the answer uses it
    assert t.counts() == {"gateway": 0, "client": 0, "gateway_hold": 1}
    assert why in t.turn.why
    await t.turn.close()


def test_a_language_without_a_word_table_gets_has_default_hold() -> None:
    """No words can read complete there: the longer hold would slow every turn."""
    assert (hold_for("en-US", HOLD), hold_for("de", HOLD), hold_for(None, HOLD)) == (
        HOLD,
        HA_HOLD_MS,
        HA_HOLD_MS,
    )
    assert hold_for("de", 500) == 500


async def test_the_hold_does_not_wait_for_the_transcript() -> None:
    t = own()
    t.feed(LOUD, 20)
    t.feed(QUIET, HOLD // 20)
    assert t.ended == [Without.AUDIO]
    assert "was not back yet" in t.turn.why
    await t.turn.close()


async def test_speech_after_a_pause_starts_the_hold_again() -> None:
    t = own()
    t.feed(LOUD, 20)
    t.feed(QUIET, 60)  # 1200 ms
    t.feed(LOUD, 10)
    t.feed(QUIET, 60)
    assert not t.ended
    t.feed(QUIET, 5)
    assert t.ended == [Without.AUDIO]
    await t.turn.close()


async def test_silence_before_speech_never_ends_the_turn_before_the_cap() -> None:
    t = own()
    t.feed(QUIET, 100)  # 2 s before a word: no speech yet, no hold
    t.feed(LOUD, 12)  # 240 ms: too little speech for a pause to count...
    t.feed(QUIET, CAP_FRAMES - 113)
    assert not t.ended
    t.feed(QUIET, 1)  # ...so only the cap ends it, answered with the audio (speech was heard)
    assert t.ended == [Without.AUDIO]
    assert t.counts() == {"gateway": 0, "client": 0, "gateway_cap": 1}
    await t.turn.close()


async def test_no_speech_ends_at_the_cap_with_nothing() -> None:
    t = own()
    t.feed(QUIET, CAP_FRAMES - 1)
    assert not t.ended
    t.feed(QUIET, 1)
    assert t.ended == [Without.SILENCE]
    assert t.counts() == {"gateway": 0, "client": 0, "gateway_no_speech": 1}
    await t.turn.close()


async def test_an_answer_still_being_sent_defers_the_own_end() -> None:
    t = own(accept=False)
    t.feed(QUIET, CAP_FRAMES)
    assert "still being sent" in t.turn.why
    assert t.counts() == {"gateway": 0, "client": 0}
    t.accept = True
    t.feed(QUIET, 1)
    assert t.ended == [Without.SILENCE]
    await t.turn.close()


async def test_off_the_client_ends_the_turn() -> None:
    t = Turn()
    t.feed(LOUD, 20)
    t.feed(QUIET, CAP_FRAMES)
    assert not t.ended
    t.turn.left()
    assert t.counts() == {"gateway": 0, "client": 1}
    await t.turn.close()


# --- behind the gateway ------------------------------------------------------------------------


async def own_gateway(make_gateway: GatewayFactory, fake: Worded) -> Gateway:
    return await make_gateway(fake.url, stt_own_vad=True, stt_incomplete_hold_ms=HOLD)


def ended(gw: Gateway) -> bool:
    (conn,) = gw.connections
    utterance = conn.stt.utterance
    assert utterance is not None
    return utterance.ended


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
    worded: Worded,  # noqa: F811
    make_gateway: GatewayFactory,
    client: Clients,
) -> None:
    gw = await own_gateway(make_gateway, worded)
    seconds = CAP_MS / 1000
    async with client(gw) as c:
        await start(c, tone(seconds - 0.02, 16000))  # sound without a pause
        await fed(c)
        assert not ended(gw)
        await c.send(AudioChunk(16000, 2, 1, tone(0.02, 16000)).event())
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
