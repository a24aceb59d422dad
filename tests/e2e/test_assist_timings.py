"""Timings from pipeline events: the parts follow one another and add up to the total."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from voice_stack_dev.assist_timings import Marks, PipelineEvent, extract_timings

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)


def _at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _event(kind: str, ms: float, **data: object) -> PipelineEvent:
    return PipelineEvent(kind, _at(ms), dict(data))


def _streamed_run() -> list[PipelineEvent]:
    return [
        _event("run-start", 0),
        _event("stt-start", 5),
        _event("stt-vad-start", 400),
        _event("stt-vad-end", 2750),
        _event("stt-end", 3000, stt_output={"text": "why is the sky blue"}),
        _event("intent-start", 3010),
        _event("intent-progress", 3100, chat_log_delta={"role": "assistant"}),
        _event("intent-progress", 3300, chat_log_delta={"content": "The sky"}),
        _event("intent-progress", 3700, tts_start_streaming=True),
        _event("intent-end", 4500),
        _event("tts-start", 4510),
        _event("tts-end", 4520),
        _event("run-end", 4530),
    ]


def test_streamed_reply_parts_add_up() -> None:
    marks = Marks(speech_end=_at(2000), audio_end_sent=_at(2800), first_audio=_at(3900))
    t = extract_timings(_streamed_run(), marks)
    assert t.audio_stop_by == "vad"  # HA's VAD ended the audio before our end frame
    assert t.streamed
    assert (t.silence_hold_ms, t.stt_wait_ms, t.agent_first_token_ms) == (750, 250, 300)
    assert (t.first_sentence_ms, t.tts_first_byte_ms) == (400, 200)
    assert t.to_first_audio_ms == 1900 == sum(v for v in t.parts().values() if v is not None)
    assert t.stage_ms == {"stt": 2995, "intent": 1490, "tts": 10}


def test_local_intent_counts_from_intent_end_and_our_end_of_audio() -> None:
    events = [e for e in _streamed_run() if e.kind not in ("stt-vad-end", "intent-progress")]
    marks = Marks(speech_end=_at(2000), audio_end_sent=_at(2700), first_audio=_at(4700))
    t = extract_timings(events, marks)
    assert t.audio_stop_by == "end of audio"
    assert not t.streamed
    assert (t.silence_hold_ms, t.stt_wait_ms) == (700, 300)
    assert t.agent_first_token_ms == 1500  # stt-end -> intent-end: the whole answer at once
    assert (t.first_sentence_ms, t.tts_first_byte_ms) == (10, 190)


def test_a_transcript_before_the_audio_stopped_ends_the_turn_there() -> None:
    """The gateway answered at the pause, before HA's VAD or the runner's end of audio (HA then
    sends no stt-vad-end): the hold runs to the transcript, the STT wait is 0, never negative."""
    events = [e for e in _streamed_run() if e.kind != "stt-vad-end"]
    marks = Marks(speech_end=_at(2500), audio_end_sent=_at(3200), first_audio=_at(3900))
    t = extract_timings(events, marks)
    assert t.audio_stop_by == "transcript"
    assert (t.silence_hold_ms, t.stt_wait_ms) == (500, 0)
    assert t.to_first_audio_ms == 1400 == sum(v for v in t.parts().values() if v is not None)


def test_missing_events_leave_parts_empty() -> None:
    marks = Marks(speech_end=_at(0), audio_end_sent=None, first_audio=None)
    t = extract_timings([_event("run-start", 0)], marks)
    assert t.to_first_audio_ms is None
    assert all(v is None for v in t.parts().values())


def test_event_timestamps_are_read_from_the_message() -> None:
    received = _at(99)
    stamped = PipelineEvent.from_message(
        {"type": "stt-end", "timestamp": _at(5).isoformat(), "data": {"x": 1}}, received
    )
    assert (stamped.kind, stamped.at, stamped.data) == ("stt-end", _at(5), {"x": 1})
    assert PipelineEvent.from_message({"type": "run-end"}, received).at == received
