"""voice_stack_bench.e2e.turns and .marks: a turn's parts when the gateway ended it before
audio-stop, and its events' moments after the transcript."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from voice_stack_bench.e2e.marks import event_offsets
from voice_stack_bench.e2e.summary import SPEECH_TO_TRANSCRIPT, TOTAL
from voice_stack_bench.e2e.turns import Turn, Utterance
from voice_stack_dev.assist import AssistRun
from voice_stack_dev.assist_timings import AssistTimings, PipelineEvent


def _turn(hold: float, stt_wait: float, by: str = "end of audio") -> Turn:
    timings = AssistTimings(
        to_first_audio_ms=hold + stt_wait + 600.0,
        silence_hold_ms=hold,
        stt_wait_ms=stt_wait,
        agent_first_token_ms=300.0,
        first_sentence_ms=100.0,
        tts_first_byte_ms=200.0,
        audio_stop_by=by,
        streamed=False,
    )
    run = AssistRun("Hi.", "Hello.", "action_done", "c1", "agent", False, b"", None, timings, ())
    return Turn("voice_stack", "new", Utterance("Hi.", b""), run, 0, 30.0, [])


def test_a_transcript_before_audio_stop_ends_the_turn_there() -> None:
    # the transcript came 490 ms after the speech, before the runner's end of audio
    turn = _turn(490.0, 0.0, "transcript")
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


def test_event_offsets_after_the_transcript() -> None:
    t0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)

    def at(ms: float, kind: str, data: dict[str, Any] | None = None) -> PipelineEvent:
        return PipelineEvent(kind, t0 + timedelta(milliseconds=ms), data or {})

    delta = "chat_log_delta"
    events = [
        at(0, "stt-end"),
        at(5, "intent-start"),
        at(10, "intent-progress", {delta: {"role": "assistant"}}),
        at(150, "intent-progress", {delta: {"content": "The"}}),
        at(240, "intent-progress", {delta: {"content": " end."}}),
        at(300, "intent-end"),
        at(302, "tts-start"),
    ]
    assert event_offsets(events) == {
        "first_token": 150.0,
        "last_token": 240.0,
        "intent_end": 300.0,
        "tts_streaming_start": None,
        "tts_start": 302.0,
    }
    assert event_offsets(events[1:]) == {}
