"""The running gateway: settings, backends, catalog, metrics, and its two listeners."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial
from urllib.parse import urlparse

from aiohttp import web

from . import __version__
from .catalog import CatalogService
from .config import Settings
from .connection import Connection, handle_client
from .discovery import Advertiser
from .http_side import build_app
from .metrics import Metrics
from .protocol import MAX_HEADER
from .upstream import Backend, Timeouts

_LOGGER = logging.getLogger(__name__)
STARTUP_REFRESH_WAIT = 2.0
SHUTDOWN_GRACE = 2.0


def parse_tcp_uri(uri: str) -> tuple[str, int]:
    parsed = urlparse(uri)
    if parsed.scheme != "tcp" or parsed.hostname is None or parsed.port is None:
        raise SystemExit(f"voice-stack-gateway: expected tcp://HOST:PORT, got {uri!r}")
    return parsed.hostname, parsed.port


class Gateway:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics(settings.stt_url, settings.tts_url)
        timeouts = Timeouts(
            settings.connect_timeout, settings.first_byte_timeout, settings.total_timeout
        )
        self.stt = Backend("ASR", settings.stt_url, settings.stt_key, timeouts,
                           self.metrics.backends["asr"].record)  # fmt: skip
        self.tts = Backend("TTS", settings.tts_url, settings.tts_key, timeouts,
                           self.metrics.backends["tts"].record)  # fmt: skip
        self.catalog = CatalogService(settings, self.stt, self.tts, self.metrics.backends)
        self._server: asyncio.Server | None = None
        self._http: web.AppRunner | None = None
        self._advertiser: Advertiser | None = None
        self.connections: set[Connection] = set()
        self.port = 0
        self.http_port = 0

    async def start(self) -> None:
        """Give the first catalog refresh a moment (a down backend must not stop startup: the
        configured lists serve until it answers), then listen."""
        host, port = parse_tcp_uri(self.settings.uri)
        self.catalog.start()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.catalog.refreshed.wait(), STARTUP_REFRESH_WAIT)
        self._server = await asyncio.start_server(
            partial(handle_client, self), host=host, port=port, limit=MAX_HEADER
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if self.settings.http_uri:
            await self._start_http()
        if self.settings.zeroconf:
            self._advertiser = Advertiser(self.settings.zeroconf, host, self.port,
                                          self.settings.advertise_host)  # fmt: skip
            await self._advertiser.start()
        _LOGGER.info("Ready: Wyoming on %s:%s, HTTP side port %s", host, self.port,
                     self.http_port or "off")  # fmt: skip

    async def _start_http(self) -> None:
        host, port = parse_tcp_uri(self.settings.http_uri)
        self._http = web.AppRunner(build_app(self), access_log=None)
        await self._http.setup()
        site = web.TCPSite(self._http, host, port)
        await site.start()
        self.http_port = int(self._http.addresses[0][1])

    async def stop(self) -> None:
        """No new connections; requests in progress get a grace period, then an error event."""
        if self._advertiser is not None:
            await self._advertiser.stop()
        if self._server is not None:
            self._server.close()
        deadline = asyncio.get_running_loop().time() + SHUTDOWN_GRACE
        while any(c.busy for c in self.connections):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.05)
        await asyncio.gather(*(c.shutdown() for c in list(self.connections)))
        await self.catalog.stop()
        if self._http is not None:
            await self._http.cleanup()
        await asyncio.gather(self.stt.close(), self.tts.close())
        if self._server is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    def health(self) -> dict[str, object]:
        return self.metrics.health(__version__)
