"""The speech server's ASR modes: `real` runs faster-whisper on every upload; `fast` models a
GPU-class ASR on this CPU by answering with whisper's own transcript of the same speech after a
fixed delay, when the server has transcribed that speech before (a miss runs whisper and says so).

Speech is recognised by its samples with the exact zeros trimmed from both ends: the benchmark
streams digital silence around its piper speech, so the audio Home Assistant sends at its
audio-stop and the shorter audio a gateway sends at the first pause carry the same key. Every
real transcription is remembered (the first one of a key stays; the oldest go past MEMO_LIMIT, so
a server that runs for hours stays bounded), so a benchmark primes the
memo by transcribing each utterance once in `real` mode. `GET /dev/asr` reports the mode, the
delay and the counts; `PUT /dev/asr` with `{"mode": ..., "delay_ms": ..., "match": ...}` switches
it.

The memo keeps whisper's avg_logprob (its lowest segment's) with the words, so fast mode answers
`response_format=verbose_json` with the primed audio's confidence, as whisper gave it.

Speech in a room has no digital silence: the noise runs from the first sample, so a gateway's
early request cut at a pause the detector saw a little later or sooner is never the exact audio
that was primed. With `"match": "prefix"` (the room bench), an exact miss is answered with the
transcript of the longest primed audio that begins with the same PREFIX_SAMPLES and is not longer
than the upload: the same scene, up to the last primed point it reached (a part's end, a hold's
end); only an upload shorter than every primed one runs whisper.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

MODES = ("real", "fast")
MATCHES = ("exact", "prefix")
PREFIX_SAMPLES = 4000  # 0.25 s: the start of a scene's audio tells scenes apart
DEFAULT_DELAY_MS = 80.0
MEMO_LIMIT = 4096  # transcripts kept; a benchmark primes about 120, a soak's turns are unbounded
HOW = (
    "faster-whisper tiny.en's own transcript of the same speech samples (exact zeros trimmed "
    "from both ends), computed by this speech server beforehand in real mode, then answered "
    "after the fixed delay; a miss runs whisper"
)

type Array = Any  # numpy, loaded at run time (the harness imports this from every venv)


@dataclass(frozen=True)
class Transcript:
    """Whisper's words, all but the first with their leading space (the SSE deltas), and its
    confidence: the lowest segment avg_logprob, None when whisper gave no segment."""

    words: tuple[str, ...]
    avg_logprob: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.words)


def speech_key(audio: Array, language: str | None) -> str:
    """The key of a transcription: its language and the samples between the first and the last
    non-zero one."""
    np = importlib.import_module("numpy")
    trimmed = np.trim_zeros(np.asarray(audio, dtype=np.float32))
    digest = hashlib.sha256(f"{language or 'en'}\n".encode())
    digest.update(trimmed.tobytes())
    return digest.hexdigest()


def prefix_key(audio: Array, language: str | None) -> str:
    """The key of a transcription's start: its language and its first PREFIX_SAMPLES (exact
    zeros trimmed from the front)."""
    np = importlib.import_module("numpy")
    trimmed = np.trim_zeros(np.asarray(audio, dtype=np.float32), "f")[:PREFIX_SAMPLES]
    digest = hashlib.sha256(f"{language or 'en'}\n".encode())
    digest.update(trimmed.tobytes())
    return digest.hexdigest()


def add_mode_arguments(parser: argparse.ArgumentParser) -> None:
    """A benchmark's `--asr` (the modes to run, in order; all by default) and `--asr-delay-ms`
    (fast mode's modelled ASR time)."""
    parser.add_argument(
        "--asr", type=_modes, default=MODES,
        help=f"ASR modes, in order (default: {','.join(MODES)}; fast is modelled)",
    )  # fmt: skip
    parser.add_argument(
        "--asr-delay-ms", type=float, default=DEFAULT_DELAY_MS,
        help=f"fast mode's modelled ASR time (ms, default {DEFAULT_DELAY_MS:g})",
    )  # fmt: skip


def _modes(value: str) -> tuple[str, ...]:
    modes = tuple(m.strip() for m in value.split(",") if m.strip())
    if not modes or any(m not in MODES for m in modes) or len(set(modes)) < len(modes):
        raise argparse.ArgumentTypeError(f"a comma-separated list of {', '.join(MODES)}")
    return modes


def _delay(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value <= 10_000 else None


@dataclass
class AsrMemo:
    """The mode, the remembered transcripts and what fast mode answered from them."""

    mode: str = "real"
    delay_ms: float = DEFAULT_DELAY_MS
    match: str = "exact"
    transcripts: dict[str, Transcript] = field(default_factory=dict)
    # prefix key -> primed audio length (samples) -> its transcript
    starts: dict[str, dict[int, Transcript]] = field(default_factory=dict)
    hits: int = 0  # fast answers from the memo
    prefix_hits: int = 0  # ...of them, answered by a primed audio the upload begins with
    misses: int = 0  # fast-mode uploads whisper had to transcribe

    def configure(self, mode: object, delay_ms: object, match: object = None) -> str | None:
        """Switch mode, delay and matching (None leaves one as it is); the problem as a sentence
        when a value is wrong, and then nothing changes."""
        if mode is not None and mode not in MODES:
            return f"mode must be one of {', '.join(MODES)}"
        if delay_ms is not None and _delay(delay_ms) is None:
            return "delay_ms must be a number of milliseconds, 0 to 10000"
        if match is not None and match not in MATCHES:
            return f"match must be one of {', '.join(MATCHES)}"
        if mode is not None:
            self.mode = str(mode)
        if (delay := _delay(delay_ms)) is not None:
            self.delay_ms = delay
        if match is not None:
            self.match = str(match)
        return None

    def fast_answer(self, key: str, start: str = "", length: int = 0) -> Transcript | None:
        """The remembered transcript when fast mode may answer with it (counted either way)."""
        if self.mode != "fast":
            return None
        transcript = self.transcripts.get(key)
        if transcript is None and self.match == "prefix":
            transcript = self._longest_within(start, length)
            self.prefix_hits += transcript is not None
        if transcript is None:
            self.misses += 1
        else:
            self.hits += 1
        return transcript

    def _longest_within(self, start: str, length: int) -> Transcript | None:
        primed = [n for n in self.starts.get(start, {}) if n <= length]
        return self.starts[start][max(primed)] if primed else None

    def remember(self, key: str, transcript: Transcript, start: str = "", length: int = 0) -> None:
        if key in self.transcripts:
            return
        if len(self.transcripts) >= MEMO_LIMIT:  # the oldest goes (dicts keep insertion order)
            del self.transcripts[next(iter(self.transcripts))]
        self.transcripts[key] = transcript  # frozen: shared with every answer, never copied
        if start and len(self.starts) < MEMO_LIMIT:
            self.starts.setdefault(start, {}).setdefault(length, transcript)

    def state(self) -> dict[str, Any]:
        return {"mode": self.mode, "delay_ms": self.delay_ms, "match": self.match,
                "cached": len(self.transcripts), "hits": self.hits,
                "prefix_hits": self.prefix_hits, "misses": self.misses, "how": HOW}  # fmt: skip


class Transcriber:
    """Transcriptions in the memo's mode; `whisper` is the blocking engine call."""

    def __init__(self, whisper: Callable[[Array, str | None], Transcript], memo: AsrMemo) -> None:
        self.whisper = whisper
        self.memo = memo

    async def __call__(self, audio: Array, language: str | None) -> Transcript:
        key, start = speech_key(audio, language), prefix_key(audio, language)
        transcript = self.memo.fast_answer(key, start, len(audio))
        if transcript is not None:
            await asyncio.sleep(self.memo.delay_ms / 1000)
            return transcript
        transcript = await asyncio.get_running_loop().run_in_executor(
            None, self.whisper, audio, language
        )
        self.memo.remember(key, transcript, start, len(audio))
        return transcript


def add_routes(app: web.Application, memo: AsrMemo) -> None:
    """GET and PUT /dev/asr on the server's app."""
    from aiohttp import web

    async def get_state(_request: web.Request) -> web.Response:
        return web.json_response(memo.state())

    async def put_state(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "body must be a JSON object"}},
                                     status=400)  # fmt: skip
        problem = memo.configure(body.get("mode"), body.get("delay_ms"), body.get("match"))
        if problem is not None:
            return web.json_response({"error": {"message": problem}}, status=400)
        return web.json_response(memo.state())

    app.router.add_get("/dev/asr", get_state)
    app.router.add_put("/dev/asr", put_state)
