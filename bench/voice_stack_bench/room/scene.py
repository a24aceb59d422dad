"""One utterance in a room with noise: the audio a satellite's microphone sends, and where the
words are in it.

The speech is placed in the room (acoustics.py) with its direct sound aligned to the dry speech,
so each part's last word ends where the dry part ended; its echo rings on after. It is set to
SPEECH_DBFS (its level while the dry speech sounds), and the noise, running from the first
sample to the last, to SNR dB below that. A point-source noise (babble, TV, dishes) is placed in
the room too, from the far corner; steady noise is diffuse and added as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voice_stack_bench.endpoint.corpus import BYTES_PER_MS, Entry, Spoken, trim

from . import noise
from .acoustics import ROOMS, Room, place
from .voices import talk

SPEECH_DBFS = -30.0  # a talker 1-3 m from a far-field microphone, no auto gain
FULL_SCALE = 32768.0


@dataclass(frozen=True)
class Scene:
    """An utterance, in a voice, in a room, under a noise at an SNR (None: no noise)."""

    spoken: Spoken
    voice: str
    room: Room | None  # None: dry, the cut-off corpus's digital silence
    noise: str | None
    snr_db: float | None
    seed: int

    @property
    def name(self) -> str:
        room = self.room.name if self.room else "dry"
        heard = f"{self.noise}@{self.snr_db:g}dB" if self.noise and self.snr_db is not None \
            else "quiet"  # fmt: skip
        return f"{self.spoken.entry.id}/{self.voice}/{room}/{heard}"

    def audio(self, lead_ms: int, total_ms: int) -> bytes:
        """`lead_ms` before the speech, the speech, and up to `total_ms` in all, as 16-bit PCM."""
        dry = np.frombuffer(self.spoken.audio(lead_ms, total_ms), dtype="<i2").astype(np.float64)
        wet = place(dry, self.room) if self.room else dry
        active = _active(self.spoken, lead_ms, len(dry))
        wet *= 10 ** (SPEECH_DBFS / 20) * FULL_SCALE / _rms(wet[active])
        if self.noise is not None and self.snr_db is not None:
            wet += self._noise(len(dry)) * _rms(wet[active]) * 10 ** (-self.snr_db / 20)
        return np.clip(np.round(wet), -32768, 32767).astype("<i2").tobytes()

    def _noise(self, n: int) -> np.ndarray:
        assert self.noise is not None
        sound = noise.make(self.noise, n, self.seed, talk)
        if self.room is not None and self.noise in noise.FROM_A_PLACE:
            sound = place(sound, self.room, "noise")
        return sound / _rms(sound)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x**2))) + 1e-12


def _active(spoken: Spoken, lead_ms: int, n: int) -> np.ndarray:
    """Where the dry speech sounds: each part's span, as a mask over n samples."""
    mask = np.zeros(n, dtype=bool)
    for start, end in spoken.spans_ms:
        first, last = ((lead_ms + ms) * BYTES_PER_MS // 2 for ms in (start, end))
        mask[int(first) : int(last)] = True
    return mask


def room_named(name: str) -> Room | None:
    return None if name == "dry" else ROOMS[name]


def spoken_pcm(text: str, pcm: bytes) -> Spoken:
    """A single-part utterance from its 16 kHz PCM (trimmed as the corpus trims piper's)."""
    speech, before, after = trim(pcm)
    entry = Entry("pcm", "complete", (text,), 0)
    return Spoken(entry, speech, ((0.0, len(speech) / BYTES_PER_MS),), ((before, after),))


def in_room(
    text: str, pcm: bytes, heard: str, lead_ms: int, total_ms: int, *, seed: int = 1
) -> tuple[bytes, float]:
    """`pcm` spoken in a room under a noise, `heard` as "living/hvac@20" (room/noise@SNR, or a
    room alone; `seed` draws the noise): (the audio, where its last word ends in ms)."""
    room, _, noise_at = heard.partition("/")
    kind, _, snr = noise_at.partition("@")
    scene = Scene(spoken_pcm(text, pcm), "given", room_named(room), kind or None,
                  float(snr) if snr else None, seed=seed)  # fmt: skip
    return scene.audio(lead_ms, total_ms), lead_ms + scene.spoken.spans_ms[-1][1]
