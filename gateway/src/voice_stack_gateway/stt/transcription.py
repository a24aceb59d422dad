"""One STT backend request running in the background. Its results (streamed deltas, then the
final text) are kept as they come, so whoever answers the client can replay them, at once or
while they still arrive; an early request may also be cancelled unread.

An early request asks for verbose_json (the ASR's confidence, stt/complete.py). A server that
refuses that format outright (HTTP 4xx before any result) gets the same audio once more as
plain json, and `refused` says so (the utterance then stops asking that model for it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from ..errors import BACKEND_ERROR, INTERNAL, GatewayError
from ..upstream import Backend, Confidence

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Request:
    """What is sent: a complete multipart body; `plain`, the same audio asked as plain json, for
    a server that refuses the body's format; `refused` is told when it did."""

    body: bytes | bytearray
    content_type: str
    stream: bool
    plain: bytes | None = None
    refused: Callable[[], None] | None = None


class Transcription:
    def __init__(self, backend: Backend, request: Request, name: str) -> None:
        self.items: list[tuple[str, str]] = []  # ("delta" | "done", text)
        self.confidence: Confidence | None = None  # from a verbose_json answer
        self.error: GatewayError | None = None
        self.done = False
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._run(backend, request), name=name)

    async def _run(self, backend: Backend, request: Request) -> None:
        try:
            refusal = await self._asked(backend, request)
            # asked again outside the refusal's except: its error (and frames) must not be kept
            if refusal is not None and request.plain is not None:
                await self._collect(backend, request.plain, request)
                _LOGGER.debug("STT server refused verbose_json (%s): asked plain json", refusal)
                if request.refused is not None:
                    request.refused()
        except GatewayError as err:
            self.error = err.with_traceback(None)  # its frames hold this object: a cycle
        except Exception:
            _LOGGER.exception("Unexpected failure in a transcription")
            self.error = GatewayError(INTERNAL, "Internal error during transcription")
        finally:
            self.done = True
            self._changed.set()

    async def _asked(self, backend: Backend, request: Request) -> str | None:
        """Send the request; the refusal's text when its plain json copy is to be asked."""
        try:
            await self._collect(backend, request.body, request)
        except GatewayError as err:
            if request.plain is None or self.items or not _refused(err):
                raise
            return err.text
        return None

    async def _collect(self, backend: Backend, body: bytes | bytearray, request: Request) -> None:
        async for item in backend.transcribe(body, request.content_type, request.stream):
            if isinstance(item, Confidence):
                self.confidence = item
                continue
            self.items.append(item)
            self._changed.set()

    @property
    def text(self) -> str | None:
        """The final transcript, once the request has ended well; else None."""
        if not self.done or self.error is not None:
            return None
        return next((text for kind, text in reversed(self.items) if kind == "done"), None)

    async def finished(self) -> None:
        """Wait for the end (a waiter cancelled leaves the request running)."""
        await asyncio.wait({self._task})

    async def started(self) -> bool:
        """Wait for the first result (a streamed delta, or the transcript) or the end; True if
        the backend began to answer, so its results can be sent on as they come."""
        while not self.items and not self.done:
            self._changed.clear()
            await self._changed.wait()
        return bool(self.items)

    async def succeeded(self) -> bool:
        """Wait for the end (a waiter cancelled cancels the request); True if the backend gave a
        transcript."""
        await self._task
        return self.error is None

    async def results(self) -> AsyncIterator[tuple[str, str]]:
        """The items as they come; the backend's error, if any, at the end."""
        seen = 0
        while True:
            while seen < len(self.items):
                seen += 1
                yield self.items[seen - 1]
            if self.done:
                break
            self._changed.clear()
            await self._changed.wait()
        if self.error is not None:  # a copy: the raise's frames would hold this object
            raise self.error.copy()

    def cancel(self) -> None:
        self._task.cancel()

    async def close(self) -> None:
        """Cancel the request if it still runs, and wait until it has ended."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def _refused(err: GatewayError) -> bool:
    """The server answered 4xx: it refused the request (it did not run, so it may be sent
    again); a timeout, a 5xx or a broken answer is not a refusal."""
    return err.code == BACKEND_ERROR and err.backend_healthy
