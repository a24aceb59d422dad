"""turn.py: who ends a speech turn, and why, as decision tables: what is known of the turn
(`Heard`) and what happened, against the decision and the reason the log prints. No audio, no
tasks: the detector's counting is test_early.py's, acting on a decision test_endpoint.py's."""

from __future__ import annotations

from typing import Any

import pytest

from voice_stack_gateway.metrics import EndedBy
from voice_stack_gateway.stt.complete import judge
from voice_stack_gateway.stt.turn import (
    CAP_MS,
    HA_HOLD_MS,
    HA_MARGIN_MS,
    Answer,
    Decision,
    End,
    Happening,
    Heard,
    Left,
    Rules,
    Wait,
    decide,
)

AUDIO, BACK, STOP = Happening.AUDIO, Happening.EARLY_RESULT, Happening.AUDIO_STOP
CLIENT = Rules.of(400, 700, None, "en")  # the default: the client's VAD ends other turns
ONE_TIER = Rules.of(400, 0, None, "en")
OWN = Rules.of(400, 700, 1300, "en")  # --stt-own-vad
OWN_DE = Rules.of(400, 700, 1300, "de")  # no word table: at most HA's hold
LIGHT = "Turn on the kitchen light."
BUSY = "the answer to an earlier request was still being sent"
CANNOT = f"'Turn on the' does not read complete: {judge('Turn on the', 'en').why}"
DIM = "Dim the lights in there."
NOISY = "speech 4.0 dB over noise at -33.0 dBFS"


def back(words: str, **known: Any) -> Heard:
    """A turn whose last cut's early transcript came back with `words`, 1 s of speech before."""
    return Heard(early="back", words=words, verdict=judge(words, "en"), **facts_of(known))


def early(state: str, **known: Any) -> Heard:
    return Heard(early=state, **facts_of(known))


def facts_of(known: dict[str, Any]) -> dict[str, Any]:
    """The turn's counts; the hold's pause is the words' unless a clink parts them."""
    facts = {"audio_ms": 1600, "speech_ms": 1000, "pause_ms": 300, "cuts": 1} | known
    return {"hold_pause_ms": facts["pause_ms"]} | facts


def light_ends(pause_ms: int, limit: str = "400 ms") -> End:
    why = f"a {pause_ms} ms pause (>= {limit}), {LIGHT!r}: {judge(LIGHT, 'en').why}"
    return End(Answer.EARLY, EndedBy.GATEWAY, why)


