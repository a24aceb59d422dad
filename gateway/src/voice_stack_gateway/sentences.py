"""Incremental sentence splitting for streamed text (LLM deltas arrive a few words at a time).

A sentence is released as soon as its end is certain enough to synthesize: terminal punctuation
followed by whitespace, or terminal punctuation at the end of a delta (LLM tokens usually end
there) unless it looks like an abbreviation or a decimal number (a number's "." ends a sentence
only before a line break: "The answer is 8.\n\n"), or a blank line (LLM replies break paragraphs
without punctuation: "The original text is:\n\n"). The first piece of a stream is what the
listener waits for, and the TTS server's time grows with its length: it is released at the
first clause mark (", ; :" then a space) once it holds FIRST_CLAUSE_WORDS words. Text is kept
verbatim, so no spaces are lost between sentences.

The text comes from the client, so every search looks at most at the next `max_chars` (plus a
sentence end's closing marks) of the buffer: a delta of any size costs time in proportion to its
length, never to its square (one event may carry a megabyte of text without a sentence end).
"""

from __future__ import annotations

import bisect
import re

# ASCII and CJK sentence ends, then closing quotes or brackets, then whitespace
_BOUNDARY = re.compile(
    "[.!?\u2026\u3002\uff01\uff1f]+[\"')\\]\u00bb\u201d\u2019]*(?=\\s)|[\u3002\uff01\uff1f]+"
)
_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "st",
        "jr",
        "sr",
        "prof",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "no",
        "approx",
        "dept",
        "est",
        "fig",
        "inc",
        "ltd",
        "co",
    ]
)
MAX_CHARS = 400  # a run-on sentence is cut at a comma or space past this length
_LOOKAHEAD = 16  # a sentence end at the window's edge: its closing marks and the space after
_WORD = 32  # an abbreviation or a number is judged by this much text before its '.'
FIRST_CLAUSE_WORDS = 3  # "Sure," alone is no clause worth a request of its own
_CLAUSE = re.compile(r"[,;:](?=\s)")
_BLANK_LINE = re.compile(r"\S\s*\n[ \t]*\n")
_WORDS = re.compile(r"\S+")


def _is_abbreviation(text: str, *, numbers: bool = True) -> bool:
    """True if the word before a final '.' is an abbreviation, an initial or (unless `numbers`
    is false) a number."""
    word = text.rstrip(".").rsplit(None, 1)[-1].lower() if text.strip(". ") else ""
    if word[-1:].isdigit():
        return numbers
    return word in _ABBREVIATIONS or len(word) == 1


class SentenceSplitter:
    """Feed text deltas with `add`, collect finished sentences; `finish` flushes the rest."""

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self._buf = ""
        self._max = max_chars
        self._first = True  # nothing released yet
        self.scanned = 0  # characters handed to the searches (linear in the text: tests read it)

    def add(self, text: str) -> list[str]:
        buf = self._buf + text
        at = 0  # what is released so far (slicing the buffer at each cut would copy its rest)
        out: list[str] = []
        while (cut := self._next_cut(buf, at)) is not None:
            sentence, at = buf[at:cut].strip(), cut
            if sentence:
                out.append(sentence)
                self._first = False
        self._buf = buf[at:]
        return out

    def finish(self) -> list[str]:
        rest, self._buf = self._buf.strip(), ""
        return [rest] if rest else []

    def _next_cut(self, buf: str, at: int) -> int | None:
        """Where the next piece of `buf[at:]` ends (an index into `buf`), or None."""
        window = buf[at : at + self._max + _LOOKAHEAD]  # past it a run-on sentence is cut
        self.scanned += len(window)
        ends = [cut for cut in (_sentence_end(window), _blank_line(window)) if cut]
        if self._first and (clause := _first_clause(window)) is not None:
            ends.append(clause)
        if ends:
            return at + min(ends)
        if len(buf) - at > self._max:
            soft = max(window.rfind(", ", 0, self._max), window.rfind(" ", 0, self._max))
            return at + (soft + 1 if soft > 0 else self._max)
        stripped = window.rstrip()
        ends_delta = stripped and stripped == window and stripped[-1] in ".!?\u2026"
        # a delta that ended right after terminal punctuation: release unless it may continue
        if (
            ends_delta
            and len(stripped) > 1
            and not (stripped[-1] == "." and _is_abbreviation(stripped[-_WORD:]))
        ):
            return len(buf)
        return None


def _sentence_end(buf: str) -> int | None:
    for match in _BOUNDARY.finditer(buf):
        if match.group().startswith("."):
            after = buf[match.end() : match.end() + 1]
            before = buf[max(0, match.start() + 1 - _WORD) : match.start() + 1]
            if _is_abbreviation(before, numbers=after != "\n"):
                continue
        if len(buf[: match.end()].strip()) > 1:
            return match.end()
    return None


def _blank_line(buf: str) -> int | None:
    match = _BLANK_LINE.search(buf)
    return match.start() + 1 if match else None


def _first_clause(buf: str) -> int | None:
    starts = [word.start() for word in _WORDS.finditer(buf)]
    for match in _CLAUSE.finditer(buf):
        if bisect.bisect_left(starts, match.start()) >= FIRST_CLAUSE_WORDS:
            return match.end()
    return None
