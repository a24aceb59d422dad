"""What a speech detector makes of a scene, by the gateway's own pause rule (a pause is
STT_EARLY_PAUSE_MS of frames it calls silence, after at least MIN_SPEECH_MS of speech): how soon
after the last word it sees the pause, the pauses it sees inside the words, and the corpus's
pauses it misses."""

from __future__ import annotations

from dataclasses import dataclass

FRAME_MS = 20
PAUSE_MS = 300  # the gateway's default STT_EARLY_PAUSE_MS
MIN_SPEECH_MS = 250
LATE_MS = 3000  # no pause within this long after the last word: the end was missed


@dataclass(frozen=True)
class Seen:
    """One scene through one detector; times in ms of audio."""

    end_ms: float | None  # the pause after the last word, from the last word (None: missed)
    false_pauses: int  # pauses seen while a part was still being spoken
    missed_pauses: int  # the corpus's own pauses between parts that it did not see


def pauses(speech: list[bool]) -> list[float]:
    """Where each pause completes, in ms: PAUSE_MS of silence after enough speech, once per
    stretch of silence."""
    out: list[float] = []
    heard, quiet, armed = 0, 0, True
    need = PAUSE_MS // FRAME_MS
    for i, is_speech in enumerate(speech):
        if is_speech:
            heard, quiet, armed = heard + 1, 0, True
            continue
        quiet += 1
        if armed and quiet >= need and heard * FRAME_MS >= MIN_SPEECH_MS:
            out.append((i + 1) * FRAME_MS)
            armed = False
    return out


def judge(speech: list[bool], spans_ms: list[tuple[float, float]]) -> Seen:
    """`speech` per frame against the parts' spans (ms from the audio's start)."""
    seen = pauses(speech)
    last = spans_ms[-1][1]
    after = [t - last for t in seen if last < t <= last + LATE_MS]
    inside = sum(1 for t in seen if any(s + PAUSE_MS < t <= e for s, e in spans_ms))
    gaps = list(zip((e for _, e in spans_ms[:-1]), (s for s, _ in spans_ms[1:]), strict=True))
    missed = sum(1 for a, b in gaps if not any(a < t <= b for t in seen))
    return Seen(after[0] if after else None, inside, missed)
