"""One Wyoming client connection: reads events without ever blocking on upstream work, and turns
every failure into an `error` event."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event, async_write_event
from wyoming.info import Describe, SelectProgram
from wyoming.ping import Ping, Pong
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from .catalog import ASR_PROGRAM, TTS_PROGRAM
from .errors import (
    BAD_REQUEST,
    INTERNAL,
    SHUTTING_DOWN,
    UNKNOWN_PROGRAM,
    GatewayError,
    ProtocolError,
)
from .protocol import EventReader, encode_event
from .stt import SttSession
from .tts import StreamingSynthesis, VoiceChoice, synthesize_plain

if TYPE_CHECKING:
    from .gateway import Gateway

_LOGGER = logging.getLogger(__name__)


class Connection:
    def __init__(
        self, gateway: Gateway, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.gateway = gateway
        self.reader = reader
        self.writer = writer
        self.stt: SttSession | None = None
        self.stream: StreamingSynthesis | None = None
        self.job: asyncio.Task[None] | None = None  # a plain synthesis or a transcription
        self.stt_model: str | None = None  # pinned by select-program
        self.tts_model: str | None = None
        self.closed = False

    # --- output ---------------------------------------------------------------------------------

    async def send(self, *events: Event | bytes) -> None:
        """Write events (or pre-encoded event bytes) back to back, then drain once."""
        if self.closed:
            raise ConnectionResetError("client gone")
        for event in events:
            self.writer.write(event if isinstance(event, bytes) else encode_event(event))
        await self.writer.drain()

    async def send_error(self, err: GatewayError, kind: str) -> None:
        self.gateway.metrics.error(kind, err.code)
        _LOGGER.info("%s error sent to client: %s (%s)", kind, err.text, err.code)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.send(err.event())

    @property
    def busy(self) -> bool:
        """A request is in progress (audio coming in, or an answer going out)."""
        job_running = self.job is not None and not self.job.done()
        return job_running or self.stream is not None or (self.stt is not None and self.stt.started)

    async def shutdown(self) -> None:
        """Gateway stopping: tell a client mid-request why, then end the connection."""
        if self.busy and not self.closed:
            await self.send_error(
                GatewayError(SHUTTING_DOWN, "The gateway is shutting down; try again"), "shutdown"
            )
        self.reader.feed_eof()
        self.writer.close()

    def stream_finished(self, stream: StreamingSynthesis) -> None:
        # a failed stream stays current until synthesize-stop, so its remaining chunks and the
        # compatibility synthesize are not mistaken for new requests
        if self.stream is stream and stream.stopped:
            self.stream = None

    # --- main loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        metrics = self.gateway.metrics
        metrics.active_sessions += 1
        events = EventReader(self.reader)
        try:
            while True:
                try:
                    event = await events.read()
                except ProtocolError as err:
                    await self.send_error(err, "protocol")
                    break
                if event is None:
                    break
                try:
                    await self.dispatch(event)
                except GatewayError as err:
                    await self.send_error(err, event.type)
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    # wyoming's event classes index their data: a field missing or mistyped
                    _LOGGER.debug("Malformed %s event: %r", event.type, exc)
                    bad = GatewayError(BAD_REQUEST, f"Malformed {event.type} event: {exc!r}")
                    await self.send_error(bad, event.type)
        except ConnectionError, asyncio.IncompleteReadError:
            pass
        finally:
            self.closed = True
            metrics.active_sessions -= 1
            await self._cancel_work()
            self.writer.close()

    async def _cancel_work(self) -> None:
        if self.job is not None and not self.job.done():
            self.job.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.job
        if self.stream is not None:
            await self.stream.cancel()

    def _run_job(self, coro_name: str, kind: str, coro: Coroutine[Any, Any, None]) -> None:
        """Upstream work runs beside the reader so a disconnect is seen (and cancels it)."""

        async def guarded() -> None:
            try:
                await coro
            except GatewayError as err:
                await self.send_error(err, kind)
            except (ConnectionError, RuntimeError) as exc:
                if not self.closed:
                    _LOGGER.debug("client write failed: %s", exc)
            except Exception:
                _LOGGER.exception("Unexpected failure in %s", kind)
                await self.send_error(GatewayError(INTERNAL, f"Internal error during {kind}"), kind)

        self.job = asyncio.create_task(guarded(), name=coro_name)

    async def _wait_job(self) -> None:
        """Requests on one connection are answered in order."""
        if self.job is not None and not self.job.done():
            await asyncio.shield(self.job)

    async def dispatch(self, event: Event) -> None:
        etype = event.type
        gw = self.gateway
        if AudioChunk.is_type(etype):  # hot path first
            if self.stt is None:
                self.stt = SttSession(self, self._stt_model(), None)
            self.stt.add(event.data, event.payload)
        elif Describe.is_type(etype):
            await self.send(gw.catalog.current.describe)
        elif Transcribe.is_type(etype):
            await self._wait_job()
            language = event.data.get("language")
            name = event.data.get("name")
            model = (
                name if isinstance(name, str) and name in gw.catalog.current.stt_models else None
            )
            self.stt = SttSession(
                self, model or self._stt_model(), language if isinstance(language, str) else None
            )
        elif AudioStart.is_type(etype):
            await self._wait_job()
            if self.stt is None or self.stt.started or self.stt.failed:
                self.stt = SttSession(self, self._stt_model(), None)
            self.stt.start(event.data)
        elif AudioStop.is_type(etype):
            session, self.stt = self.stt, None
            if session is None:
                raise GatewayError(BAD_REQUEST, "audio-stop arrived before audio-start")
            gw.metrics.requests["stt"] += 1
            self._run_job("stt", "stt", session.finish())
        elif SynthesizeStart.is_type(etype):
            await self._wait_job()
            if self.stream is not None:
                await self.stream.cancel()
            gw.metrics.requests["tts_stream"] += 1
            start = SynthesizeStart.from_event(event)
            self.stream = StreamingSynthesis(self, self._voice(start.voice))
        elif SynthesizeChunk.is_type(etype):
            if self.stream is None or self.stream.stopped:
                raise GatewayError(BAD_REQUEST, "synthesize-chunk arrived outside a stream")
            text = event.data.get("text")
            if isinstance(text, str) and not self.stream.failed:
                self.stream.add_text(text)
        elif SynthesizeStop.is_type(etype):
            if self.stream is None or self.stream.stopped:
                raise GatewayError(BAD_REQUEST, "synthesize-stop arrived outside a stream")
            if self.stream.failed:
                self.stream = None
            else:
                self.stream.stop()
        elif Synthesize.is_type(etype):
            if self.stream is not None:
                return  # the compatibility copy of a streamed text: already being spoken
            await self._wait_job()
            request = Synthesize.from_event(event)
            if not request.text.strip():
                raise GatewayError(BAD_REQUEST, "Nothing to synthesize: the text is empty")
            gw.metrics.requests["tts"] += 1
            self._run_job(
                "tts", "tts", synthesize_plain(self, request.text, self._voice(request.voice))
            )
        elif SelectProgram.is_type(etype):
            self._select(event.data.get("name"))
        elif Ping.is_type(etype):
            await self.send(Pong(text=event.data.get("text")).event())
        else:
            _LOGGER.debug("Ignoring event %s", etype)  # the protocol says: drop unknown events

    # --- choices ----------------------------------------------------------------------------------

    def _stt_model(self) -> str:
        return self.stt_model or self.gateway.catalog.current.stt_models[0]

    def _voice(self, voice: SynthesizeVoice | None) -> VoiceChoice:
        catalog = self.gateway.catalog.current
        name = voice.name if voice is not None and voice.name else None
        known = catalog.voices.get(name) if name else None
        if known is None and name is None:
            default = catalog.default_voice()
            if self.tts_model is not None:
                default = next(
                    (v for v in catalog.voices.values() if v.model == self.tts_model), default
                )
            known = default
        if known is not None:
            return VoiceChoice(known.name, self.tts_model or known.model)
        # a voice we have not listed: pass it through, the backend decides
        return VoiceChoice(str(name), self.tts_model or catalog.tts_models[0])

    def _select(self, name: object) -> None:
        catalog = self.gateway.catalog.current
        if name in (ASR_PROGRAM, TTS_PROGRAM):
            return
        if isinstance(name, str) and name in catalog.stt_models:
            self.stt_model = name
        elif isinstance(name, str) and name in catalog.tts_models:
            self.tts_model = name
        else:
            raise GatewayError(UNKNOWN_PROGRAM, f"Unknown program {name!r}")


async def handle_client(
    gateway: Gateway, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """asyncio.start_server callback: refuse beyond the connection limit, else serve."""
    if gateway.metrics.active_sessions >= gateway.settings.max_connections:
        err = GatewayError("busy", "Too many connections; try again shortly")
        with contextlib.suppress(ConnectionError):
            await async_write_event(err.event(), writer)
        gateway.metrics.error("connection", err.code)
        writer.close()
        return
    started = time.perf_counter()
    conn = Connection(gateway, reader, writer)
    gateway.connections.add(conn)
    try:
        await conn.run()
    finally:
        gateway.connections.discard(conn)
    _LOGGER.debug("connection closed after %.1f s", time.perf_counter() - started)
