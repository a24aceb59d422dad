"""Speech-to-text: audio is converted to the backend's format as it arrives (so the upload is
ready at audio-stop), bounded in length, then sent; streamed deltas become transcript chunks."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from wyoming.asr import Transcript, TranscriptChunk, TranscriptStart, TranscriptStop

from .audio import Converter, PcmFormat, check_format
from .errors import AUDIO_TOO_LONG, BAD_REQUEST, GatewayError
from .upload import WavUpload

if TYPE_CHECKING:
    from .connection import Connection


class SttSession:
    """One utterance: transcribe? -> audio-start -> audio-chunk* -> audio-stop."""

    def __init__(self, conn: Connection, model: str, language: str | None) -> None:
        self.conn = conn
        self.model = model
        self.language = language
        settings = conn.gateway.settings
        self.target = PcmFormat(settings.stt_rate, 2, 1)
        self.limit = int(settings.stt_max_seconds * self.target.rate) * self.target.frame_bytes
        self.upload = WavUpload(self.target)
        self.converter: Converter | None = None
        self.started = False
        self.failed = False

    def start(self, data: dict[str, object]) -> None:
        fmt = check_format(data.get("rate"), data.get("width"), data.get("channels"))
        self.converter = Converter(fmt, self.target)
        self.started = True

    def add(self, data: dict[str, object], payload: bytes | None) -> None:
        if self.failed:
            return
        if not self.started or self.converter is None:
            self.failed = True
            raise GatewayError(BAD_REQUEST, "audio-chunk arrived before audio-start")
        src = self.converter.source
        if (data.get("rate"), data.get("width"), data.get("channels")) != (
            src.rate,
            src.width,
            src.channels,
        ):  # a chunk may declare its own format
            fmt = check_format(data.get("rate"), data.get("width"), data.get("channels"))
            self.converter = Converter(fmt, self.target)
        self.upload.append(self.converter.convert(payload or b""))
        if self.upload.audio_bytes > self.limit:
            self.failed = True
            self.upload.clear()
            raise GatewayError(
                AUDIO_TOO_LONG,
                f"Audio longer than {self.conn.gateway.settings.stt_max_seconds:g} s was refused",
            )

    async def finish(self) -> None:
        """audio-stop: upload and answer with transcript events."""
        if self.failed:
            return
        if not self.started:
            raise GatewayError(BAD_REQUEST, "audio-stop arrived before audio-start")
        gw = self.conn.gateway
        settings = gw.settings
        started = time.perf_counter()
        fields = {"model": self.model}
        if self.language:
            fields["language"] = self.language
        if settings.stt_prompt:
            fields["prompt"] = settings.stt_prompt
        streaming = self.model in settings.stt_streaming_models
        sent_start = False
        async for kind, text in gw.stt.transcribe(self.upload, fields, streaming):
            if streaming and not sent_start:
                sent_start = True
                await self.conn.send(TranscriptStart(language=self.language).event())
            if kind == "delta":
                if text:
                    await self.conn.send(TranscriptChunk(text=text).event())
                continue
            gw.metrics.latency["stt"].observe((time.perf_counter() - started) * 1000)
            await self.conn.send(Transcript(text=text.strip(), language=self.language).event())
        if sent_start:
            await self.conn.send(TranscriptStop().event())
