"""Whether an early transcript reads as a complete request, so the gateway may end the turn
before the client's own end of speech (Home Assistant's 0.7 s hold).

The rule only ever says "not complete" on evidence that the request goes on; what it lets
through still needs a pause of `--stt-endpoint-ms` with no speech after it. It cannot tell
"turn on the kitchen ... light" from "turn on the kitchen light" (no text can): that is the
trade-off docs/gateway.md states. Its signals, in order:

- a language without a word table never ends early (tables: English only, so far);
- the ASR's punctuation: a transcript ending on ",", ";", ":", a dash or an ellipsis heard the
  sentence go on (terminal ".", "?", "!" are not required: not every ASR punctuates, and
  whisper puts a full stop after a cut phrase as readily as after a finished one);
- a trailing filler ("um", "uh");
- the last word: one a request cannot end on (articles, prepositions, conjunctions, determiners,
  modals, question words: "the", "to", "and", "of", "can", "what");
- the last two words: a verb that opens a request, alone or after "you", "please", "and"
  ("set", "can you turn"; "the kitchen switch" is fine); "is"/"are" after anything but a
  subject ("what time is"; "what time it is" is fine); a pronoun after a modal ("could you");
  a particle after the verb that needs it ("turn on", "switch off"; "turn it on" is fine);
- a polite tail ("please", "thanks") is set aside and the words before it are judged.

What it lets through is strong or weak. Weak: the last word is one the ASR makes of a cut-off
function word, right after a preposition or an object pronoun: tiny.en heard the cut heads "Play
some jazz in the", "Dim the lights in the" and "Remind me to" as "Place some jazz in it.", "Dim
the lights in there." and "Remind me too." (the cut-off corpus, bench/endpoint_bench.py), which
read complete. A weak verdict still lets the turn end, after the longer --stt-endpoint-weak-ms
(turn.py); a finished request seldom ends that way ("what's in it"), so it costs those a
few hundred ms and spares the misheard heads.

A verdict is weak too when the ASR was unsure of the words (`unsure`): in room noise whisper
tiny.en made whole sentences of cut heads ("Lock the" -> "Longbow."), at a lower avg_logprob
than the complete requests it heard (room corpus, docs/notebook/end-of-turn.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Words:
    """One language's table."""

    cannot_end: frozenset[str]  # a request never ends on these
    fillers: frozenset[str]  # hesitation: the speaker is not done
    openers: frozenset[str]  # verbs that open a request: not complete alone ("set"), or...
    opener_after: frozenset[str]  # ...after these ("can you set"); "the kitchen switch" is
    askers: frozenset[str]  # a question's opening verb: not complete before a pronoun...
    pronouns: frozenset[str]  # ...at the end ("could you", "can I"; "thank you" is polite)
    linking: frozenset[str]  # "is", "are": complete after a subject ("what time it is")...
    subjects: frozenset[str]  # ...one of these, not after a noun ("what time is")
    particles: frozenset[str]  # complete after an object ("turn it on"), not after...
    particle_verbs: frozenset[str]  # ...one of these ("turn on")
    polite: tuple[tuple[str, ...], ...]  # tails judged by the words before them
    echoes: frozenset[str]  # what the ASR makes of a cut-off function word ("the" -> "it")...
    echo_after: frozenset[str]  # ...after one of these: complete, but only weakly


def _set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# prepositions (on, off, up, down, out, over: particles, below)
_PREPOSITIONS = (
    " to of in at for from with without by into onto about above below under between"
    " after before until till during through toward towards near across around behind"
    " beside via per upon within against along among beyond except since than"
)

ENGLISH = Words(
    cannot_end=_set(
        # articles and determiners; "that" and "this" too: whisper hears a cut "turn on the"
        # as "Turn on that." and "what is the" as "What is that?" (tiny.en, measured)
        "a an the that this my your our their his its these those some any every each all"
        " another other both either neither"
        + _PREPOSITIONS
        # conjunctions
        + " and or but nor because if as while unless although though whether plus then"
        # auxiliaries and modals ("do", "have", "be" end requests: "what can you do")
        " can could would will shall should may might must isn't aren't don't doesn't"
        " can't won't"
        # question words; lead-ins and intensifiers
        " what what's whats which who whose how when where why hey so well very let let's"
    ),
    fillers=_set("um umm uh uhm uhh er erm ah eh hm hmm mm mmm mhm"),
    openers=_set(
        "set turn switch put make add remind tell show give change increase decrease raise"
        " lower dim brighten activate deactivate enable disable open close lock unlock call"
        " send find search start"
    ),
    opener_after=_set("you please and then to just also hey i we me"),
    askers=_set("can could would will shall should may might must do does did"),
    pronouns=_set("you i we it they he she"),
    linking=_set("is are am was were"),
    subjects=_set("it they we i you he she that there this what's which who"),
    particles=_set("on off up down out over"),
    particle_verbs=_set("turn switch set put shut power dim start"),
    polite=(("please",), ("thanks",), ("thank", "you")),
    # measured (tiny.en on the cut-off corpus): "in the" -> "in it" / "in there", "me to" ->
    # "me too"; "that" and "this", also heard for "the", are in cannot_end
    echoes=_set("it there too"),
    echo_after=_set(_PREPOSITIONS + " on off up down out over me us you him her them"),
)