WORDS: list[tuple[str, Rules, Heard, Happening, Decision]] = [
    ("complete, the pause too short", CLIENT, back(LIGHT), BACK,
     Wait(f"{LIGHT!r} reads complete, but the pause was 300 ms")),
    ("complete, 380 ms", CLIENT, back(LIGHT, pause_ms=380), AUDIO,
     Wait(f"{LIGHT!r} reads complete, but the pause was 380 ms")),
    ("complete at the endpoint", CLIENT, back(LIGHT, pause_ms=400), AUDIO, light_ends(400)),
    ("complete, back after the endpoint", CLIENT, back(LIGHT, pause_ms=800), BACK, light_ends(800)),
    ("not back yet", CLIENT, early("pending", pause_ms=800), AUDIO,
     Wait("early transcription 1 was not back yet")),
    ("failed", CLIENT, early("failed", pause_ms=800), BACK, Wait("early transcription 1 failed")),
    ("cannot end", CLIENT, back("Turn on the", pause_ms=800), AUDIO,
     Wait(CANNOT)),
    ("speech after the cut", CLIENT, back(LIGHT, pause_ms=800, speech_after_cut=True), AUDIO,
     Wait("speech after the last cut")),
    ("the request dropped by speech", CLIENT, early("none", pause_ms=0), AUDIO,
     Wait("speech after the last cut")),
    ("no cut yet", CLIENT, early("none", cuts=0, pause_ms=200), AUDIO,
     Wait("no pause after speech")),
    ("an answer still going out", CLIENT, back(LIGHT, pause_ms=400, busy=True), AUDIO, Wait(BUSY)),
    ("weak, before the weak endpoint", CLIENT, back("Dim the lights in there.", pause_ms=680),
     AUDIO, Wait(f"{DIM!r} reads complete only weakly ({judge(DIM, 'en').why}), but the pause"
                 " was 680 ms (< the weak endpoint's 700 ms)")),
    ("weak, at the weak endpoint", CLIENT, back("Dim the lights in there.", pause_ms=700), AUDIO,
     End(Answer.EARLY, EndedBy.GATEWAY, "a 700 ms pause (>= the weak endpoint's 700 ms),"
         " 'Dim the lights in there.': " + judge("Dim the lights in there.", "en").why)),
    ("strong at the short endpoint", CLIENT, back("Dim the lights in the dining room.",
     pause_ms=400), AUDIO, End(Answer.EARLY, EndedBy.GATEWAY, "a 400 ms pause (>= 400 ms),"
     " 'Dim the lights in the dining room.': " + judge("Dim the lights in the dining room.",
     "en").why)),
    ("too noisy: left to the client", CLIENT, back(LIGHT, pause_ms=800, noisy=NOISY), AUDIO,
     Wait(f"too noisy to judge pauses ({NOISY})")),
    ("weak, one tier", ONE_TIER, back("Remind me too.", pause_ms=380), AUDIO,
     Wait("'Remind me too.' reads complete, but the pause was 380 ms")),
    ("weak, one tier at the endpoint", ONE_TIER, back("Remind me too.", pause_ms=400), AUDIO,
     End(Answer.EARLY, EndedBy.GATEWAY, "a 400 ms pause (>= 400 ms), 'Remind me too.': "
         + judge("Remind me too.", "en").why)),
]  # fmt: skip

