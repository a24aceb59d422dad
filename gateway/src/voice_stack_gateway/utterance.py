"""One utterance's audio: transcribe? -> audio-start -> audio-chunk* -> audio-stop. Audio is
converted to the backend's format as it arrives (so the upload is ready at audio-stop), bounded
in length, watched for pauses when early transcription is on, and for the end of the turn
(endpoint.py; own_vad.py when the gateway runs the client's VAD too) when that is on too."""

from __future__ import annotations

from collections.abc import Callable

from .audio import Converter, PcmFormat, check_format
from .early import EarlyTranscription
from .endpoint import TurnEnd
from .errors import AUDIO_TOO_LONG, BAD_REQUEST, GatewayError
from .own_vad import Without
from .session import SessionContext
from .transcription import Transcription
from .upload import WavUpload
from .vad import RATE as VAD_RATE

_VAD_FORMAT = PcmFormat(VAD_RATE, 2, 1)


class Utterance:
    def __init__(
        self,
        ctx: SessionContext,
        model: str,
        language: str | None,
        on_end: Callable[[Utterance, Transcription | Without], bool] | None = None,
    ) -> None:
        self.ctx = ctx
        self.model = model
        self.language = language
        self.streaming = model in ctx.stt.streaming_models
        self.target = PcmFormat(ctx.stt.rate, 2, 1)
        self.limit = int(ctx.stt.max_seconds * self.target.rate) * self.target.frame_bytes
        self.upload = WavUpload(self.target)
        self.converter: Converter | None = None
        self._vad_converter: Converter | None = None  # when the upload is not 16 kHz
        self.started = False
        self.failed = False
        self.ended = False  # the gateway ended the turn: what the client still sends is ignored
        self.ignored_bytes = 0
        self.early: EarlyTranscription | None = None
        self.turn: TurnEnd | None = None
        if ctx.stt.early_pause_ms:
            self.early = EarlyTranscription(
                ctx.metrics, self.snapshot_request, ctx.stt.early_pause_ms, ctx.stt.early_max
            )
            if ctx.stt.endpoint_ms and on_end is not None:
                self._on_end = on_end
                hold = ctx.stt.incomplete_hold_ms if ctx.stt.own_vad else None
                self.turn = TurnEnd(
                    ctx.metrics,
                    self.early,
                    ctx.stt.endpoint_ms,
                    language,
                    self._end_turn,
                    weak_ms=ctx.stt.endpoint_weak_ms,
                    hold_ms=hold,
                )

    def start(self, data: dict[str, object]) -> None:
        self._set_format(check_format(data.get("rate"), data.get("width"), data.get("channels")))
        self.started = True

    def add(self, data: dict[str, object], payload: bytes | None) -> None:
        if self.ended:
            self.ignored_bytes += len(payload or b"")
            return
        if self.failed:
            return
        if not self.started or self.converter is None:
            self.failed = True
            raise GatewayError(BAD_REQUEST, "audio-chunk arrived before audio-start")
        declared = (data.get("rate"), data.get("width"), data.get("channels"))
        src = self.converter.source
        if declared != (src.rate, src.width, src.channels):  # a chunk may declare its own
            self._set_format(check_format(*declared))
        raw = payload or b""
        pcm = self.converter.convert(raw)
        self.upload.append(pcm)
        if self.upload.audio_bytes > self.limit:
            self.failed = True
            self.upload.clear()
            raise GatewayError(
                AUDIO_TOO_LONG, f"Audio longer than {self.ctx.stt.max_seconds:g} s was refused"
            )
        if self.early is not None:
            vad = self._vad_converter
            self.early.feed(pcm if vad is None else vad.convert(raw))
            if self.turn is not None:
                self.turn.check()

    @property
    def early_cuts(self) -> int:
        return self.early.cuts if self.early is not None else 0

    def _end_turn(self, answer: Transcription | Without) -> bool:
        if not self._on_end(self, answer):
            return False
        self.ended = True
        return True

    def _set_format(self, fmt: PcmFormat) -> None:
        self.converter = Converter(fmt, self.target)
        if self.target != _VAD_FORMAT:
            self._vad_converter = Converter(fmt, _VAD_FORMAT)

    def fields(self) -> dict[str, str]:
        fields = {"model": self.model, "response_format": "json"}
        if self.language:
            fields["language"] = self.language
        if self.ctx.stt.prompt:
            fields["prompt"] = self.ctx.stt.prompt
        if self.streaming:
            fields["stream"] = "true"
        return fields

    def full_request(self) -> Transcription:
        """The whole audio (the upload is finished: nothing may be added after this)."""
        body = self.upload.finish(self.fields())
        return self._request(body, "stt")

    def snapshot_request(self) -> Transcription:
        """The audio so far, while more keeps coming."""
        return self._request(self.upload.snapshot(self.fields()), "stt early")

    def _request(self, body: bytes | bytearray, name: str) -> Transcription:
        ctx = self.ctx
        content_type = self.upload.content_type
        return Transcription(ctx.stt_backend, body, content_type, self.streaming, name)

    async def close(self) -> None:
        """End its requests and let go of its audio at once: the early transcription and the end
        of turn call back into this utterance, a cycle that left each one's audio to the
        cyclic GC (heap growth and RSS creep in a soak)."""
        turn, early, self.turn, self.early = self.turn, self.early, None, None
        if turn is not None:
            await turn.close()
        if early is not None:
            await early.close()
        self.upload.release()
