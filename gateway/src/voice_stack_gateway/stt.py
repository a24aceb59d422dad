"""A connection's speech-to-text requests, and their answers: the early transcript when it
covers the whole utterance, else the transcript of the whole audio; streamed deltas become
transcript chunks. When the gateway ends a turn itself (endpoint.py), the early transcript is
the answer before audio-stop, and what the client still sends for that utterance is ignored;
with its own VAD (own_vad.py) it also ends the other turns, answered as at audio-stop."""

from __future__ import annotations

import logging
import time

from wyoming.asr import Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.event import Event

from .errors import BAD_REQUEST, GatewayError
from .metrics import EarlyResult, Kind
from .own_vad import Without
from .session import Jobs, SessionContext, Sink
from .transcription import Transcription
from .utterance import Utterance

_LOGGER = logging.getLogger(__name__)


class SttHandler:
    def __init__(self, ctx: SessionContext, sink: Sink, jobs: Jobs) -> None:
        self.ctx = ctx
        self.sink = sink
        self.jobs = jobs
        self.model: str | None = None  # pinned by select-program
        self.utterance: Utterance | None = None

    @property
    def active(self) -> bool:
        """Audio is coming in (and its turn is not over)."""
        u = self.utterance
        return u is not None and u.started and not u.ended

    def _new(self, name: object = None, language: object = None) -> Utterance:
        model = self.ctx.catalog.current.stt_model(name, self.model)
        language = language if isinstance(language, str) else None
        return Utterance(self.ctx, model, language, self._end_turn)

    def _end_turn(self, utterance: Utterance, reply: Transcription | Without) -> bool:
        """The gateway ends this utterance's turn: answer now (with its early transcript, as at
        audio-stop, or with an empty transcript), unless an answer before it is still being
        sent (answers keep the order of the requests)."""
        if utterance is not self.utterance or self.jobs.busy:
            return False
        self.ctx.metrics.requests[Kind.STT] += 1
        if reply is Without.AUDIO:
            job = answer(self.ctx, self.sink, utterance)
        elif reply is Without.SILENCE:
            job = answer_silence(self.sink, utterance)
        else:
            self.ctx.metrics.early[EarlyResult.HIT] += 1
            _LOGGER.debug("STT answered by early transcription %d", utterance.early_cuts)
            job = answer_early(self.ctx, self.sink, utterance, reply)
        self.jobs.start(Kind.STT, job)
        return True

    async def _replace(self, utterance: Utterance | None) -> None:
        old, self.utterance = self.utterance, utterance
        if old is not None:
            await old.close()

    async def transcribe(self, event: Event) -> None:
        await self.jobs.wait()
        await self._replace(self._new(event.data.get("name"), event.data.get("language")))

    async def audio_start(self, event: Event) -> None:
        await self.jobs.wait()
        current = self.utterance
        if current is None or current.started or current.failed:
            await self._replace(self._new())
        assert self.utterance is not None
        self.utterance.start(event.data)

    def audio_chunk(self, event: Event) -> None:
        if self.utterance is None:
            self.utterance = self._new()
        self.utterance.add(event.data, event.payload)

    async def audio_stop(self, _event: Event) -> None:
        utterance, self.utterance = self.utterance, None
        if utterance is None:
            raise GatewayError(BAD_REQUEST, "audio-stop arrived before audio-start")
        if utterance.ended:  # answered already: nothing to do, nothing to say
            _LOGGER.debug(
                "audio-stop after the turn ended; %d bytes of audio after it ignored",
                utterance.ignored_bytes,
            )
            return
        if utterance.turn is not None:
            utterance.turn.left()
        self.ctx.metrics.requests[Kind.STT] += 1
        try:
            await self.jobs.run(Kind.STT, answer(self.ctx, self.sink, utterance))
        except BaseException:  # the client left while the job before ran: this never started
            await utterance.close()  # its early requests end with it
            raise

    async def close(self) -> None:
        await self._replace(None)


async def answer(ctx: SessionContext, sink: Sink, utterance: Utterance) -> None:
    """audio-stop: answer with transcript events; the clock of the STT latency starts here."""
    stopped = time.perf_counter()
    transcription: Transcription | None = None
    try:
        if utterance.failed:
            return
        if not utterance.started:
            raise GatewayError(BAD_REQUEST, "audio-stop arrived before audio-start")
        transcription = await _transcription(ctx, utterance)
        await _send(ctx, sink, utterance, transcription, stopped)
    finally:
        if transcription is not None:
            await transcription.close()
        await utterance.close()


async def answer_early(
    ctx: SessionContext, sink: Sink, utterance: Utterance, transcription: Transcription
) -> None:
    """The gateway ended the turn: the early transcript is the answer (there is no audio-stop
    to time from: the STT latency is counted from this decision)."""
    decided = time.perf_counter()
    try:
        await _send(ctx, sink, utterance, transcription, decided)
    finally:
        await transcription.close()
        await utterance.close()


async def answer_silence(sink: Sink, utterance: Utterance) -> None:
    """No speech in the whole stream: an empty transcript, which Home Assistant answers with
    its own "No text recognized" (no backend request: there is nothing to transcribe)."""
    try:
        _LOGGER.debug("STT answered with an empty transcript: no speech")
        events = [Transcript(text="", language=utterance.language).event()]
        if utterance.streaming:
            events = [TranscriptStart(language=utterance.language).event(), *events]
            events.append(TranscriptStop().event())
        await sink.send(*events)
    finally:
        await utterance.close()


async def _transcription(ctx: SessionContext, utterance: Utterance) -> Transcription:
    """The early request if it covers the whole audio and answers, else the whole audio's.

    A streaming model's early deltas are sent on as they arrive (once the first came), so it
    keeps streaming; a request that fails before its first result falls back to the whole audio.
    """
    early = utterance.early
    if early is None:
        return utterance.full_request()
    candidate = early.at_stop()
    if candidate is not None:
        try:
            began = await candidate.started()
        except BaseException:  # the client left while it was awaited: it must not outlive this
            candidate.cancel()
            raise
        if began:
            ctx.metrics.early[EarlyResult.HIT] += 1
            _LOGGER.debug("STT answered by early transcription %d", early.cuts)
            return candidate
        ctx.metrics.early[EarlyResult.WASTED] += 1
        _LOGGER.debug("Early transcription failed (%s)", candidate.error)
    ctx.metrics.early[EarlyResult.MISS] += 1
    _LOGGER.debug("STT answered by the whole audio (%d early cuts)", early.cuts)
    return utterance.full_request()


async def _send(
    ctx: SessionContext,
    sink: Sink,
    utterance: Utterance,
    transcription: Transcription,
    stopped: float,
) -> None:
    language = utterance.language
    sent_start = False
    async for kind, text in transcription.results():
        if utterance.streaming and not sent_start:
            sent_start = True
            await sink.send(TranscriptStart(language=language).event())
        if kind == "delta":
            if text:
                await sink.send(TranscriptChunk(text=text).event())
            continue
        ctx.metrics.latency[Kind.STT].observe((time.perf_counter() - stopped) * 1000)
        await sink.send(Transcript(text=text.strip(), language=language).event())
    if sent_start:
        await sink.send(TranscriptStop().event())