OWN_VAD: list[tuple[str, Rules, Heard, Happening, Decision]] = [
    ("complete words end at the endpoint as before", OWN, back(LIGHT, pause_ms=400), AUDIO,
     light_ends(400)),
    ("too noisy: own VAD holds as long as HA", OWN, back(LIGHT, pause_ms=700, noisy=NOISY),
     AUDIO, End(Answer.AS_AT_STOP, EndedBy.HOLD, "a 700 ms pause (>= the 700 ms hold), and too"
                f" noisy to judge pauses ({NOISY})")),
    ("too noisy: not before HA's hold", OWN, back(LIGHT, pause_ms=680, noisy=NOISY), AUDIO,
     Wait(f"too noisy to judge pauses ({NOISY})")),
    ("other words, before the hold", OWN, back("Turn on the", pause_ms=1280), AUDIO,
     Wait(CANNOT)),
    ("other words, at the hold", OWN, back("Turn on the", pause_ms=1300), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HOLD, "a 1300 ms pause (>= the 1300 ms hold), and"
         f" {CANNOT}")),
    ("the hold counts its own pause: a clink after it held the words'", OWN,
     back("Turn on the", pause_ms=200, hold_pause_ms=1300), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HOLD, "a 1300 ms pause (>= the 1300 ms hold), and"
         f" {CANNOT}")),
    ("the words' pause is not the hold's", OWN,
     back("Turn on the", pause_ms=1300, hold_pause_ms=0), AUDIO, Wait(CANNOT)),
    ("HA's own hold ended it the margin before", OWN,
     early("none", pause_ms=900, past_ha_hold_ms=HA_MARGIN_MS), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HA_HOLD, "Home Assistant's own hold would have ended it"
         f" {HA_MARGIN_MS} ms before (>= {HA_MARGIN_MS} ms), and speech after the last cut")),
    ("HA's own hold ended it, less than the margin before", OWN,
     early("none", pause_ms=900, past_ha_hold_ms=HA_MARGIN_MS - 10), AUDIO,
     Wait("speech after the last cut")),
    ("past HA's own hold, a silent pause after words that cannot end: the own hold's to end",
     OWN, back("Turn on the", pause_ms=900, past_ha_hold_ms=HA_MARGIN_MS + 500), AUDIO,
     Wait(CANNOT)),
    ("past HA's own hold, a silent pause, the words on their way: they will tell", OWN,
     early("pending", pause_ms=900, past_ha_hold_ms=HA_MARGIN_MS + 500), AUDIO,
     Wait("early transcription 1 was not back yet")),
    ("past HA's own hold, a silent pause, words on their way cut after it: as HA's would", OWN,
     early("pending", pause_ms=320, past_ha_hold_ms=HA_MARGIN_MS, cut_past_ha_hold=True),
     AUDIO, End(Answer.AS_AT_STOP, EndedBy.HA_HOLD, "Home Assistant's own hold would have ended"
                f" it {HA_MARGIN_MS} ms before (>= {HA_MARGIN_MS} ms), and early transcription 1"
                " was not back yet")),
    ("past HA's own hold, sound, no words: the speaker may go on", OWN,
     early("none", pause_ms=0, past_ha_hold_ms=HA_MARGIN_MS + 500, sounding=True), AUDIO,
     Wait("speech after the last cut")),
    ("past HA's own hold, sound, the request failed: the speaker may go on", OWN,
     early("failed", pause_ms=0, past_ha_hold_ms=HA_MARGIN_MS + 500, sounding=True), AUDIO,
     Wait("early transcription 1 failed")),
    ("past HA's own hold, words that cannot end: the own hold still ends it", OWN,
     back("Turn on the", pause_ms=1300, past_ha_hold_ms=HA_MARGIN_MS + 550), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HOLD, "a 1300 ms pause (>= the 1300 ms hold), and"
         f" {CANNOT}")),
    ("past HA's own hold, an empty transcript and a silent pause: no words to tell", OWN,
     back("", pause_ms=900, past_ha_hold_ms=HA_MARGIN_MS), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HA_HOLD, "Home Assistant's own hold would have ended it"
         f" {HA_MARGIN_MS} ms before (>= {HA_MARGIN_MS} ms), and '' does not read complete:"
         " no words")),
    ("past HA's own hold, a silent pause, no word table: nothing to tell, as HA's would",
     OWN_DE, Heard(early="back", words="Schalte das", verdict=judge("Schalte das", "de"),
                   **facts_of({"pause_ms": 900, "past_ha_hold_ms": HA_MARGIN_MS})), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HA_HOLD, "Home Assistant's own hold would have ended it"
         f" {HA_MARGIN_MS} ms before (>= {HA_MARGIN_MS} ms), and 'Schalte das' does not read"
         " complete: no word table for language 'de'")),
    ("past HA's own hold, a transcript on its way, no word table: as HA's would", OWN_DE,
     early("pending", pause_ms=900, past_ha_hold_ms=HA_MARGIN_MS), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HA_HOLD, "Home Assistant's own hold would have ended it"
         f" {HA_MARGIN_MS} ms before (>= {HA_MARGIN_MS} ms), and early transcription 1 was not"
         " back yet")),
    ("past HA's own hold, a silent pause, the request failed: as HA's would", OWN,
     early("failed", pause_ms=900, past_ha_hold_ms=HA_MARGIN_MS), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HA_HOLD, "Home Assistant's own hold would have ended it"
         f" {HA_MARGIN_MS} ms before (>= {HA_MARGIN_MS} ms), and early transcription 1 failed")),
    ("past HA's own hold, sound and words that cannot end: held (the words would hold it)", OWN,
     back("Turn on the", pause_ms=900, past_ha_hold_ms=HA_MARGIN_MS, sounding=True), AUDIO,
     Wait(CANNOT)),
    ("past HA's own hold, sound after complete words: a clink, not the request going on", OWN,
     back(LIGHT, pause_ms=100, past_ha_hold_ms=HA_MARGIN_MS + 200, sounding=True), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HA_HOLD, "Home Assistant's own hold would have ended it"
         f" {HA_MARGIN_MS + 200} ms before (>= {HA_MARGIN_MS} ms), and {LIGHT!r} reads"
         " complete, but the pause was 100 ms")),
    ("past HA's own hold, too noisy to tell sound from speech: as HA's would", OWN,
     back("Turn on the", pause_ms=0, past_ha_hold_ms=HA_MARGIN_MS, sounding=True, noisy=NOISY),
     AUDIO, End(Answer.AS_AT_STOP, EndedBy.HA_HOLD, "Home Assistant's own hold would have ended"
                f" it {HA_MARGIN_MS} ms before (>= {HA_MARGIN_MS} ms), and too noisy to judge"
                f" pauses ({NOISY})")),
    ("past HA's own hold, sound, no transcript yet: held (the wait for it would hold it)", OWN,
     early("pending", pause_ms=0, past_ha_hold_ms=HA_MARGIN_MS, sounding=True), AUDIO,
     Wait("early transcription 1 was not back yet")),
    ("a failed request, at the hold", OWN, early("failed", pause_ms=1300), BACK,
     End(Answer.AS_AT_STOP, EndedBy.HOLD, "a 1300 ms pause (>= the 1300 ms hold), and early"
         " transcription 1 failed")),
    ("the hold does not wait for the transcript", OWN, early("pending", pause_ms=1300), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.HOLD, "a 1300 ms pause (>= the 1300 ms hold), and early"
         " transcription 1 was not back yet")),
    ("too little speech for a pause to count", OWN,
     early("none", cuts=0, speech_ms=240, pause_ms=CAP_MS - 2240, audio_ms=CAP_MS - 20), AUDIO,
     Wait("no pause after speech")),
    ("the cap, after speech", OWN,
     early("none", cuts=0, speech_ms=240, pause_ms=CAP_MS - 2240, audio_ms=CAP_MS), AUDIO,
     End(Answer.AS_AT_STOP, EndedBy.CAP, f"{CAP_MS} ms of audio (Home Assistant's cap), and no"
         " pause after speech")),
    ("no speech before the cap", OWN,
     early("none", cuts=0, speech_ms=0, pause_ms=CAP_MS - 20, audio_ms=CAP_MS - 20), AUDIO,
     Wait("no pause after speech")),
    ("no speech at the cap", OWN,
     early("none", cuts=0, speech_ms=0, pause_ms=CAP_MS, audio_ms=CAP_MS), AUDIO,
     End(Answer.SILENCE, EndedBy.NO_SPEECH, f"no speech in {CAP_MS} ms of audio (Home"
         " Assistant's timeout)")),
    ("an answer still going out", OWN,
     early("none", cuts=0, speech_ms=0, pause_ms=CAP_MS, audio_ms=CAP_MS, busy=True), AUDIO,
     Wait(BUSY)),
    ("without own VAD the client ends it", CLIENT,
     back("Turn on the", pause_ms=CAP_MS - 1000, audio_ms=CAP_MS), AUDIO,
     Wait(CANNOT)),
]  # fmt: skip

