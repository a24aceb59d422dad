"""Text-to-speech work: plain requests and streamed text, in one fixed output format.

Streaming keeps three things apart so none waits on another: the connection keeps reading text
(the splitter releases sentences), up to N sentences ahead of the one playing are fetched
concurrently (a TTS server that synthesizes one request at a time answers them in turn, so a
sentence fetched k places ahead may take k + 1 first-byte limits), and one writer sends their
audio strictly in order. A stream is one audio-start /
chunks / audio-stop envelope, then synthesize-stopped; piper sends one envelope per sentence
instead. Home Assistant fixes the format at the first audio-start and ignores later ones, so one
envelope in one format is what it plays correctly either way. A stream's audio-start goes out as
soon as its first sentence is handed to the TTS server, not with its first audio: Home Assistant
starts its converter (an ffmpeg process, 15-45 ms to start on the 2-core test machine) when it
gets the format, so that start overlaps the synthesis instead of following it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from wyoming.audio import AudioStart, AudioStop
from wyoming.event import Event
from wyoming.tts import SynthesizeStopped

from .audio import Converter, PcmFormat
from .catalog import VoiceChoice
from .errors import INTERNAL, TOO_LARGE, GatewayError
from .metrics import Kind
from .protocol import encode_audio_chunk
from .sentences import SentenceSplitter
from .session import SessionContext, Sink

_LOGGER = logging.getLogger(__name__)


def request_body(ctx: SessionContext, text: str, voice: VoiceChoice) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": voice.model,
        "input": text,
        "voice": voice.name,
        "response_format": "pcm",
    }
    if ctx.tts.speed is not None:
        body["speed"] = ctx.tts.speed
    return body


class AudioOut:
    """Writes one audio-start/chunks/audio-stop envelope in the output format, converting
    whatever each upstream response delivers."""

    def __init__(self, ctx: SessionContext, sink: Sink) -> None:
        self.sink = sink
        self.format = PcmFormat(ctx.tts.output_rate, 2, 1)
        self.started = False
        self.audio_sent = False
        self._converter: Converter | None = None

    def _start_event(self) -> Event:
        f = self.format
        self.started = True
        return AudioStart(rate=f.rate, width=f.width, channels=f.channels).event()

    async def start(self) -> None:
        """The envelope's audio-start, ahead of any audio (the format is fixed already)."""
        if not self.started:
            await self.sink.send(self._start_event())

    def new_source(self) -> None:
        """Each upstream response gets its own resampler state."""
        self._converter = None

    async def write(self, fmt: PcmFormat, pcm: bytes) -> bool:
        """Write converted audio; True if this was the first audio of the envelope."""
        if self._converter is None or self._converter.source != fmt:
            self._converter = Converter(fmt, self.format)
        data = self._converter.convert(pcm)
        f = self.format
        events: list[Event | bytes] = [] if self.started else [self._start_event()]
        first = not self.audio_sent
        self.audio_sent = True
        if data:
            events.append(encode_audio_chunk(f.rate, f.width, f.channels, data))
        if events:
            await self.sink.send(*events)
        return first

    async def stop(self) -> None:
        if self.started:
            await self.sink.send(AudioStop().event())


MAX_TEXT_CHARS = 50_000  # one request's text, plain or streamed: over half an hour of speech


def text_too_long() -> GatewayError:
    return GatewayError(TOO_LARGE, f"Text longer than {MAX_TEXT_CHARS} characters was refused")


async def synthesize_plain(ctx: SessionContext, sink: Sink, text: str, voice: VoiceChoice) -> None:
    """One request, audio forwarded as it arrives, exactly one envelope."""
    started = time.perf_counter()
    out = AudioOut(ctx, sink)
    async for fmt, pcm in ctx.tts_backend.speech(request_body(ctx, text, voice), ctx.tts.pcm_rate):
        if await out.write(fmt, pcm):
            ctx.metrics.latency[Kind.TTS].observe((time.perf_counter() - started) * 1000)
    if not out.started:
        raise GatewayError(INTERNAL, "TTS produced no audio")
    await out.stop()


_DONE = object()


@dataclass(slots=True)
class SentenceJob:
    index: int
    text: str
    queue: asyncio.Queue[object] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None


