"""The speech in a room (`voice_e2e.py --room living/hvac@15`): every request placed in one of
the room bench's rooms under a noise at an SNR (bench/voice_stack_bench/room: scene.py), heard
the same on both stacks; what fast ASR is primed with; the JSON's statement of the room.

Each utterance is rendered once, at its longest (the lead-in, the speech, the longest trail any
pacing streams), and every shorter audio of it is cut from that: what a turn streams, what the
floor uploads and what fast mode is primed with are the same samples. The noise's seed comes from
the speech, so both stacks hear the same audio of a request and no two requests begin alike
(fast mode's prefix match tells them apart by their first 0.25 s, all noise). The dry speech is
placed where the silent version has it: `speech_end` is still the end of the dry speech.

The room's packages (numpy, scipy, pyroomacoustics: the ha11 venv) are imported only when a room
is asked for, so the benchmark without one, and its tests, run without them.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from voice_stack_dev.assist import Pacing

from ..endpoint.corpus import BYTES_PER_MS, Entry, Spoken, trim
from .asr import EARLY_PAUSE_MS, FIRST_WORDS_MS, prime_cuts_ms
from .turns import PACING, Utterance

HEADLINE = "living/hvac@15"  # issue 34's figure: a medium room, 15 dB SNR


def _room(module: str) -> Any:
    """voice_stack_bench.room's `module`, imported now (mypy checks room/ in the gw venv)."""
    return importlib.import_module(f"voice_stack_bench.room.{module}")


@dataclass(frozen=True)
class Heard:
    """How the speech is heard: a room (or "dry"), and a noise at an SNR (or none)."""

    room: str
    noise: str | None
    snr_db: float | None

    @property
    def name(self) -> str:
        return self.room + (f"/{self.noise}@{self.snr_db:g}" if self.noise else "")


def parse_heard(value: str) -> Heard:
    """`--room`: "living/hvac@15" (room/noise@SNR dB), or a room alone; the rooms and noises
    the room module knows."""
    room, _, noise_at = value.partition("/")
    kind, _, snr = noise_at.partition("@")
    rooms, kinds = ("dry", *_room("acoustics").ROOMS), _room("noise").KINDS
    if room not in rooms:
        raise argparse.ArgumentTypeError(f"room {room!r}: one of {', '.join(rooms)}")
    if not kind:
        return Heard(room, None, None)
    if kind not in kinds:
        raise argparse.ArgumentTypeError(f"noise {kind!r}: one of {', '.join(kinds)}")
    try:
        snr_db = float(snr)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: the SNR in dB after '@'") from None
    return Heard(room, kind, snr_db)


def _spoken(speech: bytes) -> Spoken:
    """The speech as the room's scene takes it: all of it, placed as given; its sound (from the
    first to the last sample above the corpus's TRIM_LEVEL) is what its level is set by."""
    _sound, before_ms, after_ms = trim(speech)
    span = (before_ms, len(speech) / BYTES_PER_MS - after_ms)
    return Spoken(Entry("e2e", "complete", ("",), 0), speech, (span,), ((0.0, 0.0),))


def seed_of(speech: bytes) -> int:
    return int.from_bytes(hashlib.sha256(speech).digest()[:4], "big")


