"""The catalog the gateway answers from: built from the configuration at once, then refreshed in
the background from the backends, so describe never waits on a backend and a backend that is
down (at startup or later) never stops the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from wyoming.event import Event

from .catalog import Catalog, build_catalog, model_entries, voice_entries
from .config import Settings
from .describe import describe_event
from .errors import GatewayError
from .upstream import Backend
from .urls import redact_urls

_LOGGER = logging.getLogger(__name__)
PROBE_LIMIT = 5.0
DOWN_INTERVAL = 2.0  # a backend that is down (or not yet seen) is probed this often

# what a probe of a server that is down, slow or not OpenAI-compatible can raise
_PROBE_ERRORS = (GatewayError, aiohttp.ClientError, OSError, TimeoutError, ValueError)
Lists = tuple[list[dict[str, Any]], list[dict[str, Any]]]  # (models, voices)
Probe = tuple[bool, float | None, str | None, float]  # (ok, latency in ms, error, seen at)


class CatalogService:
    """Owns the current catalog and its prebuilt describe event, and the probe loop."""

    def __init__(self, settings: Settings, stt: Backend, tts: Backend) -> None:
        self.settings = settings
        self._stt, self._tts = stt, tts
        self._task: asyncio.Task[None] | None = None
        # last lists each backend returned: a backend that goes down keeps its voices listed
        self._seen: dict[str, Lists] = {}
        self.current: Catalog = build_catalog(settings, [], [])
        self.describe: Event = describe_event(settings, self.current)
        self._publish()
        self.refreshed = asyncio.Event()  # set after every refresh, cleared by whoever waits

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="catalog refresh")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception:  # a bug here must not end the refreshing for good
                _LOGGER.exception("Catalog refresh failed")
            self.refreshed.set()
            up = self._stt.state.status == "ok" and self._tts.state.status == "ok"
            interval = self.settings.refresh_interval
            await asyncio.sleep(interval if up else min(interval, DOWN_INTERVAL))

    async def refresh(self) -> None:
        """Probe both backends and rebuild the catalog; failures keep the previous lists. A
        backend's probe outcome goes to /health only once the catalog holds its lists, so a
        status other than "unknown" there means describe answers from the backends."""
        limit = min(PROBE_LIMIT, self.settings.total_timeout)
        (stt_models, _, stt_probe), (tts_models, voices, tts_probe) = await asyncio.gather(
            self._refresh_one(self._stt, limit, with_voices=False),
            self._refresh_one(self._tts, limit, with_voices=True),
        )
        same = self._stt.base_url == self._tts.base_url
        catalog = build_catalog(self.settings, stt_models + ([] if same else tts_models), voices)
        describe = describe_event(self.settings, catalog)
        if describe.data != self.describe.data:
            _LOGGER.info(
                "Catalog: stt %s, tts %s, voices %s",
                list(catalog.stt_models),
                list(catalog.tts_models),
                list(catalog.voices),
            )
        self.current, self.describe = catalog, describe
        self._publish()
        for backend, (ok, latency, error, seen) in ((self._stt, stt_probe), (self._tts, tts_probe)):
            backend.state.record(ok, latency, error, at=seen)

    def _publish(self) -> None:
        """The lists /health shows."""
        self._stt.state.models = list(self.current.stt_models)
        self._tts.state.models = list(self.current.tts_models)
        self._tts.state.voices = list(self.current.voices)

    async def _refresh_one(
        self, backend: Backend, limit: float, *, with_voices: bool
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Probe]:
        """A backend's (models, voices) and its probe's outcome, for BackendState.record."""
        try:
            latency = await backend.probe(limit)
        except _PROBE_ERRORS as exc:
            models, voices = self._seen.get(backend.kind, ([], []))
            why = f"{backend.kind} health probe failed: {_why(exc)}"
            return models, voices, (False, None, why, time.monotonic())
        seen = time.monotonic()  # the lists take longer: a request may fail meanwhile
        models, voices = self._seen.get(backend.kind, ([], []))
        models = await self._listed(backend, "/models", limit, model_entries, models)
        if with_voices:
            voices = await self._listed(backend, "/audio/voices", limit, voice_entries, voices)
        self._seen[backend.kind] = (models, voices)
        return models, voices, (True, latency, None, seen)

    @staticmethod
    async def _listed(
        backend: Backend,
        path: str,
        limit: float,
        parse: Callable[[Any], list[dict[str, Any]]],
        previous: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """A backend's list, or the previous one when it cannot be read (many servers have no
        /audio/voices; that is no fault)."""
        try:
            return parse(await backend.get_json(path, limit))
        except _PROBE_ERRORS as exc:
            _LOGGER.debug("%s %s not read: %s", backend.kind, path, _why(exc))
            return previous


def _why(exc: BaseException) -> str:
    text = exc.text if isinstance(exc, GatewayError) else f"{type(exc).__name__}: {exc}"
    return redact_urls(text)
