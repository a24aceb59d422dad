"""Where the time of one spoken request went, from the pipeline's own event timestamps.

What a voice user feels is the time from the end of their speech to the first sound of the
reply. Home Assistant stamps every pipeline event (`timestamp`, its wall clock); the runner adds
three marks of its own on the same host clock: the end of speech, the end of the audio it sent,
and the first reply audio chunk. The parts follow one another, so they add up to the total:

    end of speech -> audio-stop           silence_hold_ms (HA's VAD, or the gateway's end)
    audio-stop -> transcript (stt-end)    stt_wait_ms
    transcript -> first token             agent_first_token_ms (first `intent-progress` content)
    first token -> text handed to TTS     first_sentence_ms (`tts_start_streaming`, else tts-start)
    text handed to TTS -> first audio     tts_first_byte_ms
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

type Json = dict[str, Any]

STAGES = ("stt", "intent", "tts")


@dataclass(frozen=True)
class PipelineEvent:
    """One `assist_pipeline/run` event: its type, HA's timestamp and its data."""

    kind: str
    at: datetime
    data: Json = field(default_factory=dict)

    @classmethod
    def from_message(cls, event: Json, received: datetime) -> PipelineEvent:
        """Parse a websocket event; one without a timestamp gets the time it arrived."""
        raw = event.get("timestamp")
        at = datetime.fromisoformat(raw) if isinstance(raw, str) else received
        return cls(str(event.get("type", "")), at, event.get("data") or {})


@dataclass(frozen=True)
class Marks:
    """The runner's own moments (wall clock, like HA's timestamps)."""

    speech_end: datetime
    audio_end_sent: datetime | None
    first_audio: datetime | None


@dataclass(frozen=True)
class AssistTimings:
    """Milliseconds; a part is None when its events did not happen (e.g. no TTS stage)."""

    to_first_audio_ms: float | None
    silence_hold_ms: float | None
    stt_wait_ms: float | None
    agent_first_token_ms: float | None
    first_sentence_ms: float | None
    tts_first_byte_ms: float | None
    audio_stop_by: str  # "vad": HA's own VAD heard the silence; "transcript": the STT answered
    # first (the gateway's end of turn); "end of audio": the runner's
    streamed: bool  # HA streamed the reply text into TTS while the agent was still writing
    stage_ms: dict[str, float] = field(default_factory=dict)

    def parts(self) -> dict[str, float | None]:
        """The parts in order, by the names people read."""
        return {
            "end of speech -> audio-stop": self.silence_hold_ms,
            "STT wait after audio-stop": self.stt_wait_ms,
            "agent time to first token": self.agent_first_token_ms,
            "first sentence to TTS": self.first_sentence_ms,
            "TTS first byte": self.tts_first_byte_ms,
        }


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000


def first_event(events: Sequence[PipelineEvent], kind: str) -> PipelineEvent | None:
    return next((e for e in events if e.kind == kind), None)


def stage_ms(events: Sequence[PipelineEvent]) -> dict[str, float]:
    """Each stage's own start -> end time."""
    out: dict[str, float] = {}
    for stage in STAGES:
        took = _ms(
            getattr(first_event(events, f"{stage}-start"), "at", None),
            getattr(first_event(events, f"{stage}-end"), "at", None),
        )
        if took is not None:
            out[stage] = took
    return out


def first_token_at(events: Sequence[PipelineEvent]) -> datetime | None:
    """The first assistant text the agent streamed; a non-streaming answer (HA's local
    intents, a sentence trigger) counts from intent-end, when its whole text exists."""
    role = None
    for event in events:
        if event.kind != "intent-progress":
            continue
        delta = event.data.get("chat_log_delta") or {}
        role = delta.get("role", role)
        if role == "assistant" and delta.get("content"):
            return event.at
    end = first_event(events, "intent-end")
    return end.at if end else None


def _tts_handoff(events: Sequence[PipelineEvent]) -> tuple[datetime | None, bool]:
    """When HA gave TTS its first text, and whether it streamed it."""
    for event in events:
        if event.kind == "intent-progress" and event.data.get("tts_start_streaming"):
            return event.at, True
    start = first_event(events, "tts-start")
    return (start.at if start else None), False


def _audio_stop(
    events: Sequence[PipelineEvent], marks: Marks, transcript: datetime | None
) -> tuple[datetime | None, str]:
    """When the audio stopped counting, and what stopped it. A transcript that came first (the
    gateway ended the turn at the pause) ends it there: nothing after it was waited for."""
    vad_end = first_event(events, "stt-vad-end")
    stop, by = marks.audio_end_sent, "end of audio"
    if vad_end is not None and (stop is None or vad_end.at <= stop):
        stop, by = vad_end.at, "vad"
    if transcript is not None and stop is not None and transcript < stop:
        return transcript, "transcript"
    return stop, by


def extract_timings(events: Sequence[PipelineEvent], marks: Marks) -> AssistTimings:
    """The figure and its parts for one run."""
    transcript = getattr(first_event(events, "stt-end"), "at", None)
    audio_stop, stopped_by = _audio_stop(events, marks, transcript)
    first_token = first_token_at(events)
    handoff, streamed = _tts_handoff(events)
    return AssistTimings(
        to_first_audio_ms=_ms(marks.speech_end, marks.first_audio),
        silence_hold_ms=_ms(marks.speech_end, audio_stop),
        stt_wait_ms=_ms(audio_stop, transcript),
        agent_first_token_ms=_ms(transcript, first_token),
        first_sentence_ms=_ms(first_token, handoff),
        tts_first_byte_ms=_ms(handoff, marks.first_audio),
        audio_stop_by=stopped_by,
        streamed=streamed,
        stage_ms=stage_ms(events),
    )
