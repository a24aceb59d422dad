"""Who ends a speech turn, and why: one pure function, `decide`, over what is known of the turn
(`Heard`) when something happens to it. The rules it applies are written out for users once, in
docs/gateway.md ("End of turn"); each is one branch here, with the reason the debug log prints:
the words (complete after the endpoint, weakly complete after the weak one, never when the
room is too noisy to judge pauses), and with the gateway's own VAD the hold (at most HA's
when the words cannot be judged), HA_MARGIN_MS after HA's own hold would have ended the turn
(ha_hold.py), HA's 15 s cap and "no speech"; nothing ends while an earlier
answer is still going out (answers keep the order of the requests).

Every figure counts audio frames, never the wall clock, so the same audio always ends the same
way however fast it is sent (HA's segmenter counts the audio's seconds too).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..config import HA_CAP_MS
from ..metrics import EndedBy
from .complete import TABLES, Verdict, language_of
from .early import MIN_SPEECH_MS

CAP_MS = HA_CAP_MS
HA_HOLD_MS = 700  # its silence_seconds by default (VadSensitivity.DEFAULT)
# Own VAD: a turn runs this much audio past where HA's own hold would have ended it. Then the
# whole audio is usually transcribed: with a GPU-class ASR the transcript comes 0.25 s after
# HA's hold would have ended the turn (at 250 ms it came 0.34-0.36 s after: room run 2026-12-05).
HA_MARGIN_MS = 150
NO_PAUSE = "no pause after speech"


class Happening(Enum):
    """What happened to the turn."""

    AUDIO = "audio"  # a chunk was heard (the pause detector has judged it)
    EARLY_RESULT = "early result"  # the early request of the last cut came back (or failed)
    AUDIO_STOP = "audio-stop"  # the client ended the turn


class Phase(Enum):
    LISTENING = "listening"  # no early request in flight
    CUT = "cut"  # an early request for the last pause is in flight or back
    ENDED = "ended"  # the gateway ended it before audio-stop: its answer is on the way
    ANSWERED = "answered"  # audio-stop came and was answered (or the turn was closed)


class Answer(Enum):
    """What answers a turn the gateway ends."""

    EARLY = "the early transcript"
    AS_AT_STOP = "as at audio-stop"  # the early transcript if nothing followed its cut, else all
    SILENCE = "an empty transcript"  # no speech: HA's "No text recognized"


@dataclass(frozen=True, slots=True)
class Rules:
    """The settings a turn is decided by (0 / None: that rule is off)."""

    endpoint_ms: int  # above 0 (with 0, the end of turn is off: nothing is decided)
    weak_ms: int  # a weak verdict's endpoint; never shorter than endpoint_ms
    hold_ms: int | None  # own VAD's hold for other words (None: the client runs its VAD)
    judged: bool = True  # the language has a word table: its words can tell a request goes on

    @classmethod
    def of(
        cls, endpoint_ms: int, weak_ms: int, own_hold_ms: int | None, language: str | None
    ) -> Rules:
        """The rules for a request in `language`: without a word table, at most HA's hold."""
        judged = language_of(language) in TABLES
        hold = own_hold_ms
        if hold is not None and not judged:
            hold = min(hold, HA_HOLD_MS)
        return cls(endpoint_ms, max(endpoint_ms, weak_ms), hold, judged)


@dataclass(frozen=True, slots=True)
class Heard:
    """What is known of the turn when something happens: the pause detector's counts, the early
    request of the last cut and its verdict, and whether an earlier answer is still going out."""

    audio_ms: int = 0
    speech_ms: int = 0
    pause_ms: int = 0  # the quiet since the last speech (a burst under 100 ms is no speech)
    hold_pause_ms: int = 0  # the own VAD's (early.py `HoldPause`: a clink is no speech either)
    past_ha_hold_ms: int = 0  # audio since HA's own hold would have ended it (ha_hold.py)
    sounding: bool = False  # the last frame was sound
    cuts: int = 0  # early requests started
    speech_after_cut: bool = False
    cut_past_ha_hold: bool = False  # the last cut came after HA's own hold would have ended it
    early: str = "none"  # the last cut's request: "none" (dropped), "pending", "failed", "back"
    words: str = ""  # its transcript, stripped, once back
    verdict: Verdict | None = None  # judge(words), once back
    busy: bool = False  # the answer to an earlier request is still being sent
    noisy: str | None = None  # too noisy to judge pauses: the measure, as the log says it


@dataclass(frozen=True, slots=True)
class Wait:
    why: str  # what is missing (printed when audio-stop ends the turn)


@dataclass(frozen=True, slots=True)
class End:
    answer: Answer
    by: EndedBy
    why: str


@dataclass(frozen=True, slots=True)
class Left:
    """audio-stop came first: the client ended the turn; answered as at audio-stop."""

    why: str


Decision = Wait | End | Left


