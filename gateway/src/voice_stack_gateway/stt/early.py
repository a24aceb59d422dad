"""Early transcription: while the audio of an utterance still arrives, a pause after some speech
sends the audio so far to the backend at once, so the transcript is often ready when audio-stop
comes (Home Assistant sends it only after about 0.7 s of silence of its own).

Every decision counts audio frames, never the wall clock, so the same audio always gives the
same cuts however fast it is sent. No speech can be lost: an early transcript answers only if
no speech came after its cut; otherwise the whole audio is transcribed as usual.

After a cut, sound webrtcvad calls speech is speech only if microVAD (HA's own speech model)
hears it too, or once DOUBT_MS of it came since the cut: a clink of dishes is not, and used to
void the early request, so the whole audio waited for audio-stop. A doubted burst still counts
until OPEN_MS after it ends, and is speech after all if microVAD hears speech in that time: a
word's first frames often come before microVAD hears them. microVAD once missed a whole 400 ms
word that webrtcvad heard, which DOUBT_MS keeps (the room corpus replayed:
docs/notebook/end-of-turn.md, 2026-12-04). Where the room is too noisy for webrtcvad and
microVAD judges every frame (vad.py), there is no second opinion: microVAD alone decides.

The own VAD's hold counts its pause (`HoldPause`) with microVAD's word too (it runs from the
first frame then): sound it does not hear is pause, as it is to HA's hold. Cuts and the words'
endpoints still count webrtcvad's quiet alone: a clink re-arms the next cut (whose request
covers it), and holds off an end on the words (measured on the room corpus:
docs/notebook/end-of-turn.md, 2026-12-05).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import Protocol

from ..metrics import EarlyResult, Metrics
from .transcription import Transcription
from .vad import FRAME_BYTES, FRAME_MS, SpeechFrames

_LOGGER = logging.getLogger(__name__)
MIN_SPEECH_MS = 250  # speech before a pause counts
RESUME_MS = 100  # speech after a cut that makes its result useless; in a row, ends a pause
DOUBT_MS = 200  # after a cut, sound beyond this much in all is speech whatever microVAD says
OPEN_MS = 60  # a doubted burst counts as speech until this long after its last frame
RESUME_FRAMES = RESUME_MS // FRAME_MS
OPEN_FRAMES = OPEN_MS // FRAME_MS


class Signal(Enum):
    CUT = "cut"  # a pause after enough speech: transcribe the audio so far
    RESUMED = "resumed"  # speech again after the last cut: its result is useless


class Frames(Protocol):
    def is_speech(self, frame: bytes) -> bool:
        """Whether one 20 ms frame of 16 kHz 16-bit mono audio holds speech."""

    @property
    def too_noisy(self) -> bool:
        """Whether the speech stands too little above the room's noise for webrtcvad to judge
        pauses (and the words to end the turn)."""

    @property
    def judges_pauses(self) -> bool:
        """Whether a pause may cut on its last frame (not too noisy, or a model judged it)."""

    @property
    def model_heard(self) -> bool | None:
        """A model's verdict on the last frame (None: no model asked)."""

    def second_opinion(self) -> None:
        """A cut was made: a model is to judge the sound after it too (`model_heard`)."""

    @property
    def past_ha_hold_ms(self) -> int:
        """Audio since HA's own hold would have ended the turn (0: not yet, speech going on
        after it, or not counted)."""

    @property
    def noise_dbfs(self) -> float: ...

    @property
    def snr_db(self) -> float | None: ...


class HoldPause:
    """The own VAD's hold's pause, in frames: the audio since the last speech, RESUME_MS of
    sound in a row. With webrtcvad alone a shorter burst, a click, holds the count. Where
    microVAD runs (with the own VAD, from the first frame), a burst is speech only if microVAD
    hears speech in it or in the two frames after it; sound it does not hear (a clink of
    dishes, a door, a word it misses) is part of the pause, as it is to HA's hold. While sound
    it judges goes on, and until OPEN_MS after it (the same window as a doubted burst's after a
    cut), the pause reads 0: nothing ends the turn on a word's first frames, nor on a word
    microVAD is slow to hear (a median 37 ms after a word starts, p90 275 ms, on the room
    corpus)."""

    def __init__(self) -> None:
        self.frames = 0
        self._run = 0  # sound frames in a row
        self._run_heard = False  # microVAD heard speech in this run
        self._open: int | None = None  # quiet frames since sound microVAD judged, while open
        self._burst = 0  # how long that sound ran

    @property
    def ms(self) -> int:
        return 0 if self._open is not None else self.frames * FRAME_MS

    def step(self, sound: bool, heard: bool | None) -> None:
        """One frame: `sound` as the detector judged it, `heard` microVAD's verdict (None: no
        model runs)."""
        self._run = self._run + 1 if sound else 0
        self._run_heard = sound and (self._run_heard or bool(heard))
        if not sound or heard is False:
            self.frames += 1
        if sound and self._run >= RESUME_FRAMES and (heard is None or self._run_heard):
            self.frames, self._open = 0, None
        elif sound and heard is not None:
            self._open, self._burst = 0, self._run  # it may be a word's first frames
        elif self._open is not None:
            self._open += 1
            if self._open >= OPEN_FRAMES:
                self._open = None  # not heard in time: a clink, the pause goes on
            elif heard and self._burst >= RESUME_FRAMES:
                self.frames, self._open = 0, None  # heard late: it was speech


