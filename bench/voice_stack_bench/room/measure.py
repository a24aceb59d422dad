"""One scene of the grid through every speech detector, as the gateway feeds its own: a fresh
detector per utterance, 20 ms frames in order, its verdicts judged by the gateway's pause rule
(pauses.py), the CPU of its calls timed (time.process_time, every thread of this process, the
models' own included); and the same scene, longer, for Home Assistant's segmenter.

A detector hears the scene up to LATE_MS after the last word (later, an end counts as missed);
HA's segmenter hears it up to HA_AFTER_MS after the last word.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from voice_stack_bench.endpoint.corpus import Spoken

from .acoustics import ROOMS
from .detectors import FRAME_BYTES, Detector
from .grid import QUIET, Planned
from .pauses import FRAME_MS, LATE_MS, judge
from .scene import Scene

LEAD_MS = 300  # silence before the speech, as the cut-off corpus bench leads its utterances
HA_AFTER_MS = 6000  # HA's 0.7 s hold, after the last word, has 6 s of audio to end in


@runtime_checkable
class Judging(Protocol):
    """A detector that also says when the room is too noisy to judge pauses (the gateway's)."""

    def is_speech(self, frame: bytes) -> bool: ...

    @property
    def too_noisy(self) -> bool: ...


@dataclass(frozen=True)
class Heard:
    """One scene through one detector."""

    end_ms: float | None  # the pause seen after the last word, from the last word (None: missed)
    false_pauses: int  # pauses seen inside a part
    missed_pauses: int  # the utterance's pauses between parts not seen
    frames: int  # 20 ms frames judged
    cpu_s: float  # CPU of the detector's calls over those frames
    too_noisy: bool | None  # at its end (or its last frame): the gateway's judgment; else None


@dataclass(frozen=True)
class Measured:
    planned: Planned
    last_word_ms: float  # where the last word ends, from the audio's start
    gaps: int  # the utterance's pauses between parts
    heard: dict[str, Heard]  # detector -> what it made of the scene


def scene_of(planned: Planned, spoken: Spoken) -> Scene:
    cell = planned.cell
    kind = None if cell.noise == QUIET else cell.noise
    snr = None if cell.snr_db is None else float(cell.snr_db)
    return Scene(spoken, planned.voice, ROOMS[cell.room], kind, snr, planned.seed)


def hear(
    make: Callable[[], Detector], frames: list[bytes], spans: list[tuple[float, float]]
) -> Heard:
    detector = make()
    started = time.process_time()
    verdicts = [detector.is_speech(f) for f in frames]
    cpu = time.process_time() - started
    seen = judge(verdicts, spans)
    too_noisy = None
    if isinstance(detector, Judging):  # replayed untimed up to its end, where it would decide
        upto = len(frames)
        if seen.end_ms is not None:
            upto = round((spans[-1][1] + seen.end_ms) / FRAME_MS)
        again = make()
        for f in frames[:upto]:
            again.is_speech(f)
        too_noisy = bool(getattr(again, "too_noisy", False))
    return Heard(seen.end_ms, seen.false_pauses, seen.missed_pauses, len(frames), cpu, too_noisy)


def measure(
    planned: Planned, spoken: Spoken, detectors: dict[str, Callable[[], Detector]]
) -> tuple[Measured, bytes]:
    """The scene through every detector, and the audio for HA's segmenter (the last word and
    HA_AFTER_MS more)."""
    spans = [(start + LEAD_MS, end + LEAD_MS) for start, end in spoken.spans_ms]
    last = spans[-1][1]
    audio = scene_of(planned, spoken).audio(LEAD_MS, math.ceil(last + HA_AFTER_MS))
    judged = math.ceil((last + LATE_MS) / FRAME_MS) * FRAME_BYTES
    frames = [audio[at : at + FRAME_BYTES] for at in range(0, judged, FRAME_BYTES)]
    heard = {name: hear(make, frames, spans) for name, make in detectors.items()}
    return Measured(planned, last, len(spans) - 1, heard), audio