def decide(rules: Rules, heard: Heard, happening: Happening) -> Decision:
    """What to do now that `happening` happened to a turn the gateway has not ended."""
    if happening is Happening.AUDIO_STOP:  # why it had not ended (each chunk was decided on)
        return Left(decide(rules, heard, Happening.AUDIO).why)
    noisy = heard.noisy is not None and f"too noisy to judge pauses ({heard.noisy})"
    why = noisy or _waiting_for(rules, heard)
    if why is None:
        return _unless_busy(heard, End(Answer.EARLY, EndedBy.GATEWAY, _ended_why(rules, heard)))
    if rules.hold_ms is not None and (stop := _own_stop(rules, heard, why)):
        return _unless_busy(heard, stop)
    return Wait(why)


def _hold(rules: Rules, heard: Heard) -> int:
    """The own VAD's hold: too noisy to judge the words, at most HA's (microVAD counts the
    pause then, as in HA's own segmenter: a longer hold would only end later than HA)."""
    assert rules.hold_ms is not None
    return min(rules.hold_ms, HA_HOLD_MS) if heard.noisy is not None else rules.hold_ms


def _unless_busy(heard: Heard, end: End) -> Decision:
    return Wait("the answer to an earlier request was still being sent") if heard.busy else end


def _waiting_for(rules: Rules, heard: Heard) -> str | None:
    """Why the words cannot end the turn yet; None when they may."""
    if heard.early != "back" or heard.verdict is None:
        return _no_words(heard)
    words, verdict = heard.words, heard.verdict
    if not verdict.complete:
        return f"{words!r} does not read complete: {verdict.why}"
    if heard.speech_after_cut:
        return "speech after the last cut"
    needed = _needed(rules, verdict)
    if heard.pause_ms >= needed:
        return None
    if needed > rules.endpoint_ms:
        return (
            f"{words!r} reads complete only weakly ({verdict.why}), but the pause was"
            f" {heard.pause_ms} ms (< the weak endpoint's {needed} ms)"
        )
    return f"{words!r} reads complete, but the pause was {heard.pause_ms} ms"


def _no_words(heard: Heard) -> str:
    if heard.early == "none":
        return "speech after the last cut" if heard.cuts else NO_PAUSE
    state = "failed" if heard.early == "failed" else "was not back yet"
    return f"early transcription {heard.cuts} {state}"


def _needed(rules: Rules, verdict: Verdict) -> int:
    return rules.weak_ms if verdict.weak else rules.endpoint_ms


def _ended_why(rules: Rules, heard: Heard) -> str:
    assert heard.verdict is not None
    needed = _needed(rules, heard.verdict)
    limit = f"the weak endpoint's {needed} ms" if needed > rules.endpoint_ms else f"{needed} ms"
    return f"a {heard.pause_ms} ms pause (>= {limit}), {heard.words!r}: {heard.verdict.why}"


def _going_on(rules: Rules, heard: Heard) -> bool:
    """Past HA's own hold, whether the request may be going on. The words tell once back:
    words that cannot end ("what is the weather like in") hold the end to the own hold however
    quiet the pause (in a dry room HA's hold ends a thinking pause before the own hold would).
    Words on their way are waited for if their cut came before HA's hold ended; a cut after it
    is of a flicker in the noise after the request, whose transcript answers the turn either
    way (waiting on one ran 0.33 s past HA's hold under pink noise). Without words (none, an
    empty transcript, a language without a word table), sound webrtcvad hears holds it:
    microVAD, which HA's hold counts on, heard a word after a pause up to 0.45 s late in noise.
    In a room too noisy for webrtcvad nothing tells a word from the noise, and the turn ends as
    HA's would (room corpus, docs/notebook/end-of-turn.md)."""
    if heard.noisy is not None:
        return False
    if rules.judged and heard.early == "pending" and not heard.cut_past_ha_hold:
        return True
    if rules.judged and heard.early == "back" and heard.words and heard.verdict is not None:
        return not heard.verdict.complete
    return heard.sounding


def _own_stop(rules: Rules, heard: Heard, waiting: str) -> End | None:
    """The gateway's own VAD: the cap, HA's own hold's end and a margin, or the hold after
    speech; `waiting` says why the words did not end the turn."""
    if heard.audio_ms >= CAP_MS:
        if not heard.speech_ms:
            why = f"no speech in {CAP_MS} ms of audio (Home Assistant's timeout)"
            return End(Answer.SILENCE, EndedBy.NO_SPEECH, why)
        why = f"{CAP_MS} ms of audio (Home Assistant's cap), and {waiting}"
        return End(Answer.AS_AT_STOP, EndedBy.CAP, why)
    if heard.past_ha_hold_ms >= HA_MARGIN_MS and not _going_on(rules, heard):
        why = (
            f"Home Assistant's own hold would have ended it {heard.past_ha_hold_ms} ms before"
            f" (>= {HA_MARGIN_MS} ms), and {waiting}"
        )
        return End(Answer.AS_AT_STOP, EndedBy.HA_HOLD, why)
    hold_ms = _hold(rules, heard)
    if heard.speech_ms >= MIN_SPEECH_MS and heard.hold_pause_ms >= hold_ms:
        why = f"a {heard.hold_pause_ms} ms pause (>= the {hold_ms} ms hold), and {waiting}"
        return End(Answer.AS_AT_STOP, EndedBy.HOLD, why)
    return None
