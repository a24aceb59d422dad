"""The cut-off corpus (bench/endpoint_corpus.json, issue 22 item 4): requests spoken by the
speech server's piper voice, with exact pauses, and how a transcript is scored against them.

Each part of an utterance is synthesized on its own, trimmed to its first and last sample above
TRIM_LEVEL (piper's own lead and tail of silence, measured and kept in `Spoken.trimmed_ms`), and
the parts are joined by exactly `pause_ms` of digital silence: the pause is what the corpus says.
The speech server's piper runs without generator noise, so a part's audio is cached by its text
under the git-ignored .cache/endpoint-corpus.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from voice_stack_dev.paths import CACHE, REPO
from voice_stack_dev.speech_server import TTS_MODEL, VOICE

RATE = 16000
BYTES_PER_MS = RATE * 2 // 1000
TRIM_LEVEL = 100  # |sample| at or below this (about -50 dBFS) is silence, not speech
CORPUS_FILE = REPO / "bench" / "endpoint_corpus.json"
AUDIO_CACHE = CACHE / "endpoint-corpus"
TIMEOUT = aiohttp.ClientTimeout(total=120, connect=5)


@dataclass(frozen=True)
class Entry:
    """One utterance of the corpus: its parts, the pause between them, its class."""

    id: str
    kind: str  # complete | pause_cannot_end | pause_looks_complete
    parts: tuple[str, ...]
    pause_ms: int  # 0 for a single part

    @property
    def text(self) -> str:
        return " ".join(self.parts)


@dataclass(frozen=True)
class Corpus:
    entries: tuple[Entry, ...]
    classes: dict[str, str]  # kind -> the letter (a, b, c)
    quick: tuple[str, ...]  # ids of the --quick subset


def load_corpus(path: Path = CORPUS_FILE) -> Corpus:
    doc = json.loads(path.read_text())
    entries = tuple(
        Entry(u["id"], u["class"], tuple(u["parts"]), int(u.get("pause_ms", 0)))
        for u in doc["utterances"]
    )
    return Corpus(entries, dict(doc["classes"]), tuple(doc["quick"]))


@dataclass(frozen=True)
class Spoken:
    """An utterance's speech: the parts and pauses, no silence before or after."""

    entry: Entry
    speech: bytes
    spans_ms: tuple[tuple[float, float], ...]  # each part's first and last sound, in `speech`
    trimmed_ms: tuple[tuple[float, float], ...]  # piper's silence cut before / after each part

    def audio(self, lead_ms: int, total_ms: int) -> bytes:
        """`lead_ms` of silence, the speech, then silence up to `total_ms` in all."""
        lead = bytes(lead_ms * BYTES_PER_MS)
        tail = max(0, total_ms * BYTES_PER_MS - len(lead) - len(self.speech))
        return lead + self.speech + bytes(tail)


def trim(pcm: bytes) -> tuple[bytes, float, float]:
    """The samples from the first to the last one above TRIM_LEVEL; the ms cut at each end."""
    samples = memoryview(pcm[: len(pcm) // 2 * 2]).cast("h")
    loud = [i for i, s in enumerate(samples) if abs(s) > TRIM_LEVEL]
    if not loud:
        raise ValueError("the synthesized part holds no sound")
    first, last = loud[0], loud[-1] + 1
    return pcm[first * 2 : last * 2], first / RATE * 1000, (len(samples) - last) / RATE * 1000


async def _piper(session: aiohttp.ClientSession, speech_url: str, text: str) -> bytes:
    """The speech server's untrimmed 16 kHz PCM of `text`, cached on disk."""
    key = hashlib.sha256(f"{TTS_MODEL}|{VOICE}|{RATE}|{text}".encode()).hexdigest()[:20]
    path = AUDIO_CACHE / f"{key}.pcm"
    if path.is_file():
        return path.read_bytes()
    body = {"model": TTS_MODEL, "voice": VOICE, "input": text,
            "response_format": "pcm", "sample_rate": RATE}  # fmt: skip
    async with session.post(f"{speech_url}/v1/audio/speech", json=body) as resp:
        resp.raise_for_status()
        pcm = await resp.read()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pcm)
    return pcm


async def speak(speech_url: str, entries: tuple[Entry, ...]) -> list[Spoken]:
    """Every entry's speech: its parts synthesized one by one and joined by its pause."""
    spoken = []
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        for entry in entries:
            speech, spans, cuts = b"", [], []
            for i, text in enumerate(entry.parts):
                if i:
                    speech += bytes(entry.pause_ms * BYTES_PER_MS)
                part, before, after = trim(await _piper(session, speech_url, text))
                start = len(speech) / BYTES_PER_MS
                speech += part
                spans.append((start, len(speech) / BYTES_PER_MS))
                cuts.append((round(before, 1), round(after, 1)))
            spoken.append(Spoken(entry, speech, tuple(spans), tuple(cuts)))
    return spoken


_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
         "eighteen", "nineteen")  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def _number(token: str) -> str:
    """A number under 100 in words, as the corpus writes it ("21" -> "twenty one")."""
    n = int(token)
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    return token


def normalize(text: str) -> list[str]:
    """Lower-case words without punctuation, digits spelt out: what 'the same words' means."""
    spaced = re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " "))
    words = " ".join(_number(w) if w.isdigit() else w for w in spaced.split())
    return words.replace("'", "").split()


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level edit distance over the reference's length."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))
