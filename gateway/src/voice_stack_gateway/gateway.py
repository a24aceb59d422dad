"""The running gateway: settings, backends, catalog, metrics, and its two listeners."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from urllib.parse import urlparse

from aiohttp import web
from wyoming.event import async_write_event

from . import __version__
from .admission import Address, Admission, Refused, address_of
from .catalog_service import CatalogService
from .client_log import ClientLog
from .config import Settings
from .connection import Connection
from .discovery import Advertiser
from .errors import BUSY, NOT_ALLOWED, GatewayError
from .heap import HeapTrimmer, glibc_trim
from .http_side import build_app
from .metrics import Kind, Metrics
from .protocol import MAX_HEADER
from .session import SessionContext, SttOptions, TtsOptions
from .upstream import Backend, Timeouts

_LOGGER = logging.getLogger(__name__)
SHUTDOWN_GRACE = 2.0
REFUSAL_WRITE_LIMIT = 5.0  # a refused client gets its error event this long, then the door


def parse_tcp_uri(uri: str) -> tuple[str, int]:
    parsed = urlparse(uri)
    if parsed.scheme != "tcp" or parsed.hostname is None or parsed.port is None:
        raise SystemExit(f"voice-stack-gateway: expected tcp://HOST:PORT, got {uri!r}")
    return parsed.hostname, parsed.port


class Gateway:
    def __init__(self, settings: Settings) -> None:
        s = settings
        self.settings = s
        self.metrics = Metrics(s.stt_url, s.tts_url)
        timeouts = Timeouts(s.connect_timeout, s.first_byte_timeout, s.total_timeout)
        # "ASR" in texts, as the /health key (users and the integration read both)
        self.stt = Backend("ASR", s.stt_url, s.stt_key, timeouts, self.metrics.stt_backend)
        self.tts = Backend("TTS", s.tts_url, s.tts_key, timeouts, self.metrics.tts_backend)
        self.catalog = CatalogService(s, self.stt, self.tts)
        self.ctx = SessionContext(
            SttOptions.of(s), TtsOptions.of(s), self.stt, self.tts, self.metrics, self.catalog
        )
        self._server: asyncio.Server | None = None
        self._http: web.AppRunner | None = None
        self._advertiser: Advertiser | None = None
        self.admission = Admission(s.allow, s.max_connections, s.max_connections_per_host)
        self.client_log = ClientLog()
        # aiohttp's server logs there; the filter (this gateway's) is removed again at stop
        self._http_log = logging.getLogger("voice_stack_gateway.http")
        self._http_filter = self.client_log.budget_filter()
        self.connections: set[Connection] = set()
        self._serving: set[asyncio.Task[Any]] = set()  # the connections' own tasks
        self.heap = HeapTrimmer(glibc_trim())
        self.port = 0
        self.http_port = 0

    async def start(self) -> None:
        """Listen at once: describe answers from the configuration until the backends (which
        may still be starting) answer the background refresh."""
        host, port = parse_tcp_uri(self.settings.uri)
        self.catalog.start()
        self._server = await asyncio.start_server(
            self._serve, host=host, port=port, limit=MAX_HEADER
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.settings.http_uri:
            await self._start_http()
        if self.settings.zeroconf:
            adv = Advertiser(self.settings.zeroconf, host, self.port, self.settings.advertise_host)
            self._advertiser = adv
            await adv.start()
        http = self.http_port or "off"
        _LOGGER.info("Ready: Wyoming on %s:%s, HTTP side port %s", host, self.port, http)

    async def _start_http(self) -> None:
        host, port = parse_tcp_uri(self.settings.http_uri)
        app = build_app(self.health, self.metrics.prometheus, self._http_allowed)
        # a connection that sends no whole request (or goes quiet between requests) is closed
        # after the idle limit, as on the Wyoming port
        idle = self.settings.idle_timeout
        self._http = web.AppRunner(
            app, access_log=None, keepalive_timeout=idle, logger=self._http_log
        )
        self._http_log.addFilter(self._http_filter)
        await self._http.setup()
        site = web.TCPSite(self._http, host, port)
        await site.start()
        self.http_port = int(self._http.addresses[0][1])

    def _http_allowed(self, remote: str | None) -> bool:
        if self.admission.allows(address_of(remote)):
            return True
        self.metrics.refuse("http", Refused.NOT_ALLOWED)
        self.client_log.mistake(str(remote), "HTTP request from %s refused: not allowed", remote)
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client: refused outside the allowed networks and beyond the connection limits,
        else served until it leaves."""
        address = address_of(writer.get_extra_info("peername"))
        refused = self.admission.admit(address)
        if refused is not None:
            await self._refuse(writer, address, refused)
            return
        try:
            await self._serve_admitted(reader, writer, str(address))
        finally:
            self.admission.release(address)

    async def _refuse(
        self, writer: asyncio.StreamWriter, address: Address | None, why: Refused
    ) -> None:
        if why is Refused.NOT_ALLOWED:
            err = GatewayError(
                NOT_ALLOWED, f"This gateway does not accept connections from {address} (--allow)"
            )
        elif why is Refused.HOST_LIMIT:
            err = GatewayError(BUSY, f"Too many connections from {address}; try again shortly")
        else:
            err = GatewayError(BUSY, "Too many connections; try again shortly")
        self.metrics.error(Kind.CONNECTION, err.code)
        self.metrics.refuse("wyoming", why)
        self.client_log.mistake(str(address), "Connection from %s refused: %s", address, err.text)
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(REFUSAL_WRITE_LIMIT):
                await async_write_event(err.event(), writer)
        writer.close()

    async def _serve_admitted(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> None:
        metrics = self.metrics
        started = time.perf_counter()
        conn = Connection(
            self.ctx,
            reader,
            writer,
            peer=peer,
            log=self.client_log,
            idle_timeout=self.settings.idle_timeout,
        )
        self.connections.add(conn)
        serving = asyncio.current_task()
        if serving is not None:  # always, inside asyncio.start_server's callback
            self._serving.add(serving)
        metrics.active_sessions += 1
        try:
            await conn.run()
        finally:
            metrics.active_sessions -= 1
            self.connections.discard(conn)
            if serving is not None:
                self._serving.discard(serving)
            if not self.connections:
                self.heap.idle()
        _LOGGER.debug("connection closed after %.1f s", time.perf_counter() - started)

    async def stop(self) -> None:
        """No new connections; requests in progress get a grace period, then an error event."""
        if self._advertiser is not None:
            await self._advertiser.stop()
        if self._server is not None:
            self._server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SHUTDOWN_GRACE
        while any(c.busy for c in self.connections):
            if loop.time() > deadline:
                break
            await asyncio.sleep(0.05)
        await asyncio.gather(*(c.shutdown() for c in list(self.connections)))
        if self._serving:  # each connection cancels its work as it ends: then the backends close
            await asyncio.wait(set(self._serving), timeout=SHUTDOWN_GRACE)
        await self.catalog.stop()
        if self._http is not None:
            await self._http.cleanup()
            self._http_log.removeFilter(self._http_filter)
        await asyncio.gather(self.stt.close(), self.tts.close())
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    def health(self) -> dict[str, object]:
        return self.metrics.health(__version__)
