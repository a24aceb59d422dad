"""Incremental sentence splitting for streamed text (LLM deltas arrive a few words at a time).

A sentence is released as soon as its end is certain enough to synthesize: terminal punctuation
followed by whitespace, or terminal punctuation at the end of a delta (LLM tokens usually end
there) unless it looks like an abbreviation or a decimal number (a number's "." ends a sentence
only before a line break: "The answer is 8.\n\n"), or a blank line (LLM replies break paragraphs
without punctuation: "The original text is:\n\n"). The first piece of a stream is what the
listener waits for, and the TTS server's time grows with its length: it is released at the
first clause mark (", ; :" then a space) once it holds FIRST_CLAUSE_WORDS words. Text is kept
verbatim, so no spaces are lost between sentences.
"""

from __future__ import annotations

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
FIRST_CLAUSE_WORDS = 3  # "Sure," alone is no clause worth a request of its own
_CLAUSE = re.compile(r"[,;:](?=\s)")
_BLANK_LINE = re.compile(r"\S\s*\n[ \t]*\n")


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

    def add(self, text: str) -> list[str]:
        self._buf += text
        out: list[str] = []
        while True:
            cut = self._next_cut()
            if cut is None:
                break
            sentence, self._buf = self._buf[:cut], self._buf[cut:]
            if sentence.strip():
                out.append(sentence.strip())
                self._first = False
        return out

    def finish(self) -> list[str]:
        rest, self._buf = self._buf.strip(), ""
        return [rest] if rest else []

    def _next_cut(self) -> int | None:
        buf = self._buf
        ends = [cut for cut in (self._sentence_end(buf), self._blank_line(buf)) if cut]
        if self._first and (clause := self._first_clause(buf)) is not None:
            ends.append(clause)
        if ends:
            return min(ends)
        stripped = buf.rstrip()
        ends_delta = stripped and stripped == buf and stripped[-1] in ".!?\u2026"
        # a delta that ended right after terminal punctuation: release unless it may continue
        if (
            ends_delta
            and len(stripped) > 1
            and not (stripped[-1] == "." and _is_abbreviation(stripped))
        ):
            return len(buf)
        if len(buf) > self._max:
            soft = max(buf.rfind(", ", 0, self._max), buf.rfind(" ", 0, self._max))
            return soft + 1 if soft > 0 else self._max
        return None

    @staticmethod
    def _sentence_end(buf: str) -> int | None:
        for match in _BOUNDARY.finditer(buf):
            if match.group().startswith("."):
                after = buf[match.end() : match.end() + 1]
                if _is_abbreviation(buf[: match.start() + 1], numbers=after != "\n"):
                    continue
            if len(buf[: match.end()].strip()) > 1:
                return match.end()
        return None

    @staticmethod
    def _blank_line(buf: str) -> int | None:
        match = _BLANK_LINE.search(buf)
        return match.start() + 1 if match else None

    @staticmethod
    def _first_clause(buf: str) -> int | None:
        for match in _CLAUSE.finditer(buf):
            if len(buf[: match.start()].split()) >= FIRST_CLAUSE_WORDS:
                return match.end()
        return None
