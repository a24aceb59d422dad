"""vad.py: speech frames in real piper speech, and the energy guard after it."""

from __future__ import annotations

import asyncio
import math
import random
import struct

import pytest
import webrtcvad  # type: ignore[import-untyped]

from voice_stack_dev.procs import Service
from voice_stack_gateway.stt.vad import FRAME_BYTES, SpeechFrames

from .conftest import speech_pcm


@pytest.fixture(scope="module")
def phrase(speech_server: Service) -> bytes:
    return asyncio.run(speech_pcm(speech_server.url, "Turn on the kitchen light."))


def frames(pcm: bytes) -> list[bytes]:
    return [pcm[at : at + FRAME_BYTES] for at in range(0, len(pcm) - FRAME_BYTES + 1, FRAME_BYTES)]


def noise(dbfs: float, n: int = FRAME_BYTES // 2) -> bytes:
    rng = random.Random(1)
    amp = 32768 * 10 ** (dbfs / 20)
    return struct.pack(
        f"<{n}h", *(max(-32768, min(32767, int(rng.gauss(0, amp)))) for _ in range(n))
    )


def test_speech_and_silence(phrase: bytes) -> None:
    vad = SpeechFrames()
    assert not any(vad.is_speech(f) for f in frames(bytes(FRAME_BYTES * 20)))
    heard = [vad.is_speech(f) for f in frames(phrase)]
    assert sum(heard) > len(heard) / 2
    assert not any(vad.is_speech(f) for f in frames(noise(-55) * 20))  # a quiet room


def tone(freq: float, amplitude: float, frames_: int = 1) -> bytes:
    n = FRAME_BYTES // 2 * frames_
    return struct.pack(
        f"<{n}h", *(int(amplitude * math.sin(2 * math.pi * freq * i / 16000)) for i in range(n))
    )


def test_guard_hears_soft_sound_after_speech(phrase: bytes) -> None:
    """A sound 15 dB below the speech so far counts as speech even where webrtcvad says it is
    not (a 5 kHz whistle, which it ignores); noise 40 dB below does not."""
    vad, plain = SpeechFrames(), webrtcvad.Vad(3)
    for f in frames(phrase):
        vad.is_speech(f)
        plain.is_speech(f, 16000)
    whistle = tone(5000, 3000 * 10 ** (-15 / 20) * math.sqrt(2))
    assert not plain.is_speech(whistle, 16000)
    assert vad.is_speech(whistle)
    hiss = noise(20 * math.log10(3000 / 32768) - 40, FRAME_BYTES // 2 * 30)
    heard = [vad.is_speech(f) for f in frames(hiss)]
    assert not any(heard[10:]), heard