TABLES: dict[str, Words] = {"en": ENGLISH}
_OPEN_ENDINGS = (",", ";", ":", "-", "\u2013", "\u2014", "...", "\u2026")
_WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)*|\d+(?:[.,]\d+)?")


@dataclass(frozen=True, slots=True)
class Verdict:
    complete: bool
    why: str  # for the debug log
    weak: bool = False  # complete, but it may be a misheard cut (the longer endpoint applies)


def language_of(language: str | None) -> str:
    """The primary subtag: "en-US" and "en_GB" are "en"."""
    return re.split(r"[-_]", language or "", maxsplit=1)[0].lower()


def judge(text: str, language: str | None) -> Verdict:
    """Whether `text` (an early transcript) reads as a complete request in `language`."""
    table = TABLES.get(language_of(language))
    if table is None:
        return Verdict(False, f"no word table for language {language!r}")
    stripped = text.strip()
    for ending in _OPEN_ENDINGS:
        if stripped.endswith(ending):
            return Verdict(False, f"the transcript ends with {ending!r}")
    words = [w.replace("\u2019", "'") for w in _WORD.findall(stripped.lower())]
    polite = _strip_polite(words, table)
    if not words:
        return Verdict(False, "no words before the polite tail" if polite else "no words")
    refused = _last_words(words, table)
    if refused is not None:
        return Verdict(False, refused)
    mark = "terminal punctuation" if stripped[-1:] in (".", "?", "!") else "no punctuation"
    tail = f", after {polite!r}" if polite else ""
    if _echo(words, table):
        pair = " ".join(words[-2:])
        why = f"ends on {pair!r}, which a cut-off function word may have become ({mark}{tail})"
        return Verdict(True, why, weak=True)
    return Verdict(True, f"ends on {words[-1]!r} ({mark}{tail})")


def unsure(verdict: Verdict, confidence: float | None, limit: float | None) -> Verdict:
    """A complete verdict made weak when the ASR's confidence (avg_logprob) is below `limit`."""
    if not verdict.complete or verdict.weak or confidence is None or limit is None:
        return verdict
    if confidence >= limit:
        return verdict
    why = f"{verdict.why}; the ASR was unsure (avg_logprob {confidence:.2f} < {limit:g})"
    return Verdict(True, why, weak=True)


def _echo(words: list[str], table: Words) -> bool:
    """The last word may be the ASR's rendering of a cut-off "the" or "to" ("in it")."""
    return len(words) > 1 and words[-1] in table.echoes and words[-2] in table.echo_after


def _last_words(words: list[str], table: Words) -> str | None:
    """Why the last words cannot end a request, or None."""
    last = words[-1]
    before = words[-2] if len(words) > 1 else ""
    pair = " ".join(words[-2:])
    rules = (
        (last in table.fillers, f"ends on the filler {last!r}"),
        (last in table.cannot_end, f"ends on {last!r}, which a request cannot end on"),
        (
            last in table.openers and (not before or before in table.opener_after),
            f"ends on {pair!r}, a verb that opens a request",
        ),
        (
            (last in table.pronouns and before in table.askers)
            or (last in table.linking and before not in table.subjects),
            f"ends on {pair!r}, a question not yet asked",
        ),
        (
            last in table.particles and (not before or before in table.particle_verbs),
            f"ends on {pair!r}, a verb without its object",
        ),
    )
    return next((why for refused, why in rules if refused), None)


def _strip_polite(words: list[str], table: Words) -> str:
    """Remove polite tails from the end of `words` (in place); the words removed."""
    removed: list[str] = []
    found = True
    while found:
        found = False
        for tail in table.polite:
            if len(words) >= len(tail) and tuple(words[-len(tail) :]) == tail:
                removed[:0] = words[-len(tail) :]
                del words[-len(tail) :]
                found = True
    return " ".join(removed)
