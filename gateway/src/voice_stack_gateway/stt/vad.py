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
noise (webrtcvad then finds pauses inside words, or none at all): `too_noisy` says so, and the
words no longer end the turn (Home Assistant's VAD does, or the own VAD's hold). While too
noisy, HA's own speech model (microVAD, `pymicro-vad`) judges the frames instead: in steady
noise 5 dB below the voice, where webrtcvad hears speech throughout, it still hears the pause
(bench/room_bench.py). It costs about 0.3 ms of CPU a frame, on every frame of the utterance
from the room's first too-noisy one. `judges_pauses` says whether a pause may start an early
request on this frame.

With the own VAD there is no other judge, so microVAD judges as soon as the room is too noisy.
Otherwise it judges only after webrtcvad heard SETTLE_MS of speech (HA's audio-stop still ends
the turn): asked from the first syllables, before the noise estimate settles, it lagged the
sound in pink noise, and its cuts answered 0.2-0.7 s later than the whole audio sent at
audio-stop did (room run, 2026-12-04).

After a cut, microVAD also gives a second opinion (`second_opinion`, `model_heard`): the early
request's pause detector asks it whether a short burst webrtcvad calls speech is a word or a
clink of dishes (early.py). It starts at the first such burst, warmed on the 1.5 s before it so
its first verdict is already its own, and hears every frame from then on.

With the own VAD, microVAD runs from the utterance's first frame: its scores count HA's own hold
(`HaHold`, which HA does not run then), and its verdicts the own VAD's hold's pause (early.py).
"""

from __future__ import annotations

import math
from collections import deque

import webrtcvad  # type: ignore[import-untyped]
from pymicro_vad import MicroVad

from ..audio import rms
from .ha_hold import HaHold

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
SETTLE_MS = 1500  # speech heard before microVAD's pauses may start early requests
MODEL_THRESHOLD = 0.5  # microVAD's probability of speech that counts (as HA counts it)
HALF = FRAME_BYTES // 2  # microVAD takes 10 ms at a time
WARM_FRAMES = 75  # a second opinion's model first hears the last 1.5 s (it settles in 0.76 s)


class SpeechFrames:
    """Classifies 20 ms frames of 16 kHz 16-bit mono audio, and measures the room's noise.

    `model_after_ms`: while the room is too noisy, microVAD judges the frames once webrtcvad
    heard this much speech (0: the own VAD's case; None: never, webrtcvad alone). `ha_hold`: HA's
    own hold, counted on microVAD's scores from the first frame (the own VAD's case)."""

    def __init__(
        self, model_after_ms: int | None = SETTLE_MS, ha_hold: HaHold | None = None
    ) -> None:
        self._vad = webrtcvad.Vad(MODE)
        self._model_after = None if model_after_ms is None else model_after_ms // FRAME_MS
        self._model: MicroVad | None = None  # made when first needed
        self.ha_hold = ha_hold
        self._recent: deque[int] = deque(maxlen=NOISE_FRAMES)  # the frames' levels
        self._ring: deque[bytes] = deque(maxlen=WARM_FRAMES)  # a late model is warmed on them
        self.model_heard: bool | None = None  # microVAD's verdict on the last frame, if asked
        self._opinion_wanted = False  # a cut asked for microVAD's second opinion
        self.noise = DIGITAL_SILENCE  # the room's noise level now (RMS of 16-bit samples)
        self._level_sum = 0
        self._speech_frames = 0

    def is_speech(self, frame: bytes) -> bool:
        level = rms(frame)
        self._recent.append(level)
        ranked = sorted(self._recent)
        self.noise = max(ranked[len(ranked) * NOISE_PERCENTILE // 100], DIGITAL_SILENCE)
        heard = bool(self._vad.is_speech(frame, RATE))
        if heard:
            self._level_sum += level
            self._speech_frames += 1
        sound = heard or (
            self._speech_frames > 0
            and level >= max(self._level_sum / self._speech_frames * GUARD, self.noise * OVER_NOISE)
        )
        if sound and self._opinion_wanted and self._model is None:
            self._warm_model()
        self._ring.append(frame)
        model = self._model_hears(frame)  # None: no model (not asked for, or not noisy yet)
        self.model_heard = model
        if model is not None and self.too_noisy and self._model_settled:
            return model
        return sound

    def _model_hears(self, frame: bytes) -> bool | None:
        """microVAD's verdict, on every frame from the room's first too-noisy one (or from a
        second opinion's first, or with HA's hold from the first), so its state stays whole when
        the room changes back and forth (whether it judges is `_model_settled`'s say). Made
        unwarmed, its first 0.76 s it says nothing (-1): taken as speech, so no pause is counted
        on no evidence."""
        if self._model is None:
            if self.ha_hold is None and (self._model_after is None or not self.too_noisy):
                return None
            self._model = MicroVad()
        model = self._model
        first, second = model.process_10ms(frame[:HALF]), model.process_10ms(frame[HALF:])
        if self.ha_hold is not None:
            self.ha_hold.step(first)
            self.ha_hold.step(second)
        return _verdict(first, second)

    def second_opinion(self) -> None:
        """A cut was made: microVAD is to judge the sound after it too (`model_heard`). It
        starts on the first frame after the cut that sounds like speech, warmed on the frames
        before it: a cut with no sound after it costs nothing, and the early request is not held
        up by the warm-up (about 20 ms of CPU). No model with `model_after_ms` None."""
        self._opinion_wanted = self._model_after is not None

    def _warm_model(self) -> None:
        model = self._model = MicroVad()
        for frame in self._ring:
            model.process_10ms(frame[:HALF])
            model.process_10ms(frame[HALF:])

    @property
    def past_ha_hold_ms(self) -> int:
        """Audio since HA's own hold would have ended the turn (0: not yet, speech going on
        after it, or not counted)."""
        return 0 if self.ha_hold is None else self.ha_hold.past_ms

    @property
    def _model_settled(self) -> bool:
        """microVAD runs and may judge: webrtcvad heard the speech it waits for."""
        after = self._model_after
        return self._model is not None and after is not None and self._speech_frames >= after

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

    @property
    def judges_pauses(self) -> bool:
        """Whether a pause may cut on its last frame: the room is not too noisy, or microVAD
        judged the frame."""
        return not self.too_noisy or self._model_settled


def own_vad_frames(ha_hold_ms: int) -> SpeechFrames:
    """The frames STT_OWN_VAD judges: microVAD from the first frame, HA's own hold counted on it
    (one place, so bench/vad_bench.py measures what the gateway runs)."""
    return SpeechFrames(0, HaHold(ha_hold_ms))


def _verdict(first: float, second: float) -> bool:
    """microVAD's two 10 ms scores of a frame as speech or not: a score it cannot give yet (-1)
    is speech, so no pause is counted on no evidence."""
    return min(first, second) < 0 or max(first, second) >= MODEL_THRESHOLD
