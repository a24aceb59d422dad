"""Voices besides the speech server's piper: espeak-ng's (Debian's espeak-ng), each part
synthesized on its own and trimmed as the cut-off corpus trims piper's."""

from __future__ import annotations

import hashlib
import io
import subprocess
import wave
from functools import cache

import numpy as np
from scipy.signal import resample_poly  # type: ignore[import-untyped]

from voice_stack_bench.endpoint.corpus import BYTES_PER_MS, Entry, Spoken, trim
from voice_stack_dev.paths import CACHE

from .acoustics import RATE

ESPEAK_VOICES = ("en-us+m3", "en-gb+f3")  # a US man, a British woman
WPM = 160  # espeak-ng's default is 175: hurried for a spoken request
AUDIO_CACHE = CACHE / "room-corpus" / "espeak"


def _espeak_pcm(voice: str, text: str) -> bytes:
    """espeak-ng's speech of `text` as 16 kHz 16-bit mono PCM, cached on disk."""
    key = hashlib.sha256(f"{voice}|{WPM}|{RATE}|{text}".encode()).hexdigest()[:20]
    path = AUDIO_CACHE / f"{key}.pcm"
    if path.is_file():
        return path.read_bytes()
    argv = ["espeak-ng", "-v", voice, "-s", str(WPM), "--stdout", text]
    out = bytes(subprocess.run(argv, capture_output=True, check=True, timeout=60).stdout)
    with wave.open(io.BytesIO(out)) as w:
        rate, frames = w.getframerate(), w.readframes(w.getnframes())
    samples = np.frombuffer(frames, dtype="<i2").astype(np.float64)
    pcm = bytes(np.clip(resample_poly(samples, RATE, rate), -32768, 32767).astype("<i2").tobytes())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pcm)
    return pcm


def speak_espeak(entry: Entry, voice: str) -> Spoken:
    """An entry in an espeak-ng voice: its parts one by one, joined by its pause."""
    speech, spans, cuts = b"", [], []
    for i, text in enumerate(entry.parts):
        if i:
            speech += bytes(entry.pause_ms * BYTES_PER_MS)
        part, before, after = trim(_espeak_pcm(voice, text))
        start = len(speech) / BYTES_PER_MS
        speech += part
        spans.append((start, len(speech) / BYTES_PER_MS))
        cuts.append((round(before, 1), round(after, 1)))
    return Spoken(entry, speech, tuple(spans), tuple(cuts))


@cache
def talk(voice: str, text: str) -> np.ndarray:
    """espeak-ng's speech as floats, for the noise of other voices."""
    return np.frombuffer(_espeak_pcm(voice, text), dtype="<i2").astype(np.float64)
