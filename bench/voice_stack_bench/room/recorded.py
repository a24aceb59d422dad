"""Recorded human speech for the speech detector bench: the short test recordings shipped in the
pocketsphinx 5.1.1 sdist on PyPI (test/data: "go forward ten meters", card names, digits, two
short LibriVox sentences), as the corpus's `Spoken` utterances of the voice "recorded".

The sdist is fetched once into the git-ignored .cache/recorded (its sha256 checked), and only the
chosen recordings and its LICENSE are taken out of it. Its LICENSE is CMU's BSD-style 2-clause
licence over the whole distribution (test/data/vad alone is named as MIT); the test recordings
have no licence of their own, so they are under CMU's. LibriVox's recordings are public domain.

A recording is not digital silence around its words: it has its microphone's noise floor. Each
is trimmed by the corpus's own rule (corpus.trim: from the first to the last sample above
TRIM_LEVEL), with the level set at the recording's own silence: a sample counts as sound when
it stands above FLOOR_MARGIN x the loudest sample of the recording's quietest tenth of 20 ms
frames, so "the last word" ends where the speech rises above the room it was recorded in. The
speech between keeps its own noise floor, at its own level below the words.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
import time
import urllib.error
import urllib.request
import wave
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from voice_stack_bench.endpoint.corpus import BYTES_PER_MS, RATE, TRIM_LEVEL, Entry, Spoken, trim
from voice_stack_dev.paths import CACHE

SDIST = "pocketsphinx-5.1.1.tar.gz"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/61/e7/"
    f"13e0e787ff467218de880310d79cba14424f13b87171ac44af0bde1e428c/{SDIST}"
)
SDIST_SHA256 = "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355"
ROOT = "pocketsphinx-5.1.1/"  # the sdist's top folder
LICENCE = (
    "pocketsphinx 5.1.1's LICENSE: Copyright (c) 1999-2016 Carnegie Mellon University, BSD-style "
    "2-clause licence over the distribution, its test recordings included (only test/data/vad "
    "is named as MIT); the LibriVox sentences are public-domain LibriVox recordings"
)
RECORDED_CACHE = CACHE / "recorded"
DOWNLOAD_TIMEOUT_S = 300  # the whole download (34 MB)
SOCKET_TIMEOUT_S = 30  # each connect and read
FLOOR_FRAME_MS = 20
FLOOR_SHARE = 0.1  # the quietest tenth of a recording's frames: its own silence
FLOOR_MARGIN = 2.0  # sound: above twice the loudest sample of that silence (6 dB over it)


@dataclass(frozen=True)
class Recording:
    """One recording in the sdist, what is said in it, and who said what is said."""

    id: str
    member: str  # its path under the sdist's top folder
    text: str
    text_from: str  # the sdist's transcript, or what whisper heard (the sdist gives none)

    @property
    def entry(self) -> Entry:
        """The recording as the corpus's one-part complete request."""
        return Entry(self.id, "complete", (self.text,), 0)


_CARDS = "test/data/cards/cards.transcription"
_LIBRIVOX = "test/data/librivox/transcription"
_WHISPER = "whisper tiny.en's hearing (the sdist has no transcript)"
RECORDINGS = (
    Recording("ps-goforward", "test/data/goforward.raw", "go forward ten meters",
              "the sdist's cython/README.md"),
    Recording("ps-something", "test/data/something.raw", "go somewhere and do something",
              _WHISPER),
    Recording("ps-numbers", "test/data/numbers.raw", "thirty three four six nine two", _WHISPER),
    Recording("ps-cards-001", "test/data/cards/001.wav", "ten of clubs", _CARDS),
    Recording("ps-cards-002", "test/data/cards/002.wav", "four queen of clubs", _CARDS),
    Recording("ps-cards-003", "test/data/cards/003.wav", "seven of clubs", _CARDS),
    Recording("ps-cards-004", "test/data/cards/004.wav", "five five", _CARDS),
    Recording("ps-cards-005", "test/data/cards/005.wav",
              "eight of spades four of clubs seven of hearts", _CARDS),
    Recording("ps-librivox-0880",
              "test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav",
              "he was not an ill disposed young man", _LIBRIVOX),
    Recording("ps-librivox-0930",
              "test/data/librivox/sense_and_sensibility_01_austen_64kb-0930.wav",
              "he might even have been made amiable himself", _LIBRIVOX),
)  # fmt: skip
ENTRIES = tuple(r.entry for r in RECORDINGS)