class RoomAudio:
    """A `Pacing.room`: each speech rendered once in the room at `lead_ms`, `trail_ms` after it,
    and cut to the length asked for."""

    def __init__(self, heard: Heard, trail_ms: int) -> None:
        self.heard = heard
        self.trail_ms = trail_ms
        self._rendered: dict[tuple[bytes, int], bytes] = {}

    def __call__(self, speech: bytes, lead_ms: int, total_ms: int) -> bytes:
        audio = self.rendered(speech, lead_ms)
        if total_ms * BYTES_PER_MS > len(audio):
            raise ValueError(
                f"{total_ms} ms asked of a room audio of {len(audio) // BYTES_PER_MS} ms"
            )
        return audio[: total_ms * BYTES_PER_MS]

    def rendered(self, speech: bytes, lead_ms: int) -> bytes:
        key = (speech, lead_ms)
        if key not in self._rendered:
            scene = _room("scene")
            room = scene.room_named(self.heard.room)
            heard = scene.Scene(_spoken(speech), "piper", room, self.heard.noise,
                                self.heard.snr_db, seed_of(speech))  # fmt: skip
            total_ms = lead_ms + math.ceil(len(speech) / BYTES_PER_MS) + self.trail_ms
            self._rendered[key] = heard.audio(lead_ms, total_ms)
        return self._rendered[key]

    def primes(self, speech: bytes, lead_ms: int) -> list[bytes]:
        """What fast mode answers from (asr.prime_cuts_ms; the floor's upload, 0.7 s after the
        words, reaches the last too)."""
        audio = self.rendered(speech, lead_ms)
        first = trim(speech)[1]  # where its first sound is, ms
        spans = [(first, len(speech) / BYTES_PER_MS)]
        return [
            audio[: round((lead_ms + at) * BYTES_PER_MS) // 2 * 2] for at in prime_cuts_ms(spans)
        ]


@dataclass(frozen=True)
class RoomUtterance(Utterance):
    """An utterance whose audio as HA sends it (the floor's upload) is heard in the room."""

    sent: Pacing = PACING

    @property
    def as_sent(self) -> bytes:
        return self.sent.audio(self.pcm)[0]


class InRoom:
    """Room mode: the pacing every turn streams with, the utterances, the primes, the facts."""

    def __init__(self, heard: Heard, hold: Pacing) -> None:
        longest = max(hold.trail_silence_s, PACING.trail_silence_s)
        self.audio = RoomAudio(heard, math.ceil(longest * 1000))
        self.pacing = replace(hold, room=self.audio)
        self.sent = replace(PACING, room=self.audio)
        self.lead_ms = round(hold.lead_silence_s * 1000)
        self.primed = 0

    def utterances(self, speech: dict[str, Utterance]) -> dict[str, Utterance]:
        return {t: RoomUtterance(u.text, u.pcm, self.sent) for t, u in speech.items()}

    def primes(self, utterances: Iterable[Utterance]) -> list[bytes]:
        return [cut for u in utterances for cut in self.audio.primes(u.pcm, self.lead_ms)]

    def facts(self) -> dict[str, Any]:
        """The JSON's statement: the room, its measured RT60, the noise, the SNR, the level."""
        acoustics, scene, heard = _room("acoustics"), _room("scene"), self.audio.heard
        room = scene.room_named(heard.room)
        about: dict[str, Any] = {"heard": heard.name, "room": heard.room}
        if room is not None:
            rt60 = acoustics.measured_rt60(acoustics.impulse_response(room))
            about |= {"size_m": list(room.size_m), "rt60_target_s": room.rt60_s,
                      "rt60_measured_s": round(rt60, 2), "talker_distance_m": room.distance_m,
                      "about": room.describe()}  # fmt: skip
        return about | {
            "noise": heard.noise,
            "snr_db": heard.snr_db,
            "speech_dbfs": scene.SPEECH_DBFS,
            "how": "each request's speech (piper, trimmed) placed in the room with pyroomacoustics"
            " (direct sound aligned to the dry speech: its end is the end of speech measured;"
            " the echo rings on after), set to speech_dbfs while it sounds; the noise from the"
            " first sample to the last at snr_db below that, diffuse (steady) or from the far"
            " corner (babble, TV, dishes); the 0.3 s before the speech and the 'silence' after"
            " it are the room's noise and echo; the noise's seed from the speech: the same audio"
            " on both stacks",
            "fast_asr_primes": f"each request's room audio up to its first sound + "
            f"{FIRST_WORDS_MS} ms, its end, its end + {EARLY_PAUSE_MS} ms; the speech server's "
            "memo matching by prefix (an upload gets the transcript of the longest primed audio"
            " it begins with)",
            "primed": self.primed,
        }
