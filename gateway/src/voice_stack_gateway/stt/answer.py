"""Answering a turn with transcript events: the early transcript, the whole audio's, or an empty
one; streamed deltas go out as transcript chunks as they arrive."""

from __future__ import annotations

import logging
import time

from wyoming.asr import Transcript, TranscriptChunk, TranscriptStart, TranscriptStop

from ..errors import BAD_REQUEST, GatewayError
from ..metrics import EarlyResult, Kind
from ..session import SessionContext, Sink
from .early import EarlyTranscription
from .transcription import Transcription
from .utterance import Utterance

_LOGGER = logging.getLogger(__name__)


async def at_stop(
    ctx: SessionContext, sink: Sink, utterance: Utterance, early: EarlyTranscription | None
) -> None:
    """audio-stop (or the gateway's own VAD, as if it came): the clock of the STT latency starts
    here."""
    stopped = time.perf_counter()
    if utterance.failed:
        return
    if not utterance.started:
        raise GatewayError(BAD_REQUEST, "audio-stop arrived before audio-start")
    transcription = await _transcription(ctx, utterance, early)
    try:
        await send(ctx, sink, utterance, transcription, stopped)
    finally:
        await transcription.close()


async def early(
    ctx: SessionContext,
    sink: Sink,
    utterance: Utterance,
    transcription: Transcription,
    pause_ms: int,
) -> None:
    """The gateway ended the turn on its words: the early transcript is the answer. There is no
    audio-stop to time from: its latency (`stt_turn`) runs from the end of speech, `pause_ms` of
    audio before this decision."""
    ended = time.perf_counter() - pause_ms / 1000
    await send(ctx, sink, utterance, transcription, ended, timed=Kind.STT_TURN)


async def silence(sink: Sink, utterance: Utterance) -> None:
    """No speech in the whole stream: an empty transcript, which Home Assistant answers with
    its own "No text recognized" (no backend request: there is nothing to transcribe)."""
    _LOGGER.debug("STT answered with an empty transcript: no speech")
    events = [Transcript(text="", language=utterance.language).event()]
    if utterance.streaming:
        events = [TranscriptStart(language=utterance.language).event(), *events]
        events.append(TranscriptStop().event())
    await sink.send(*events)


async def _transcription(
    ctx: SessionContext, utterance: Utterance, early: EarlyTranscription | None
) -> Transcription:
    """The early request if it covers the whole audio and answers, else the whole audio's.

    A streaming model's early deltas are sent on as they arrive (once the first came), so it
    keeps streaming; a request that fails before its first result falls back to the whole audio.
    """
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


async def send(
    ctx: SessionContext,
    sink: Sink,
    utterance: Utterance,
    transcription: Transcription,
    stopped: float,
    *,
    timed: Kind = Kind.STT,
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
        ctx.metrics.latency[timed].observe((time.perf_counter() - stopped) * 1000)
        await sink.send(Transcript(text=text.strip(), language=language).event())
    if sent_start:
        await sink.send(TranscriptStop().event())
