"""voice_stack_dev.e2e.turns: a turn's parts when the gateway ended it before audio-stop."""

from __future__ import annotations

from voice_stack_dev.assist import AssistRun
from voice_stack_dev.assist_timings import AssistTimings
from voice_stack_dev.e2e.summary import SPEECH_TO_TRANSCRIPT, TOTAL
from voice_stack_dev.e2e.turns import Turn, Utterance


def _turn(hold: float, stt_wait: float) -> Turn:
    timings = AssistTimings(
        to_first_audio_ms=hold + stt_wait + 600.0,
        silence_hold_ms=hold,
        stt_wait_ms=stt_wait,
        agent_first_token_ms=300.0,
        first_sentence_ms=100.0,
        tts_first_byte_ms=200.0,
        audio_stop_by="end of audio",
        streamed=False,
    )
    run = AssistRun("Hi.", "Hello.", "action_done", "c1", "agent", False, b"", None, timings, ())
    return Turn("voice_stack", "new", Utterance("Hi.", b""), run, 0, 30.0, [])


def test_a_transcript_before_audio_stop_ends_the_turn_there() -> None:
    # the runner sent its end of audio 720 ms after the speech; the transcript came 230 ms before
    turn = _turn(720.0, -230.0)
    parts = turn.parts()
    assert turn.ended_by_gateway
    assert (parts["silence_hold_ms"], parts["stt_wait_ms"]) == (490.0, 0.0)
    assert parts[SPEECH_TO_TRANSCRIPT] == 490.0
    later = ("silence_hold_ms", "stt_wait_ms", "agent_first_token_ms", "first_sentence_ms",
             "tts_first_byte_ms")  # fmt: skip
    assert sum(parts[k] or 0.0 for k in later) == parts[TOTAL]


def test_a_turn_ha_ended_keeps_its_hold_and_wait() -> None:
    turn = _turn(700.0, 85.0)
    parts = turn.parts()
    assert not turn.ended_by_gateway
    assert (parts["silence_hold_ms"], parts["stt_wait_ms"], parts[SPEECH_TO_TRANSCRIPT]) == (
        700.0,
        85.0,
        785.0,
    )
