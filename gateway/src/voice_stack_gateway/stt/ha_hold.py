"""Home Assistant's own hold, counted by the gateway when it ends every turn itself
(`STT_OWN_VAD`): there HA runs no segmenter, so the gateway counts the one HA would have run, and
ends the turn soon after it would have (turn.py, `HA_MARGIN_MS`) unless the speaker went on.

The rules are those of HA's `VoiceCommandSegmenter` (`assist_pipeline/vad.py`, HA 2026.10.4 and
2026.11.0), fed as its pipeline feeds it: microVAD's speech probability for each 10 ms of the
audio, the first 0.76 s, which microVAD cannot score, skipped. HA scores the audio before its
noise suppression and auto gain (`audio_enhancer.py`), the gateway the audio HA sends: with
those off for a satellite (HA's default) the same audio. A command starts after 0.3 s of speech
(probability above 0.2, gaps under 1 s allowed); it ends once 0.7 s of silence (at most 0.5)
and 1 s of command have passed. Speech restarts the silence count only after 1 s of it in a
row, so short bursts (babble, a clink microVAD takes for speech) do not hold the end off.
Counted in whole 10 ms chunks: for HA's three holds (0.25, 0.7 and 1.25 s) its float seconds need
the same number of chunks (25, 70 and 125), as do its 0.3 and 1 s.
"""

from __future__ import annotations

CHUNK_MS = 10
START_CHUNKS = 30  # speech_seconds: 0.3 s of speech starts a command...
START_LEVEL = 0.2  # ...at above this probability (before_command_speech_threshold)
SPEECH_LEVEL = 0.5  # in a command, speech is above this (in_command_speech_threshold)
COMMAND_CHUNKS = 100  # command_seconds: no command ends sooner
RESET_CHUNKS = 100  # reset_seconds: this much speech (or, before a command, quiet) in a row
RESUME_CHUNKS = 30  # after the end, 0.3 s of speech in a row (above SPEECH_LEVEL): going on


class HaHold:
    """One utterance's HA hold of `silence_ms` (700: HA's default), fed microVAD's scores."""

    def __init__(self, silence_ms: int) -> None:
        self._silence = max(1, silence_ms // CHUNK_MS)
        self._restart()

    def _restart(self) -> None:
        self._in_command = False
        self._start_left = START_CHUNKS
        self._silence_left = self._silence
        self._command_left = COMMAND_CHUNKS - START_CHUNKS
        self._reset_left = RESET_CHUNKS
        self._ended = False
        self._after = 0  # chunks since HA's hold would have ended the turn
        self._resumed = 0  # speech chunks in a row since then (microVAD's)

    @property
    def ended(self) -> bool:
        """HA's hold would have ended the turn, and no new command started since."""
        return self._ended

    @property
    def past_ms(self) -> int:
        """How much audio came since HA's hold would have ended the turn (0: it would not have
        yet)."""
        return self._after * CHUNK_MS if self._ended else 0

    def step(self, probability: float) -> None:
        """10 ms of audio with microVAD's speech probability (below 0: it cannot score yet)."""
        if probability < 0:
            return
        if self._ended:
            self._after_end(probability > SPEECH_LEVEL)
        elif self._in_command:
            self._in_command_step(probability > SPEECH_LEVEL)
        else:
            self._before_command(probability > START_LEVEL)

    def _before_command(self, speech: bool) -> None:
        if speech:
            self._reset_left = RESET_CHUNKS
            self._start_left -= 1
            if self._start_left <= 0:
                self._in_command = True
                self._silence_left = self._silence
        else:
            self._reset_left -= 1
            if self._reset_left <= 0:  # a second of quiet: the speech so far was not a start
                self._start_left, self._reset_left = START_CHUNKS, RESET_CHUNKS

    def _in_command_step(self, speech: bool) -> None:
        self._command_left -= 1
        if speech:
            self._reset_left -= 1
            if self._reset_left <= 0:  # a second of speech in a row: the silence starts over
                self._silence_left, self._reset_left = self._silence, RESET_CHUNKS
            return
        self._reset_left = RESET_CHUNKS
        self._silence_left -= 1
        self._ended = self._silence_left <= 0 and self._command_left <= 0

    def _after_end(self, speech: bool) -> None:
        """HA would have stopped listening; the gateway listens on for the margin. Speech going
        on after it is a new command to HA's rules, counted from the start (those 0.3 s not
        credited)."""
        self._after += 1
        self._resumed = self._resumed + 1 if speech else 0
        if self._resumed >= RESUME_CHUNKS:
            self._restart()
