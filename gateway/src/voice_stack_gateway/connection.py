"""One Wyoming client connection: reads events without ever blocking on upstream work, routes
them to its STT and TTS handlers, and turns every failure into an `error` event.

Any LAN host may connect, so nothing here waits on the client without a bound: a client that
sends nothing (or too slowly to finish an event) while the gateway owes it no answer, or that
stops reading what it is sent, is told and dropped after `idle_timeout` seconds; what is read
ahead counts every byte; the errors a client causes are logged within a budget (ClientLog)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from wyoming.event import Event
from wyoming.ping import Pong

from .client_log import ClientLog
from .errors import IDLE, INTERNAL, SHUTTING_DOWN, GatewayError, ProtocolError
from .metrics import Kind
from .protocol import EventReader, encode_event
from .session import Jobs, SessionContext
from .stt import SttHandler
from .tts import TtsHandler

_LOGGER = logging.getLogger(__name__)
Route = tuple[Callable[[Event], Awaitable[None]], Kind]
# While a request waits for the job before it, the connection reads on (to see a client that
# leaves) until it holds this many events or this many bytes (as sent: headers, data, audio);
# then it waits as before.
AHEAD_EVENTS = 8
AHEAD_BYTES = 1024 * 1024
IDLE_TIMEOUT = 60.0  # default: a client's silence (or refusal to read) while it is owed nothing


class Connection:
    def __init__(
        self,
        ctx: SessionContext,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        peer: str = "?",
        log: ClientLog | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.ctx = ctx
        self.reader = reader
        self.writer = writer
        self.peer = peer  # the client's address, for the log
        self._log = log or ClientLog()
        self._idle = idle_timeout
        self._closed = False
        self._events = EventReader(reader)
        # events read while a request waited for the job before it, handled next, in order,
        # each with its size on the wire
        self._ahead: deque[tuple[Event | ProtocolError, int]] = deque()
        self._ahead_bytes = 0  # their sizes
        self._reading: asyncio.Future[Event | None] | None = None  # a read in flight
        self.jobs = Jobs(self, self._until_done)
        self.stt = SttHandler(ctx, self, self.jobs)
        self.tts = TtsHandler(ctx, self, self.jobs)
        self._routes: dict[str, Route] = {  # by Wyoming event type
            "describe": (self._describe, Kind.PROTOCOL),
            "ping": (self._ping, Kind.PROTOCOL),
            "select-program": (self._select, Kind.PROGRAM),
            "transcribe": (self.stt.transcribe, Kind.STT),
            "audio-start": (self.stt.audio_start, Kind.STT),
            "audio-stop": (self.stt.audio_stop, Kind.STT),
            "synthesize": (self.tts.synthesize, Kind.TTS),
            "synthesize-start": (self.tts.start, Kind.TTS_STREAM),
            "synthesize-chunk": (self.tts.chunk, Kind.TTS_STREAM),
            "synthesize-stop": (self.tts.stop, Kind.TTS_STREAM),
        }

    # --- the sink the handlers write to ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    async def send(self, *events: Event | bytes) -> None:
        """Write events (or pre-encoded event bytes) back to back, then drain once."""
        if self._closed:
            raise ConnectionResetError("client gone")
        for event in events:
            self.writer.write(event if isinstance(event, bytes) else encode_event(event))
        try:
            async with asyncio.timeout(self._idle):
                await self.writer.drain()
        except TimeoutError:  # its buffers are full: the client reads nothing
            self._reset()
            raise ConnectionResetError(f"the client read nothing for {self._idle:g} s") from None

    def _reset(self) -> None:
        """Drop the connection and what the kernel still holds for it: a plain close would
        queue a FIN behind the unread bytes and keep them until the client reads."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    async def send_error(self, err: GatewayError, kind: Kind) -> None:
        self.ctx.metrics.error(kind, err.code)
        self._log.mistake(
            self.peer, "%s error sent to %s: %s (%s)", kind, self.peer, err.text, err.code
        )
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.send(err.event())

    # --- the read loop ---------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A request is in progress (audio coming in, or an answer going out)."""
        return self.jobs.busy or self.stt.active or self.tts.active

    @property
    def owing(self) -> bool:
        """The gateway owes the client an answer it is still working on: the client may be
        silent meanwhile."""
        return self.jobs.busy or self.tts.working

    async def run(self) -> None:
        try:
            while (event := await self._next()) is not None:
                await self._handle(event)
        except ProtocolError as err:
            await self.send_error(err, Kind.PROTOCOL)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._closed = True
            if self._reading is not None:
                self._reading.cancel()
            await self.jobs.cancel()
            await self.stt.close()
            await self.tts.close()
            self.writer.close()

    async def _next(self) -> Event | None:
        if self._ahead:
            item, size = self._ahead.popleft()
            self._ahead_bytes -= size
            if isinstance(item, ProtocolError):
                raise item
            return item
        reading, self._reading = self._reading, None
        return await self._within_idle(reading or asyncio.ensure_future(self._events.read()))

    async def _within_idle(self, reading: asyncio.Future[Event | None]) -> Event | None:
        """The read's event, unless the client sends nothing for the idle limit while the
        gateway owes it nothing (a header sent a byte at a time counts as nothing)."""
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        try:
            while True:
                left = quiet_since + self._idle - loop.time()
                if left > 0:
                    await asyncio.wait({reading}, timeout=left)
                if reading.done():
                    return reading.result()
                if self.owing:
                    quiet_since = loop.time()  # counted again from when it is owed nothing
                    continue
                raise ProtocolError(IDLE, f"No event for {self._idle:g} s; connection closed")
        finally:
            reading.cancel()

    async def _until_done(self, job: asyncio.Task[None]) -> None:
        """Wait for the job before a request while reading the client's next events (kept for
        later, in order): a client that leaves meanwhile ends the connection, and with it every
        request of its own upstream, at once rather than when that job is done."""
        while not job.done():
            if self._reading is None:
                if len(self._ahead) >= AHEAD_EVENTS or self._ahead_bytes >= AHEAD_BYTES:
                    await asyncio.wait({job})
                    return
                self._reading = asyncio.ensure_future(self._events.read())
            either: set[asyncio.Future[Any]] = {job, self._reading}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not self._reading.done():
                continue  # the job is done; the read goes on for _next
            reading, self._reading = self._reading, None
            try:
                event = reading.result()
            except ProtocolError as err:  # answered in order, after the events before it
                self._ahead.append((err, 0))
                await asyncio.wait({job})
                return
            if event is None:
                raise ConnectionResetError("the client left")
            size = self._events.last_size
            self._ahead.append((event, size))
            self._ahead_bytes += size

    async def _handle(self, event: Event) -> None:
        if event.type == "audio-chunk":  # the hot path first
            route: Route = (self._audio_chunk, Kind.STT)
        elif (found := self._routes.get(event.type)) is not None:
            route = found
        else:
            _LOGGER.debug("Ignoring event %s", event.type)  # the protocol says: drop unknown events
            return
        handler, kind = route
        try:
            await handler(event)
        except GatewayError as err:  # the client's mistakes (its data is checked where read)
            await self.send_error(err, kind)
        except ConnectionError:
            raise
        except Exception:  # a bug of ours: logged in full, and the client is told, not left
            self._log.bug(self.peer, "Unexpected failure handling a %s event", event.type)
            bug = GatewayError(INTERNAL, f"Internal error while handling {event.type}")
            await self.send_error(bug, kind)

    async def shutdown(self) -> None:
        """Gateway stopping: tell a client mid-request why, then end the connection."""
        if self.busy and not self._closed:
            err = GatewayError(SHUTTING_DOWN, "The gateway is shutting down; try again")
            await self.send_error(err, Kind.SHUTDOWN)
        self.reader.feed_eof()
        self.writer.close()

    # --- events the connection answers itself ----------------------------------------------------

    async def _audio_chunk(self, event: Event) -> None:
        self.stt.audio_chunk(event)

    async def _describe(self, _event: Event) -> None:
        await self.send(self.ctx.catalog.describe)

    async def _ping(self, event: Event) -> None:
        await self.send(Pong(text=event.data.get("text")).event())

    async def _select(self, event: Event) -> None:
        pinned = self.ctx.catalog.current.program(event.data.get("name"))
        if pinned is not None:
            kind, model = pinned
            (self.stt if kind == "stt" else self.tts).model = model
