"""stt/ha_hold.py: Home Assistant's own hold, counted by the gateway with the own VAD. Its rules
on scripted microVAD scores, then on room audio against HA's own segmenter (HA 2026.11's
`VoiceCommandSegmenter` with microVAD, as its pipeline runs it, in the ha11 venv)."""

from __future__ import annotations

import asyncio

import pytest

from voice_stack_bench.endpoint.corpus import load_corpus, speak
from voice_stack_bench.room.acoustics import ROOMS
from voice_stack_bench.room.ha_segmenter import HaSegmenter
from voice_stack_bench.room.scene import Scene
from voice_stack_dev.procs import Service
from voice_stack_gateway.stt.ha_hold import CHUNK_MS, HaHold
from voice_stack_gateway.stt.vad import FRAME_BYTES, SpeechFrames

SPEECH, QUIET = 0.9, 0.05


def fed(hold: HaHold, *runs: tuple[float, int]) -> int | None:
    """Feeds (score, chunks) runs; the chunk (counted from 0) on which the hold ended, if it
    did."""
    at, ended = 0, None
    for score, chunks in runs:
        for _ in range(chunks):
            hold.step(score)
            if ended is None and hold.ended:
                ended = at
            at += 1
    return ended


def ended(hold: HaHold) -> bool:
    return hold.ended  # read afresh (an attribute asserted once stays narrowed to mypy)


def test_a_command_ends_after_700_ms_of_silence() -> None:
    hold = HaHold(700)
    assert fed(hold, (SPEECH, 100), (QUIET, 69)) is None
    assert fed(hold, (QUIET, 1)) == 0
    assert hold.past_ms == 0  # on the chunk it ended
    fed(hold, (QUIET, 5))
    assert hold.past_ms == 5 * CHUNK_MS


def test_scores_microvad_cannot_give_are_skipped() -> None:
    """Its first 0.76 s microVAD scores -1: HA neither counts speech nor silence on them."""
    assert fed(HaHold(700), (-1.0, 76), (SPEECH, 100), (QUIET, 70)) == 76 + 100 + 69


def test_no_command_ends_before_a_second() -> None:
    """HA's aggressive hold (0.25 s): 0.3 s of speech starts a command, which still ends only
    once it lasted 1 s (command_seconds)."""
    assert fed(HaHold(250), (SPEECH, 30), (QUIET, 70)) == 30 + 69


def test_short_bursts_do_not_restart_the_silence() -> None:
    """Speech restarts the silence count only after 1 s of it in a row (reset_seconds): babble or
    a word between pauses does not, so the silence adds up."""
    burst = fed(HaHold(700), (SPEECH, 100), (QUIET, 40), (SPEECH, 90), (QUIET, 30))
    assert burst == 100 + 40 + 90 + 29
    restarted = fed(HaHold(700), (SPEECH, 100), (QUIET, 40), (SPEECH, 100), (QUIET, 70))
    assert restarted == 100 + 40 + 100 + 69


def test_thresholds_before_and_in_a_command() -> None:
    """Before a command a score above 0.2 is speech; in one, only above 0.5 (0.5 is silence)."""
    assert fed(HaHold(700), (0.3, 100)) == 30 + 69  # starts a command, then is its silence
    assert fed(HaHold(700), (SPEECH, 100), (0.5, 70)) == 100 + 69
    assert fed(HaHold(700), (0.2, 200)) is None  # not above 0.2: no command started


def test_speech_before_a_command_adds_up_over_gaps_under_a_second() -> None:
    started = fed(HaHold(700), (SPEECH, 20), (QUIET, 99), (SPEECH, 80), (QUIET, 70))
    assert started == 20 + 99 + 80 + 69  # the command started on the 10th chunk after the gap
    # a second of quiet forgets the 20 chunks: 10 more do not start a command
    assert fed(HaHold(700), (SPEECH, 20), (QUIET, 100), (SPEECH, 10), (QUIET, 200)) is None


def test_after_the_end_speech_going_on_is_a_new_command() -> None:
    """After HA's hold would have ended the turn, the audio since counts, and 0.3 s of speech in
    a row is a new command to HA's rules: counted from the start again."""
    hold = HaHold(700)
    fed(hold, (SPEECH, 100), (QUIET, 80))
    assert hold.past_ms == 10 * CHUNK_MS
    fed(hold, (SPEECH, 29), (QUIET, 1))
    assert ended(hold)
    assert hold.past_ms == 40 * CHUNK_MS  # a burst: the audio since the end counts whole
    fed(hold, (SPEECH, 30))
    assert not ended(hold)
    assert hold.past_ms == 0
    assert fed(hold, (SPEECH, 100), (QUIET, 70)) == 100 + 69  # ends again by HA's rules


# --- on room audio, against HA's own segmenter ------------------------------------------------


@pytest.fixture(scope="module")
def scenes(speech_server: Service) -> dict[str, bytes]:
    """Some of the room bench's scenes in piper's voice: a pause where the request cannot end in
    pink noise, dishes, babble and a fan."""
    entries = {e.id: e for e in load_corpus().entries}
    cells = {
        "b15/hall/pink@20": ("hall", "pink", 20.0),
        "b06/living/dishes@5": ("living", "dishes", 5.0),
        "a02/hall/babble@10": ("hall", "babble", 10.0),
        "c12/kitchen/dishes@10": ("kitchen", "dishes", 10.0),
        "b19/hall/hvac@15": ("hall", "hvac", 15.0),
    }
    spoken = asyncio.run(speak(speech_server.url, tuple(entries[k[:3]] for k in cells)))
    heard = zip(spoken, cells.items(), strict=True)
    return {
        key: Scene(said, "piper", ROOMS[room], noise, snr, seed=i * 16 + 3).audio(300, 9000)
        for i, (said, (key, (room, noise, snr))) in enumerate(heard)
    }


class Timed(HaHold):
    """Notes the start of the 10 ms chunk it ended on, as HA's passed audio ends there."""

    def __init__(self) -> None:
        super().__init__(700)
        self.chunks = 0
        self.ended_ms: int | None = None

    def step(self, probability: float) -> None:
        super().step(probability)
        if self.ended_ms is None and self.ended:
            self.ended_ms = self.chunks * CHUNK_MS
        self.chunks += 1


def gateway_end_ms(audio: bytes) -> int | None:
    """Where the gateway's count ends it, fed 20 ms frames through its speech detector with
    the own VAD."""
    hold = Timed()
    frames = SpeechFrames(0, hold)
    for at in range(0, len(audio) - FRAME_BYTES + 1, FRAME_BYTES):
        frames.is_speech(audio[at : at + FRAME_BYTES])
    return hold.ended_ms


def test_the_gateway_counts_has_hold_as_ha_does(scenes: dict[str, bytes]) -> None:
    with HaSegmenter() as ha:
        for key, audio in scenes.items():
            ha.add(key.replace("/", "_"), audio)
        theirs = ha.ends()["ends_ms"]
    ours = {key: gateway_end_ms(audio) for key, audio in scenes.items()}
    assert ours == {key: theirs[key.replace("/", "_")] for key in scenes}
    assert sum(end is not None for end in ours.values()) >= 4  # babble may run past 9 s