AT_STOP: list[tuple[str, Rules, Heard, Happening, Decision]] = [
    ("audio-stop before a pause", CLIENT, early("none", cuts=0, pause_ms=100), STOP,
     Left("no pause after speech")),
    ("audio-stop on words that cannot end", CLIENT, back("Turn on the", pause_ms=700), STOP,
     Left(CANNOT)),
    ("audio-stop while an answer goes out", CLIENT, back(LIGHT, pause_ms=700, busy=True), STOP,
     Left(BUSY)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rules", "heard", "happening", "decision"),
    [case[1:] for case in WORDS + OWN_VAD + AT_STOP],
    ids=[case[0] for case in WORDS + OWN_VAD + AT_STOP],
)
def test_decisions(rules: Rules, heard: Heard, happening: Happening, decision: Decision) -> None:
    assert decide(rules, heard, happening) == decision


def test_a_language_without_a_word_table_gets_has_default_hold() -> None:
    """No words can read complete there: the longer hold would slow every turn."""
    holds = [Rules.of(400, 700, 1300, language).hold_ms for language in ("en-US", "de", None)]
    assert holds == [1300, HA_HOLD_MS, HA_HOLD_MS]
    assert Rules.of(400, 700, 500, "de").hold_ms == 500
    assert Rules.of(400, 700, None, "de").hold_ms is None  # the client's VAD: no hold
    assert Rules.of(400, 300, None, "en").weak_ms == 400  # never shorter than the endpoint
