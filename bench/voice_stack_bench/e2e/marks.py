"""Where one request's time went after the transcript, finer than its parts: the moments of its
pipeline events, in ms after `stt-end` (HA's timestamps). They show what the agent does after its
last token and when HA hands the text to TTS (at 60 characters streamed, or the reply's end)."""

from __future__ import annotations

from collections.abc import Sequence

from voice_stack_dev.assist_timings import PipelineEvent, first_event, first_token_at

type Offsets = dict[str, float | None]


def _last_content(events: Sequence[PipelineEvent]) -> PipelineEvent | None:
    deltas = [e for e in events if e.kind == "intent-progress"]
    return next(
        (e for e in reversed(deltas) if (e.data.get("chat_log_delta") or {}).get("content")), None
    )


def _streaming_start(events: Sequence[PipelineEvent]) -> PipelineEvent | None:
    return next(
        (e for e in events if e.kind == "intent-progress" and e.data.get("tts_start_streaming")),
        None,
    )


def event_offsets(events: Sequence[PipelineEvent]) -> Offsets:
    """first token, last token, intent-end, TTS streaming start, tts-start: ms after stt-end."""
    stt_end = first_event(events, "stt-end")
    if stt_end is None:
        return {}
    moments = {
        "first_token": first_token_at(events),
        "last_token": getattr(_last_content(events), "at", None),
        "intent_end": getattr(first_event(events, "intent-end"), "at", None),
        "tts_streaming_start": getattr(_streaming_start(events), "at", None),
        "tts_start": getattr(first_event(events, "tts-start"), "at", None),
    }
    return {
        name: None if at is None else round((at - stt_end.at).total_seconds() * 1000, 1)
        for name, at in moments.items()
    }
