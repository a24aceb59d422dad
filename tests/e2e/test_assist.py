"""The assist runner's audio framing (its runs against a real HA are in test_demo.py)."""

from __future__ import annotations

import array

from voice_stack_dev.assist import Pacing, trim_silence


def _pcm(*samples: int, repeat: int = 320) -> bytes:
    return array.array("h", [s for s in samples for _ in range(repeat)]).tobytes()


def test_trim_silence_keeps_speech_between_quiet_frames() -> None:
    quiet, loud = _pcm(0, 10, 0), _pcm(3000, -3000)
    assert trim_silence(quiet + loud + quiet) == loud
    assert trim_silence(quiet) == quiet  # nothing loud: nothing to trim to


def test_pacing_is_a_satellites_20_ms_of_16_khz_audio() -> None:
    assert Pacing().chunk_bytes == 640
    assert (Pacing().lead_silence_s, Pacing().trail_silence_s) == (0.3, 0.7)
