"""Speech or not, 20 ms frame by frame, for early transcription and the gateway's end of turn.

webrtcvad (webrtcvad-wheels, the maintained build of Google's WebRTC detector) in its aggressive
mode (3) decides first. On the room corpus it saw the end of a request in steady noise, babble
and a TV as soon as or sooner than Silero, TEN VAD or HA's microVAD, at a few us of CPU per
20 ms frame against 0.2-1.2 ms (docs/gateway.md, "The speech detector").

webrtcvad calls some soft in-word frames silence, so a frame it rejects still counts as speech
when it is loud for this room: within 20 dB of the speech heard so far *and* 6 dB above the
room's noise. The noise level is a low percentile of the last 1.5 s of frames: the gaps between
words in a quiet room, the noise itself in a noisy one. The noise term is what makes the rule
hold in a room: measured against the speech alone (before 2026-12-03), a fan 20 dB below the
voice counted as speech for ever and no pause was ever seen.

When the speech stands less than MIN_SNR_DB above the noise, a pause cannot be told from the
noise (webrtcvad then finds pauses inside words): `too_noisy` says so, and the gateway leaves
the turn to Home Assistant.
"""

from __future__ import annotations

import math
from collections import deque

import webrtcvad  # type: ignore[import-untyped]

from ..audio import rms

RATE = 16000
FRAME_MS = 20
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2  # 16-bit mono
MODE = 3
GUARD = 0.1  # at least this fraction of the mean speech level (-20 dB)...
OVER_NOISE = 2.0  # ...and this many times the room's noise (+6 dB) counts as speech
NOISE_FRAMES = 75  # the noise is measured over the last 1.5 s...
NOISE_PERCENTILE = 20  # ...as this percentile of its frames' levels
MIN_SNR_DB = 6.0  # speech less than this above the noise: too noisy to judge pauses
DIGITAL_SILENCE = 1  # the noise level of digital silence: any sound at all is above it


class SpeechFrames:
    """Classifies 20 ms frames of 16 kHz 16-bit mono audio, and measures the room's noise."""

    def __init__(self) -> None:
        self._vad = webrtcvad.Vad(MODE)
        self._recent: deque[int] = deque(maxlen=NOISE_FRAMES)  # the frames' levels
        self.noise = DIGITAL_SILENCE  # the room's noise level now (RMS of 16-bit samples)
        self._level_sum = 0
        self._speech_frames = 0

    def is_speech(self, frame: bytes) -> bool:
        level = rms(frame)
        self._recent.append(level)
        ranked = sorted(self._recent)
        self.noise = max(ranked[len(ranked) * NOISE_PERCENTILE // 100], DIGITAL_SILENCE)
        if self._vad.is_speech(frame, RATE):
            self._level_sum += level
            self._speech_frames += 1
            return True
        return self._speech_frames > 0 and level >= max(
            self._level_sum / self._speech_frames * GUARD, self.noise * OVER_NOISE
        )

    @property
    def noise_dbfs(self) -> float:
        return 20 * math.log10(self.noise / 32768)

    @property
    def snr_db(self) -> float | None:
        """The mean speech level over the noise, once speech was heard."""
        if not self._speech_frames:
            return None
        return 20 * math.log10(max(self._level_sum / self._speech_frames, 1) / self.noise)

    @property
    def too_noisy(self) -> bool:
        snr = self.snr_db
        return snr is not None and snr < MIN_SNR_DB
