"""complete.py: whether an early transcript reads as a complete request. The rule only refuses
on evidence that the request goes on; a language without a table never ends early."""

from __future__ import annotations

import pytest

from voice_stack_gateway.stt.complete import TABLES, judge, language_of, unsure


@pytest.mark.parametrize(
    "text",
    [
        "Turn on the kitchen light.",
        "turn on the kitchen light",  # an ASR that does not punctuate
        "Turn the light on.",  # a particle after its object
        "Turn it off",
        "What time is it?",
        "Tell me what time it is.",  # "is" after a subject
        "Set a timer for five minutes.",
        "Turn on the light, please.",  # the polite tail is set aside
        "Turn off the lights, thank you.",
        "Turn on the switch",  # "switch" as a noun, after "the"
        "What\u2019s the weather",  # a typographic apostrophe
        "Stop.",
        "Set the temperature to 21",
        "What can you do?",
        "How are you?",
        "What can I do for you?",
        "Turn on the kitchen",  # looks complete: no text can tell (the trade-off)
    ],
)
def test_complete_requests(text: str) -> None:
    verdict = judge(text, "en")
    assert verdict.complete, verdict.why


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Turn on the", "ends on 'the', which a request cannot end on"),
        ("What is the", "ends on 'the'"),
        ("Turn on that.", "ends on 'that'"),  # how whisper tiny.en hears a cut "turn on the"
        ("What is that?", "ends on 'that'"),  # ...and a cut "what is the"
        ("Set a timer for", "ends on 'for'"),
        ("Turn on the light and", "ends on 'and'"),
        ("Turn on the kitchen light of", "ends on 'of'"),
        ("what's", 'ends on "what\'s"'),
        ("Could you", "ends on 'could you', a question not yet asked"),
        ("How do you", "ends on 'do you'"),
        ("Turn on", "ends on 'turn on', a verb without its object"),
        ("Switch off.", "a verb without its object"),
        ("Set", "ends on 'set', a verb that opens a request"),
        ("Can you turn", "ends on 'you turn', a verb that opens a request"),
        ("What time is", "ends on 'time is', a question not yet asked"),
        ("Turn on the kitchen light, um", "ends on the filler 'um'"),
        ("Uh", "ends on the filler 'uh'"),
        ("Turn on the kitchen,", "ends with ','"),
        ("Turn on the kitchen...", "ends with '...'"),
        ("Turn on the kitchen\u2026", "ends with '\u2026'"),
        ("Turn on the kitchen -", "ends with '-'"),
        ("Please.", "no words before the polite tail"),
        ("Thank you.", "no words before the polite tail"),
        ("Turn on the, please", "ends on 'the'"),
        ("", "no words"),
        ("...", "ends with '...'"),
        ("!", "no words"),
    ],
)
def test_incomplete_requests(text: str, why: str) -> None:
    verdict = judge(text, "en")
    assert not verdict.complete
    assert why in verdict.why


def test_languages() -> None:
    assert set(TABLES) == {"en"}  # the languages docs/gateway.md names
    assert judge("Turn on the kitchen light.", "en-US").complete
    assert judge("Turn on the kitchen light.", "EN_gb").complete
    for language in ("de", "fr", "", None):  # no table: never ends early
        verdict = judge("Schalte das Licht in der Küche ein.", language)
        assert not verdict.complete
        assert "no word table" in verdict.why
    assert language_of("pt-BR") == "pt"
    assert language_of(None) == ""


def test_the_reason_names_the_rule() -> None:
    assert judge("Turn on the kitchen light.", "en").why == (
        "ends on 'light' (terminal punctuation)"
    )
    assert judge("turn on the light please", "en").why == (
        "ends on 'light' (no punctuation, after 'please')"
    )


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        # what tiny.en heard for the cut heads "Play some jazz in the", "Dim the lights in
        # the" and "Remind me to" (the cut-off corpus): complete, but only weakly
        ("Place some jazz in it.", "in it"),
        ("Dim the lights in there.", "in there"),
        ("Remind me too.", "me too"),
        ("Put the music on in there, please", "in there"),  # the polite tail set aside
    ],
)
def test_weakly_complete(text: str, pair: str) -> None:
    verdict = judge(text, "en")
    assert verdict.complete
    assert verdict.weak
    assert f"ends on {pair!r}, which a cut-off function word may have become" in verdict.why


@pytest.mark.parametrize(
    "text",
    ["Turn on the kitchen light.", "Close it.", "What is it?", "Turn it on.", "Is it there?",
     "Play some jazz in the living room."],
)  # fmt: skip
def test_strongly_complete(text: str) -> None:
    verdict = judge(text, "en")
    assert verdict.complete
    assert not verdict.weak


def test_an_unsure_asr_makes_a_complete_verdict_weak() -> None:
    """Only a complete, strong verdict changes, and only below the limit."""
    heard = judge("Longbow.", "en")  # tiny.en's sentence of the cut head "Lock the", in noise
    made = unsure(heard, -0.9, -0.6)
    assert (made.complete, made.weak) == (True, True)
    assert (
        made.why
        == "ends on 'longbow' (terminal punctuation); the ASR was unsure (avg_logprob -0.90 < -0.6)"
    )
    assert unsure(heard, -0.6, -0.6) is heard  # at the limit: sure enough
    assert unsure(heard, None, -0.6) is heard  # no confidence (plain json, a streaming model)
    assert unsure(heard, -0.9, None) is heard  # off
    weak = judge("Remind me too.", "en")
    assert unsure(weak, -2.0, -0.6) is weak  # weak already: the reason stays the words'
    refused = judge("Turn on the", "en")
    assert unsure(refused, -2.0, -0.6) is refused
