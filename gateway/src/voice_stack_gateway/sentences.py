"""Incremental sentence splitting for streamed text (LLM deltas arrive a few words at a time).

A sentence is released as soon as its end is certain enough to synthesize: terminal punctuation
followed by whitespace, or terminal punctuation at the end of a delta (LLM tokens usually end
there) unless it looks like an abbreviation or a decimal number. Text is kept verbatim, so no
spaces are lost between sentences.
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


def _is_abbreviation(text: str) -> bool:
    """True if the word before a final '.' is an abbreviation, an initial or a number."""
    word = text.rstrip(".").rsplit(None, 1)[-1].lower() if text.strip(". ") else ""
    return word in _ABBREVIATIONS or len(word) == 1 or word[-1:].isdigit()


class SentenceSplitter:
    """Feed text deltas with `add`, collect finished sentences; `finish` flushes the rest."""

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self._buf = ""
        self._max = max_chars

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
        return out

    def finish(self) -> list[str]:
        rest, self._buf = self._buf.strip(), ""
        return [rest] if rest else []

    def _next_cut(self) -> int | None:
        buf = self._buf
        for match in _BOUNDARY.finditer(buf):
            if match.group().startswith(".") and _is_abbreviation(buf[: match.start() + 1]):
                continue
            if len(buf[: match.end()].strip()) > 1:
                return match.end()
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
