"""Two satellites speaking at once: what each request got, and the pair's figures.

The requests are ordered by when the agent got them (`intent-start`); llama-server numbers its
tasks in the order they arrive, so the n-th agent task seen in `/slots` is the n-th request's.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .slot_tasks import TaskSpan


@dataclass(frozen=True)
class Satellite:
    """One of the two requests, from its pipeline events."""

    intent_start: datetime | None  # the agent got the transcript
    first_token: datetime | None
    reply_end: datetime | None  # intent-end: the reply is written
    ttft_ms: float | None  # agent time to first token (transcript -> first token)
    to_first_audio_ms: float | None  # end of speech -> first reply audio
    stt_wait_ms: float | None = None  # audio-stop -> transcript
    tts_first_byte_ms: float | None = None  # text handed to TTS -> first reply audio


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000, 1)


_NEVER = datetime.max.replace(tzinfo=UTC)


def _arrival(satellite: Satellite) -> datetime:
    return satellite.intent_start or _NEVER


def _figures(satellite: Satellite) -> dict[str, float | None]:
    return {
        "ttft_ms": satellite.ttft_ms,
        "to_first_audio_ms": satellite.to_first_audio_ms,
        "stt_wait_ms": satellite.stt_wait_ms,
        "tts_first_byte_ms": satellite.tts_first_byte_ms,
    }


def pair_outcome(satellites: Sequence[Satellite], spans: Sequence[TaskSpan]) -> dict[str, Any]:
    """Each request's TTFT and slot; whether the second reply began while the first streamed;
    the second's wait (from its transcript to its task showing on a slot, +/- one poll)."""
    first, second = sorted(satellites, key=_arrival)
    slots = [span.slot for span in spans[:2]]
    first_slot = slots[0] if slots else None
    second_slot = slots[1] if len(slots) > 1 else None
    overlapped = (
        second.first_token is not None
        and first.reply_end is not None
        and second.first_token < first.reply_end
    )
    ratio = round(second.ttft_ms / first.ttft_ms, 3) if first.ttft_ms and second.ttft_ms else None
    return {
        "first": {**_figures(first), "slot": first_slot},
        "second": {**_figures(second), "slot": second_slot,
                   "wait_ms": _ms(second.intent_start, spans[1].first_seen)
                   if len(spans) > 1 else None},
        "different_slots": first_slot is not None and second_slot is not None
        and first_slot != second_slot,
        "second_started_while_first_streaming": overlapped,
        "ttft_second_vs_first": ratio,
    }  # fmt: skip


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 1) if present else None


def pairs_summary(outcomes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the pairs of one stack, and how many ran apart and overlapped."""
    return {
        "pairs": len(outcomes),
        "first_ttft_ms": _median([o["first"]["ttft_ms"] for o in outcomes]),
        "second_ttft_ms": _median([o["second"]["ttft_ms"] for o in outcomes]),
        "second_wait_ms": _median([o["second"]["wait_ms"] for o in outcomes]),
        "first_to_first_audio_ms": _median([o["first"]["to_first_audio_ms"] for o in outcomes]),
        "second_to_first_audio_ms": _median([o["second"]["to_first_audio_ms"] for o in outcomes]),
        "ttft_second_vs_first": _median([o["ttft_second_vs_first"] for o in outcomes]),
        "on_different_slots": sum(bool(o["different_slots"]) for o in outcomes),
        "second_started_while_first_streaming": sum(
            bool(o["second_started_while_first_streaming"]) for o in outcomes
        ),
        "runs": list(outcomes),
    }


def two_satellites_goal(pool: dict[str, Any]) -> dict[str, Any]:
    """Met when every pair of the pooled agent ran on two slots and overlapped."""
    n = pool["pairs"]
    return {
        "pairs": n,
        "on_different_slots": pool["on_different_slots"],
        "second_started_while_first_streaming": pool["second_started_while_first_streaming"],
        "met": n > 0
        and pool["on_different_slots"] == n
        and pool["second_started_while_first_streaming"] == n,
    }
