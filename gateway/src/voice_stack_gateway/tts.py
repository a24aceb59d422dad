"""A connection's text-to-speech requests: plain `synthesize`, and streams of
synthesize-start / synthesize-chunk* / synthesize / synthesize-stop."""

from __future__ import annotations

from typing import Any

from wyoming.event import Event
from wyoming.tts import SynthesizeVoice

from .errors import BAD_REQUEST, GatewayError
from .metrics import Kind
from .session import Jobs, SessionContext, Sink
from .synthesis import MAX_TEXT_CHARS, StreamingSynthesis, synthesize_plain, text_too_long


class TtsHandler:
    def __init__(self, ctx: SessionContext, sink: Sink, jobs: Jobs) -> None:
        self.ctx = ctx
        self.sink = sink
        self.jobs = jobs
        self.model: str | None = None  # pinned by select-program
        self.stream: StreamingSynthesis | None = None

    @property
    def active(self) -> bool:
        return self.stream is not None

    @property
    def working(self) -> bool:
        """A stream's audio is still on its way: the client is owed it."""
        return self.stream is not None and self.stream.working

    async def synthesize(self, event: Event) -> None:
        if self.stream is not None:
            return  # the compatibility copy of a streamed text: already being spoken
        await self.jobs.wait()
        text = event.data.get("text")
        if not isinstance(text, str):
            raise malformed(event, "its text must be a string")
        requested = voice_of(event)
        if not text.strip():
            raise GatewayError(BAD_REQUEST, "Nothing to synthesize: the text is empty")
        if len(text) > MAX_TEXT_CHARS:
            raise text_too_long()
        self.ctx.metrics.requests[Kind.TTS] += 1
        voice = self.ctx.catalog.current.voice(requested, self.model)
        await self.jobs.run(Kind.TTS, synthesize_plain(self.ctx, self.sink, text, voice))

    async def start(self, event: Event) -> None:
        await self.jobs.wait()
        if self.stream is not None:
            await self.stream.cancel()
        self.ctx.metrics.requests[Kind.TTS_STREAM] += 1
        voice = self.ctx.catalog.current.voice(voice_of(event), self.model)
        self.stream = StreamingSynthesis(self.ctx, self.sink, voice, self._ended)

    async def chunk(self, event: Event) -> None:
        stream = self._current("synthesize-chunk")
        text = event.data.get("text")
        if isinstance(text, str) and not stream.failed:
            stream.add_text(text)

    async def stop(self, _event: Event) -> None:
        stream = self._current("synthesize-stop")
        if stream.failed:
            self.stream = None
        else:
            stream.stop()

    async def close(self) -> None:
        if self.stream is not None:
            await self.stream.cancel()

    def _current(self, what: str) -> StreamingSynthesis:
        if self.stream is None or self.stream.stopped:
            raise GatewayError(BAD_REQUEST, f"{what} arrived outside a stream")
        return self.stream

    def _ended(self, stream: StreamingSynthesis) -> None:
        # a failed stream stays current until synthesize-stop, so its remaining chunks and the
        # compatibility synthesize are not mistaken for new requests
        if self.stream is stream and stream.stopped:
            self.stream = None


def malformed(event: Event, why: str) -> GatewayError:
    return GatewayError(BAD_REQUEST, f"Malformed {event.type} event: {why}")


def voice_of(event: Event) -> SynthesizeVoice | None:
    """The voice a synthesize or synthesize-start names (checked: the client's data is read
    here, so whatever it holds is the client's mistake, never a crash of ours)."""
    voice: Any = event.data.get("voice")
    if voice is None:
        return None
    if not isinstance(voice, dict):
        raise malformed(event, "its voice must be an object")
    for field in ("name", "speaker", "language"):
        if not isinstance(voice.get(field, ""), str | None):
            raise malformed(event, f"its voice {field} must be a string")
    return SynthesizeVoice.from_dict(voice)
