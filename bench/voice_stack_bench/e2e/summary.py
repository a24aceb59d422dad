"""The end-to-end benchmark's arithmetic, kept apart from the servers so it is tested on its own:
medians and p90s per stack and kind of request, the floor, the ratios and the goals.

A sample is one spoken request: its parts (from Home Assistant's pipeline events, see
assist_timings) and the floor measured for the same work straight against the servers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..stats import median_p90

OURS, STOCK = "voice_stack", "stock"
KINDS = ("new", "follow_up")
TOTAL = "end_of_speech_to_first_audio_ms"
# The parts follow one another and add up to TOTAL.
PARTS = (
    "silence_hold_ms",  # end of speech -> audio-stop (HA's VAD, the bench's 0.7 s, the transcript)
    "stt_wait_ms",  # audio-stop -> transcript
    "agent_first_token_ms",  # transcript -> first reply token
    "first_sentence_ms",  # first token -> text handed to TTS
    "tts_first_byte_ms",  # text handed to TTS -> first reply audio chunk
)
# Both stacks' STT in one figure: HA's hold and the wait after it, or the gateway's end of turn.
SPEECH_TO_TRANSCRIPT = "speech_end_to_transcript_ms"
FLOOR = "floor_ms"
FLOOR_PARTS = (
    "silence_hold_ms",  # the same request's own
    "asr_ms",  # the speech server transcribing the utterance HA sent, idle
    "llm_first_sentence_ms",  # llama-server: request -> first sentence, idle warm slot
    "tts_first_byte_ms",  # the speech server: that sentence -> first audio byte, idle
)
GOAL_FIRST_AUDIO_VS_STOCK = 0.5
GOAL_FIRST_AUDIO_VS_FLOOR = 1.10
GOAL_STT_WAIT_VS_STOCK = 0.1

type Figures = dict[str, float | None]


@dataclass(frozen=True)
class Sample:
    """One measured request: which stack, a new conversation or a follow-up, and its figures."""

    stack: str
    kind: str
    parts: Figures  # TOTAL and PARTS
    floor: Figures = field(default_factory=dict)  # FLOOR and FLOOR_PARTS
    # what llama-server saw: "slot" (where the agent's task ran), "prompt_tokens" (processed,
    # i.e. not served from the slot's cache)
    extra: Figures = field(default_factory=dict)


def floor_total(floor: Figures) -> float | None:
    """The floor: the sum of its parts, None while one is missing."""
    values = [floor.get(part) for part in FLOOR_PARTS]
    if any(v is None for v in values):
        return None
    return round(sum(v for v in values if v is not None), 1)


def _values(samples: Iterable[Sample], key: str, *, of: str = "parts") -> list[float]:
    out = []
    for sample in samples:
        value = getattr(sample, of).get(key)
        if value is not None:
            out.append(float(value))
    return out


def slot_counts(samples: Iterable[Sample]) -> dict[str, int]:
    """How many requests ran on each slot ("?" when /slots did not show it)."""
    counts: dict[str, int] = {}
    for sample in samples:
        slot = sample.extra.get("slot")
        key = "?" if slot is None else str(int(slot))
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def _stats(values: list[float]) -> dict[str, float] | None:
    return median_p90(values) if values else None


def _ratio(ours: dict[str, float] | None, base: dict[str, float] | None, q: str) -> float | None:
    if ours is None or base is None or not base[q]:
        return None
    return round(ours[q] / base[q], 3)


def block(samples: Sequence[Sample]) -> dict[str, Any]:
    """Median and p90 of the total, each part, the floor and its parts; total / floor; the
    prompt tokens processed and the slots used."""
    total = _stats(_values(samples, TOTAL))
    floor = _stats(_values(samples, FLOOR, of="floor"))
    return {
        TOTAL: total,
        "parts": {part: _stats(_values(samples, part)) for part in (*PARTS, SPEECH_TO_TRANSCRIPT)},
        FLOOR: floor,
        "floor_parts": {part: _stats(_values(samples, part, of="floor")) for part in FLOOR_PARTS},
        "vs_floor": {"median": _ratio(total, floor, "median"), "p90": _ratio(total, floor, "p90")},
        "prompt_tokens_processed": _stats(_values(samples, "prompt_tokens", of="extra")),
        "slots": slot_counts(samples),
        "turns_ended_by_gateway": sum(bool(s.extra.get("ended_by_gateway")) for s in samples),
    }


def _by_kind(samples: Sequence[Sample], stack: str) -> dict[str, list[Sample]]:
    mine = [s for s in samples if s.stack == stack]
    return {"all": mine, **{kind: [s for s in mine if s.kind == kind] for kind in KINDS}}


def ratios(ours: dict[str, Any], stock: dict[str, Any]) -> dict[str, Any]:
    """Voice Stack / stock, median and p90, for the total and each part."""
    out: dict[str, Any] = {}
    pairs = [(TOTAL, ours[TOTAL], stock[TOTAL])]
    pairs += [
        (part, ours["parts"][part], stock["parts"][part]) for part in (*PARTS, SPEECH_TO_TRANSCRIPT)
    ]
    for name, mine, theirs in pairs:
        out[name] = {q: _ratio(mine, theirs, q) for q in ("median", "p90")}
    return out


def _goal(ratio: float | None, limit: float) -> dict[str, Any]:
    return {"ratio": ratio, "limit": limit, "met": ratio is not None and ratio <= limit}


def single_requests(samples: Sequence[Sample]) -> dict[str, Any]:
    """Phase 1: per stack and kind, the ratios, and the two goals measured on them."""
    ours = {kind: block(s) for kind, s in _by_kind(samples, OURS).items()}
    stock = {kind: block(s) for kind, s in _by_kind(samples, STOCK).items()}
    vs_stock = {kind: ratios(ours[kind], stock[kind]) for kind in ours}
    return {
        OURS: ours,
        STOCK: stock,
        "voice_stack_vs_stock": vs_stock,
        "goals": {
            "first_audio_vs_stock": _goal(
                vs_stock["all"][TOTAL]["median"], GOAL_FIRST_AUDIO_VS_STOCK
            ),
            "first_audio_vs_floor": _goal(
                ours["all"]["vs_floor"]["median"], GOAL_FIRST_AUDIO_VS_FLOOR
            ),
            "stt_wait_vs_wyoming_openai": _goal(
                vs_stock["all"]["stt_wait_ms"]["median"], GOAL_STT_WAIT_VS_STOCK
            ),
        },
    }
