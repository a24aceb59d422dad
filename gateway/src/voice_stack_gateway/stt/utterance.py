"""One utterance's audio: transcribe? -> audio-start -> audio-chunk* -> audio-stop. Audio is
converted to the backend's format as it arrives (so the upload is ready at audio-stop), and
bounded in length; each chunk is also handed back at 16 kHz for the pause detector. What is
done with the audio (early requests, the end of the turn) is the handler's (handler.py)."""

from __future__ import annotations

from ..audio import Converter, PcmFormat, check_format
from ..errors import AUDIO_TOO_LONG, BAD_REQUEST, GatewayError
from ..session import SessionContext
from .transcription import Request, Transcription
from .upload import WavUpload
from .vad import RATE as VAD_RATE

_VAD_FORMAT = PcmFormat(VAD_RATE, 2, 1)


class Utterance:
    def __init__(
        self, ctx: SessionContext, model: str, language: str | None, *, listen: bool = False
    ) -> None:
        self.ctx = ctx
        self.listen = listen  # hand each chunk back at 16 kHz (early transcription is on)
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

    def start(self, data: dict[str, object]) -> None:
        self._set_format(check_format(data.get("rate"), data.get("width"), data.get("channels")))
        self.started = True

    def add(self, data: dict[str, object], payload: bytes | None) -> bytes | None:
        """Append a chunk; its audio at 16 kHz 16-bit mono when listening (for the pause
        detector), else None, as after a failure (what follows one is dropped)."""
        if self.failed:
            return None
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
        if not self.listen:
            return None
        vad = self._vad_converter
        return pcm if vad is None else vad.convert(raw)

    def _set_format(self, fmt: PcmFormat) -> None:
        self.converter = Converter(fmt, self.target)
        if self.listen and self.target != _VAD_FORMAT:
            self._vad_converter = Converter(fmt, _VAD_FORMAT)

    def fields(self, response_format: str = "json") -> dict[str, str]:
        fields = {"model": self.model, "response_format": response_format}
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
        return self._request(Request(body, self.upload.content_type, self.streaming), "stt")

    def snapshot_request(self) -> Transcription:
        """The audio so far, while more keeps coming; asked as verbose_json for the ASR's
        confidence (read by the end of turn) unless the model streams, the confidence is not
        used, or the server refused that format before."""
        plain = self.upload.snapshot(self.fields())
        request = Request(plain, self.upload.content_type, self.streaming)
        if self._verbose:
            verbose = self.upload.snapshot(self.fields("verbose_json"))
            request = Request(verbose, request.content_type, False, plain, self._refused)
        return self._request(request, "stt early")

    @property
    def _verbose(self) -> bool:
        stt = self.ctx.stt
        refused = self.model in self.ctx.verbose_refused
        return stt.unsure_logprob is not None and not self.streaming and not refused

    def _refused(self) -> None:
        self.ctx.verbose_refused.add(self.model)

    def _request(self, request: Request, name: str) -> Transcription:
        return Transcription(self.ctx.stt_backend, request, name)

    def release(self) -> None:
        """Let go of the audio at once (a turn's audio is hundreds of kB)."""
        self.upload.release()
