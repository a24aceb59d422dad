"""Home Assistant's own end of speech, run as its Assist pipeline runs it (HA 2026.11:
`assist_pipeline/default_pipeline.py`), to decide when a client that stands in for HA sends
audio-stop, or where HA's hold alone would have ended the same audio.

The pipeline splits the stream into 10 ms chunks, scores each with microVAD
(`MicroVadSpeexEnhancer` with HA's default audio settings: VAD on, no auto gain, no noise
suppression) and feeds the score to a `VoiceCommandSegmenter(silence_seconds=...)`; the chunk on
which the segmenter says the command is over is not passed on, and the STT stream ends there.
Needs an environment with Home Assistant (the ha11 venv).
"""

from __future__ import annotations

from homeassistant.components.assist_pipeline.audio_enhancer import MicroVadSpeexEnhancer
from homeassistant.components.assist_pipeline.const import BYTES_PER_CHUNK, MS_PER_CHUNK
from homeassistant.components.assist_pipeline.vad import (
    AudioBuffer,
    VoiceCommandSegmenter,
    chunk_samples,
)

# HA's three "finished speaking detection" settings (VadSensitivity.to_seconds)
HOLDS_S = {"aggressive": 0.25, "default": 0.7, "relaxed": 1.25}
# A satellite's audio settings with HA's noise suppression and auto gain on (assist_pipeline's
# AudioSettings, as ESPHome's voice assistant examples set them): level 2 of 0-4, 31 dBFS
ENHANCED = {"auto_gain_dbfs": 31, "noise_suppression": 2}
BYTES_PER_MS = BYTES_PER_CHUNK // MS_PER_CHUNK


class HaHold:
    """One utterance's end of speech; feed it the client's chunks in order."""

    def __init__(
        self, silence_s: float, auto_gain_dbfs: int = 0, noise_suppression: int = 0
    ) -> None:
        self._enhancer = MicroVadSpeexEnhancer(auto_gain_dbfs, noise_suppression, True)
        self._segmenter = VoiceCommandSegmenter(silence_seconds=silence_s)
        self._leftover = AudioBuffer(BYTES_PER_CHUNK)
        self.passed = 0  # bytes HA has passed on to STT
        self.ended = False
        self.timed_out = False

    def feed(self, chunk: bytes) -> int:
        """How many bytes of `chunk` HA passes on; fewer than all once its VAD ends the command
        (then `ended` is set and nothing more passes)."""
        if self.ended:
            return 0
        before = self.passed
        for piece in chunk_samples(chunk, BYTES_PER_CHUNK, self._leftover):
            scored = self._enhancer.enhance_chunk(piece, self.passed // BYTES_PER_MS)
            if not self._segmenter.process(MS_PER_CHUNK / 1000, scored.speech_probability):
                self.ended = True
                self.timed_out = self._segmenter.timed_out
                break
            self.passed += len(piece)
        return self.passed - before

    @property
    def passed_ms(self) -> float:
        return float(self.passed / BYTES_PER_MS)


def hold_end_ms(
    audio: bytes,
    silence_s: float,
    chunk_bytes: int,
    auto_gain_dbfs: int = 0,
    noise_suppression: int = 0,
) -> float | None:
    """Where HA's hold ends `audio` (ms of audio passed on), fed in `chunk_bytes` chunks;
    None if it runs out of audio first."""
    hold = HaHold(silence_s, auto_gain_dbfs, noise_suppression)
    for at in range(0, len(audio), chunk_bytes):
        hold.feed(audio[at : at + chunk_bytes])
        if hold.ended:
            return hold.passed_ms
    return None