class StreamingSynthesis:
    """synthesize-start .. synthesize-chunk* .. synthesize-stop for one connection; `on_end`
    is called when its writer ends (all audio out, a failure, or the client gone)."""

    def __init__(
        self,
        ctx: SessionContext,
        sink: Sink,
        voice: VoiceChoice,
        on_end: Callable[[StreamingSynthesis], None],
    ) -> None:
        self.ctx = ctx
        self.sink = sink
        self.voice = voice
        self.splitter = SentenceSplitter()
        self.jobs: asyncio.Queue[SentenceJob | None] = asyncio.Queue()
        self.all_jobs: list[SentenceJob] = []
        self.head = 0  # index of the sentence being played
        self.chars = 0  # the stream's text so far (bounded: MAX_TEXT_CHARS)
        # first audio is timed from the first sentence handed to the TTS server, not from
        # synthesize-start: until then the stream waits for the client's (the LLM's) text
        self.first_sentence_at: float | None = None
        self.stopped = False
        self.failed = False  # an error was sent; later text of this stream is dropped
        self._on_end = on_end
        self.writer = asyncio.create_task(self._run(), name="tts stream writer")

    @property
    def working(self) -> bool:
        """Sentences are still being synthesized or sent (the client may wait in silence)."""
        return not self.writer.done() and (self.stopped or self.head < len(self.all_jobs))

    def add_text(self, text: str) -> None:
        """More of the client's text; GatewayError (and the stream ends) past MAX_TEXT_CHARS."""
        self.chars += len(text)
        if self.chars > MAX_TEXT_CHARS:
            self.failed = True
            self._cancel_fetches()
            self.writer.cancel()
            raise text_too_long()
        for sentence in self.splitter.add(text):
            self._submit(sentence)

    def stop(self) -> None:
        """synthesize-stop: flush the tail; the writer ends the stream when all audio is out."""
        if self.stopped:
            return
        self.stopped = True
        for sentence in self.splitter.finish():
            self._submit(sentence)
        self.jobs.put_nowait(None)

    async def cancel(self) -> None:
        """Client gone or failure: stop every upstream request."""
        tasks = [j.task for j in self.all_jobs if j.task is not None]
        if self.writer is not asyncio.current_task():
            tasks.append(self.writer)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _cancel_fetches(self) -> None:
        for job in self.all_jobs:
            if job.task is not None:
                job.task.cancel()

    def _submit(self, text: str) -> None:
        if self.first_sentence_at is None:
            self.first_sentence_at = time.perf_counter()
        job = SentenceJob(len(self.all_jobs), text)
        self.all_jobs.append(job)
        self.jobs.put_nowait(job)
        self._start_ready()

    def _start_ready(self) -> None:
        """Fetch the sentences inside the window (a task only then: a long text that is still
        waiting holds its sentences' text, not a task each)."""
        end = min(len(self.all_jobs), self.head + self.ctx.tts.concurrency)
        for job in self.all_jobs[self.head : end]:
            if job.task is None:
                job.task = asyncio.create_task(self._fetch(job), name=f"tts sentence {job.index}")

    async def _fetch(self, job: SentenceJob) -> None:
        ctx = self.ctx
        try:
            body = request_body(ctx, job.text, self.voice)
            ahead = job.index - self.head
            async for item in ctx.tts_backend.speech(body, ctx.tts.pcm_rate, ahead):
                job.queue.put_nowait(item)
            job.queue.put_nowait(_DONE)
        except GatewayError as err:
            job.queue.put_nowait(err)
        except Exception:  # never leave the writer waiting on a sentence that cannot finish
            _LOGGER.exception("Unexpected failure synthesizing a sentence")
            job.queue.put_nowait(GatewayError(INTERNAL, "Internal error during synthesis"))

    async def _run(self) -> None:
        try:
            await self._write_all()
        except GatewayError as err:
            self.failed = True
            self._cancel_fetches()
            await self.sink.send_error(err, Kind.TTS_STREAM)
        except (ConnectionError, RuntimeError):  # the client went away mid-stream
            self.failed = True
            self._cancel_fetches()
        finally:
            self._on_end(self)

    async def _write_all(self) -> None:
        out = AudioOut(self.ctx, self.sink)
        latency = self.ctx.metrics.latency[Kind.TTS_STREAM]
        while (job := await self.jobs.get()) is not None:
            await out.start()
            out.new_source()
            while (item := await job.queue.get()) is not _DONE:
                if isinstance(item, GatewayError):
                    raise item
                fmt, pcm = cast(tuple[PcmFormat, bytes], item)
                if await out.write(fmt, pcm) and self.first_sentence_at is not None:
                    latency.observe((time.perf_counter() - self.first_sentence_at) * 1000)
            self.head = job.index + 1
            self._start_ready()
        if out.started:
            await self.sink.send(AudioStop().event(), SynthesizeStopped().event())
        else:
            await self.sink.send(SynthesizeStopped().event())
