"""What a connection's STT and TTS handlers get: their slice of the settings, their backends, the
metrics, the catalog, a sink to write events to, and one job queue that keeps answers in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from wyoming.event import Event

from .catalog_service import CatalogService
from .config import Settings
from .errors import INTERNAL, GatewayError
from .metrics import Kind, Metrics
from .upstream import Backend

_LOGGER = logging.getLogger(__name__)


class Sink(Protocol):
    """Where a handler's events go (the client's connection)."""

    @property
    def closed(self) -> bool: ...

    async def send(self, *events: Event | bytes) -> None:
        """Write events (or pre-encoded event bytes) back to back; ConnectionError if gone."""

    async def send_error(self, err: GatewayError, kind: Kind) -> None:
        """Count the error and tell the client (never raises)."""


@dataclass(frozen=True, slots=True)
class SttOptions:
    rate: int  # uploaded to the backend, 16-bit mono
    max_seconds: float
    prompt: str
    streaming_models: tuple[str, ...]
    early_pause_ms: int  # 0 = no early transcription
    early_max: int
    endpoint_ms: int  # 0 = the client ends every turn
    endpoint_weak_ms: int  # words that read complete only weakly (0: endpoint_ms)
    own_vad: bool  # the gateway ends every turn (the client runs no VAD of its own)
    incomplete_hold_ms: int  # with own_vad: the pause that ends a turn not read complete
    ha_hold_ms: int  # with own_vad: HA's own hold, counted as HA would (stt/ha_hold.py)
    unsure_logprob: float | None  # an early transcript less sure than this is weak (None: off)

    @classmethod
    def of(cls, s: Settings) -> SttOptions:
        return cls(
            s.stt_rate,
            s.stt_max_seconds,
            s.stt_prompt,
            s.stt_streaming_models,
            s.stt_early_pause_ms,
            s.stt_early_max,
            s.stt_endpoint_ms if s.stt_early_pause_ms else 0,
            s.stt_endpoint_weak_ms,
            s.stt_own_vad,
            s.stt_incomplete_hold_ms,
            s.stt_ha_hold_ms,
            s.stt_unsure_logprob,
        )


@dataclass(frozen=True, slots=True)
class TtsOptions:
    speed: float | None
    pcm_rate: int  # of the backend's raw PCM
    output_rate: int  # sent to the client, 16-bit mono
    concurrency: int  # sentences synthesized ahead of the one playing

    @classmethod
    def of(cls, s: Settings) -> TtsOptions:
        return cls(s.tts_speed, s.tts_pcm_rate, s.tts_output_rate, s.tts_concurrency)


@dataclass(frozen=True, slots=True)
class SessionContext:
    """Shared by every connection of one gateway."""

    stt: SttOptions
    tts: TtsOptions
    stt_backend: Backend
    tts_backend: Backend
    metrics: Metrics
    catalog: CatalogService
    verbose_refused: set[str] = field(default_factory=set)  # STT models refused verbose_json


Waiter = Callable[["asyncio.Task[None]"], Awaitable[None]]


async def _shielded(task: asyncio.Task[None]) -> None:
    await asyncio.shield(task)


class Jobs:
    """A connection's upstream work (a transcription or a plain synthesis) runs beside its
    reader, so a disconnect is seen (and cancels it); one at a time, so answers keep the order
    of the requests. A request that must wait for the job before it waits with `until_done`
    (the connection's: it keeps reading, so a client that leaves meanwhile is seen)."""

    def __init__(self, sink: Sink, until_done: Waiter = _shielded) -> None:
        self._sink = sink
        self._until_done = until_done
        self._task: asyncio.Task[None] | None = None
        self._coro: Coroutine[Any, Any, None] | None = None

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    async def run(self, kind: Kind, coro: Coroutine[Any, Any, None]) -> None:
        """Start `coro` once the job before it is done, so answers keep the requests' order
        (and once a job started meanwhile is done too: the end of a turn may start one)."""
        try:
            while self.busy:
                await self.wait()
        except BaseException:
            coro.close()  # never started: no "never awaited" warning
            raise
        self.start(kind, coro)

    def start(self, kind: Kind, coro: Coroutine[Any, Any, None]) -> None:
        """Start `coro` now; only when no job runs (`busy` is false)."""
        assert not self.busy
        self._coro = coro
        self._task = asyncio.create_task(self._guarded(kind, coro), name=str(kind))

    async def wait(self) -> None:
        """Until the running job is done (the next request is answered after it)."""
        if self._task is not None and not self._task.done():
            await self._until_done(self._task)

    async def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._coro is not None:
            self._coro.close()  # a job cancelled before it started never ran its coroutine

    async def _guarded(self, kind: Kind, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except GatewayError as err:
            await self._sink.send_error(err, kind)
        except (ConnectionError, RuntimeError) as exc:
            if not self._sink.closed:
                _LOGGER.debug("client write failed: %s", exc)
        except Exception:
            _LOGGER.exception("Unexpected failure in %s", kind)
            await self._sink.send_error(
                GatewayError(INTERNAL, f"Internal error during {kind}"), kind
            )
