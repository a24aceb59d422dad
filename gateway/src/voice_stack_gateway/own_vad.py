"""The gateway's own end of speech (--stt-own-vad). Its info then says `requires_external_vad:
false`, so Home Assistant runs no VAD of its own (its segmenter runs only for a provider that
requires one) and streams audio until the STT answers: the gateway must end every stream, as
HA's VoiceCommandSegmenter would have (docs/gateway.md, "The gateway's own end of speech"):

- words that read complete after --stt-endpoint-ms: endpoint.py, as without this setting;
- any other words (not complete, not back yet, failed, or no early request left) after the
  longer --stt-incomplete-hold-ms: answered as at audio-stop (the early transcript if no speech
  followed its cut, else the whole audio);
- in a language without a word table (complete.py) no words can read complete: HA's default
  hold, 700 ms, stands in for the longer one, so those turns end as they would without this;
- 15 s of audio, HA's cap: answered the same way; with no speech heard at all, an empty
  transcript, which HA answers with its "No text recognized" (stt-no-text-recognized), as when
  its own timeout ends a silent stream and the ASR hears nothing.

Like every other decision here, these count audio frames, never the wall clock (HA's segmenter
also counts the audio's seconds).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from .complete import TABLES, language_of
from .early import MIN_SPEECH_MS, EarlyTranscription
from .metrics import EndedBy

CAP_MS = 15_000  # HA's VoiceCommandSegmenter.timeout_seconds
HA_HOLD_MS = 700  # its silence_seconds by default (VadSensitivity.DEFAULT)


class Without(Enum):
    """How a turn the gateway ends without an early transcript in hand is answered."""

    AUDIO = "as at audio-stop"  # the early transcript if nothing followed its cut, else all audio
    SILENCE = "an empty transcript"  # no speech: HA's "No text recognized"


class Stop(NamedTuple):
    by: EndedBy
    answer: Without
    why: str  # for the debug log


def hold_for(language: str | None, hold_ms: int) -> int:
    """The hold for a request's language: without a word table, at most HA's default."""
    return hold_ms if language_of(language) in TABLES else min(hold_ms, HA_HOLD_MS)


def own_stop(early: EarlyTranscription, hold_ms: int, waiting: str) -> Stop | None:
    """Whether the gateway's own VAD ends the turn now; `waiting` says why the words did not
    end it (the end of turn's own reason)."""
    if early.audio_ms >= CAP_MS:
        if not early.speech_ms:
            why = f"no speech in {CAP_MS} ms of audio (Home Assistant's timeout)"
            return Stop(EndedBy.NO_SPEECH, Without.SILENCE, why)
        why = f"{CAP_MS} ms of audio (Home Assistant's cap), and {waiting}"
        return Stop(EndedBy.CAP, Without.AUDIO, why)
    pause = early.pause_ms
    if early.speech_ms >= MIN_SPEECH_MS and pause >= hold_ms:
        why = f"a {pause} ms pause (>= the {hold_ms} ms hold), and {waiting}"
        return Stop(EndedBy.HOLD, Without.AUDIO, why)
    return None