class PauseDetector:
    """Turns 16 kHz 16-bit mono audio into cut / resumed signals, by counting frames."""

    def __init__(self, pause_ms: int, frames: Frames | None = None) -> None:
        self._pause_frames = max(1, -(-pause_ms // FRAME_MS))
        self._frames: Frames = frames or SpeechFrames()
        self._carry = b""
        self._frames_seen = 0  # every frame of the utterance
        self._speech = 0  # speech frames in the utterance
        self._quiet = 0  # quiet frames since the last RESUME_MS of sound in a row (for cuts)
        self._hold = HoldPause()
        self._run = 0  # speech frames in a row
        self._after_cut = 0  # speech frames since the last cut
        self._doubted_at: int | None = None  # the last doubted frame since the cut (its number)
        self._doubted = 0  # doubted frames since the cut
        self._doubt_frames = DOUBT_MS // FRAME_MS
        self._cut = False  # a cut was made and no speech came after it yet...
        self.armed = True  # ...or speech came after it: a later pause may cut again
        self.cut_past_ha_hold = False  # the last cut came after HA's own hold would have ended

    @property
    def speech_after_cut(self) -> bool:
        """Speech came after the last cut, or a doubted burst is still open."""
        return self._after_cut > 0 or self._doubt_open

    def _doubt(self) -> bool:
        """Whether this sound after the cut is doubted: microVAD hears no speech in it, and
        less than DOUBT_MS of sound since the cut was doubted (more is speech, bursts split by
        a soft frame included)."""
        if self._frames.model_heard is not False or self._doubted + 1 >= self._doubt_frames:
            return False
        self._doubted_at = self._frames_seen
        self._doubted += 1
        return True

    @property
    def _doubt_open(self) -> bool:
        """A doubted burst ended less than OPEN_MS ago (or goes on)."""
        doubted = self._doubted_at
        return doubted is not None and self._frames_seen - doubted < OPEN_FRAMES

    @property
    def doubted_ms(self) -> int:
        """Sound after the last cut taken for no speech (webrtcvad heard it, microVAD did not)."""
        return self._doubted * FRAME_MS

    @property
    def noise(self) -> Frames:
        """The detector's measure of the room: its noise level, the speech over it."""
        return self._frames

    @property
    def too_noisy(self) -> bool:
        return self._frames.too_noisy

    @property
    def pause_ms(self) -> int:
        """The quiet heard since sound last ran RESUME_MS in a row (audio time, not the wall
        clock), which the words' endpoints count: a shorter burst, a click, does not restart
        it, and a longer one does whatever microVAD says (they end a turn before HA would, so
        any sound that may be a word holds them off)."""
        return self._quiet * FRAME_MS

    @property
    def hold_pause_ms(self) -> int:
        """The pause the own VAD's hold counts: `HoldPause`."""
        return self._hold.ms

    @property
    def past_ha_hold_ms(self) -> int:
        return self._frames.past_ha_hold_ms

    @property
    def sounding(self) -> bool:
        """The last frame was sound (speech to the detector, or a clink)."""
        return self._run > 0

    @property
    def audio_ms(self) -> int:
        """The audio judged so far."""
        return self._frames_seen * FRAME_MS

    @property
    def speech_ms(self) -> int:
        """The speech heard so far."""
        return self._speech * FRAME_MS

    def feed(self, pcm: bytes) -> list[Signal]:
        data = self._carry + pcm
        whole = len(data) - len(data) % FRAME_BYTES
        self._carry = data[whole:]
        signals = []
        for at in range(0, whole, FRAME_BYTES):
            signal = self._frame(self._frames.is_speech(data[at : at + FRAME_BYTES]))
            if signal is not None:
                signals.append(signal)
        return signals

    def flush(self) -> list[Signal]:
        """The end of the audio: a last partial frame is judged too (padded with silence)."""
        rest, self._carry = self._carry, b""
        return self.feed(rest + bytes(FRAME_BYTES - len(rest))) if rest else []

    def _frame(self, speech: bool) -> Signal | None:
        self._frames_seen += 1
        self._run = self._run + 1 if speech else 0
        self._hold.step(speech, self._frames.model_heard)
        if speech:
            self._speech += 1
            if self._run >= RESUME_FRAMES:  # a clink or a click does not end a pause
                self._quiet = 0
            if not self._cut:
                return None
            self.armed = True  # a later pause may cut again, doubted or not
            if self._doubt():
                return None
            self._after_cut += 1
            return Signal.RESUMED if self._after_cut == RESUME_FRAMES else None
        self._quiet += 1
        if self._cut and self._doubt_open and self._frames.model_heard:
            self._after_cut += 1  # microVAD heard a doubted burst late: it was speech
        enough = self._speech * FRAME_MS >= MIN_SPEECH_MS
        # too noisy for webrtcvad, and microVAD did not judge this frame: the pause may be noise
        # taken for speech ending, so no request is spent on it yet. Its quiet frames still count
        # once a frame may cut: where the SNR estimate starts too noisy (pink noise), webrtcvad's
        # pause after the words was real; dropping it delayed the cut 0.28-0.44 s (the pink
        # scenes of tests/gateway/test_early.py, 2026-12-04).
        trusted = self._frames.judges_pauses
        if self.armed and enough and self._quiet >= self._pause_frames and trusted:
            self.armed = False
            self._cut = True
            self._after_cut = 0
            self._doubted_at = None
            self._doubted = 0
            self._frames.second_opinion()
            self.cut_past_ha_hold = self._frames.past_ha_hold_ms > 0
            return Signal.CUT
        return None


class EarlyTranscription:
    """The early requests of one utterance: at most `max_cuts`, one in flight at a time."""

    def __init__(
        self,
        metrics: Metrics,
        start: Callable[[], Transcription],
        pause_ms: int,
        max_cuts: int,
        frames: Frames | None = None,
    ) -> None:
        self._metrics = metrics
        self._start = start
        self._max = max_cuts
        self._detector = PauseDetector(pause_ms, frames)
        self.cuts = 0
        self.current: Transcription | None = None
        self._dropped: list[Transcription] = []

    def feed(self, pcm16k: bytes) -> None:
        for signal in self._detector.feed(pcm16k):
            if signal is Signal.RESUMED:
                self._drop("speech resumed")
                continue
            # a later cut means speech came after the current request's cut: it cannot answer
            self._drop("a later pause")
            if self.cuts < self._max:
                self.cuts += 1
                self.current = self._start()
                _LOGGER.debug("Early transcription %d of %d started", self.cuts, self._max)

    @property
    def pause_ms(self) -> int:
        return self._detector.pause_ms

    @property
    def hold_pause_ms(self) -> int:
        return self._detector.hold_pause_ms

    @property
    def past_ha_hold_ms(self) -> int:
        return self._detector.past_ha_hold_ms

    @property
    def cut_past_ha_hold(self) -> bool:
        return self._detector.cut_past_ha_hold

    @property
    def sounding(self) -> bool:
        return self._detector.sounding

    @property
    def speech_after_cut(self) -> bool:
        return self._detector.speech_after_cut

    @property
    def noise(self) -> Frames:
        return self._detector.noise

    @property
    def audio_ms(self) -> int:
        return self._detector.audio_ms

    @property
    def speech_ms(self) -> int:
        return self._detector.speech_ms

    def take(self) -> Transcription | None:
        """The current request, which this utterance no longer drops or closes (its answer)."""
        current, self.current = self.current, None
        if current is not None and (doubted := self._detector.doubted_ms):
            _LOGGER.debug(
                "Early transcription %d kept: %d ms of sound after its cut was no speech to"
                " microVAD (a clink, a door)",
                self.cuts,
                doubted,
            )
        return current

    def at_stop(self) -> Transcription | None:
        """audio-stop: the early request that answers, if no speech came after its cut.

        The padded last frame is judged too: if it is speech, or completes a pause that cuts
        again (a cut needs speech after the one before), the request misses audio.
        """
        if self._detector.flush() or self._detector.speech_after_cut:
            self._drop("speech after the last cut")
        return self.take()

    async def close(self) -> None:
        """The utterance is over: no early request may outlive it."""
        self._drop("the utterance ended")
        dropped, self._dropped = self._dropped, []
        for transcription in dropped:
            await transcription.close()

    def _drop(self, why: str) -> None:
        if self.current is not None:
            _LOGGER.debug("Early transcription %d dropped: %s", self.cuts, why)
            self.current.cancel()
            self._dropped.append(self.current)
            self.current = None
            self._metrics.early[EarlyResult.WASTED] += 1