class RecordingsUnavailable(RuntimeError):
    """The sdist could not be fetched, or is not the one expected."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(cache_dir: Path = RECORDED_CACHE) -> Path:
    """The sdist in `cache_dir`, downloaded from PyPI unless already there, its sha256 checked."""
    path = cache_dir / SDIST
    if path.is_file():
        if _sha256(path) == SDIST_SHA256:
            return path
        path.unlink()  # a damaged copy: fetched again
    cache_dir.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(f".part{os.getpid()}")
    digest, deadline = hashlib.sha256(), time.monotonic() + DOWNLOAD_TIMEOUT_S
    try:
        with urllib.request.urlopen(SDIST_URL, timeout=SOCKET_TIMEOUT_S) as resp, \
                part.open("wb") as out:  # fmt: skip
            while block := resp.read(1 << 20):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"not done in {DOWNLOAD_TIMEOUT_S} s")
                digest.update(block)
                out.write(block)
    except (OSError, urllib.error.URLError) as exc:  # TimeoutError is an OSError
        part.unlink(missing_ok=True)
        raise RecordingsUnavailable(
            f"could not fetch the recorded speech ({SDIST_URL}): {exc}; "
            f"or put the file at {path} (sha256 {SDIST_SHA256})"
        ) from exc
    if digest.hexdigest() != SDIST_SHA256:
        part.unlink(missing_ok=True)
        raise RecordingsUnavailable(
            f"{SDIST_URL} has sha256 {digest.hexdigest()}, not the expected {SDIST_SHA256}"
        )
    part.replace(path)
    return path


def extracted(cache_dir: Path = RECORDED_CACHE) -> Path:
    """The folder holding the chosen recordings and the sdist's LICENSE, as in the sdist (taken
    out of the sdist, fetched first if need be, when any is missing)."""
    out = cache_dir / ROOT
    wanted = {ROOT + r.member for r in RECORDINGS} | {ROOT + "LICENSE"}
    if all((cache_dir / name).is_file() for name in wanted):
        return out
    with tarfile.open(fetch_sdist(cache_dir), "r:gz") as sdist:
        for member in sdist:
            if member.name in wanted and member.isfile():
                data = sdist.extractfile(member)
                assert data is not None
                target = cache_dir / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                part = target.with_suffix(f".part{os.getpid()}")
                part.write_bytes(data.read())
                part.replace(target)
                wanted.discard(member.name)
    if wanted:
        raise RecordingsUnavailable(f"{SDIST} lacks {', '.join(sorted(wanted))}")
    return out


def pcm_of(recording: Recording, folder: Path) -> bytes:
    """A recording's 16 kHz 16-bit mono PCM: the .raw files are headerless little-endian PCM at
    16 kHz (pocketsphinx's own tests read them so), the .wav files say so in their header."""
    path = folder / recording.member
    if path.suffix == ".raw":
        return path.read_bytes()
    with wave.open(str(path), "rb") as w:
        shape = (w.getframerate(), w.getnchannels(), w.getsampwidth())
        if shape != (RATE, 1, 2):
            raise ValueError(f"{path}: {shape} (rate, channels, bytes), not ({RATE}, 1, 2)")
        return w.readframes(w.getnframes())


def sound_level(pcm: bytes) -> float:
    """The level above which a sample of the recording is sound: FLOOR_MARGIN x the loudest
    sample of its quietest FLOOR_SHARE of frames (by RMS), and never below TRIM_LEVEL."""
    samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2").astype(np.float64)
    size = RATE * FLOOR_FRAME_MS // 1000
    frames = samples[: len(samples) // size * size].reshape(-1, size)
    rms = np.sqrt(np.mean(frames**2, axis=1))
    quiet = frames[rms <= np.quantile(rms, FLOOR_SHARE)]
    return max(float(TRIM_LEVEL), FLOOR_MARGIN * float(np.abs(quiet).max()))


def spoken_recording(recording: Recording, pcm: bytes) -> Spoken:
    """The recording as a single-part utterance, trimmed by corpus.trim at its own sound level
    (the recording scaled so that level falls on TRIM_LEVEL; the speech kept unscaled)."""
    samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2").astype(np.float64)
    scaled = np.round(samples * TRIM_LEVEL / sound_level(pcm)).astype("<i2").tobytes()
    _, before_ms, after_ms = trim(scaled)
    first = round(before_ms * RATE / 1000)
    last = len(samples) - round(after_ms * RATE / 1000)
    speech = pcm[first * 2 : last * 2]
    cut = ((round(before_ms, 1), round(after_ms, 1)),)
    return Spoken(recording.entry, speech, ((0.0, len(speech) / BYTES_PER_MS),), cut)


@cache
def load(cache_dir: Path = RECORDED_CACHE) -> tuple[Spoken, ...]:
    """Every chosen recording, trimmed, in RECORDINGS' order (the sdist fetched on first use)."""
    folder = extracted(cache_dir)
    return tuple(spoken_recording(r, pcm_of(r, folder)) for r in RECORDINGS)
