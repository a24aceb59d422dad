"""One STT backend request running in the background. Its results (streamed deltas, then the
final text) are kept as they come, so whoever answers the client can replay them, at once or
while they still arrive; an early request may also be cancelled unread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from ..errors import INTERNAL, GatewayError
from ..upstream import Backend

_LOGGER = logging.getLogger(__name__)


class Transcription:
    def __init__(
        self, backend: Backend, body: bytes | bytearray, content_type: str, stream: bool, name: str
    ) -> None:
        self.items: list[tuple[str, str]] = []  # ("delta" | "done", text)
        self.error: GatewayError | None = None
        self.done = False
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._run(backend, body, content_type, stream), name=name)

    async def _run(
        self, backend: Backend, body: bytes | bytearray, content_type: str, stream: bool
    ) -> None:
        try:
            async for item in backend.transcribe(body, content_type, stream):
                self.items.append(item)
                self._changed.set()
        except GatewayError as err:
            self.error = err.with_traceback(None)  # its frames hold this object: a cycle
        except Exception:
            _LOGGER.exception("Unexpected failure in a transcription")
            self.error = GatewayError(INTERNAL, "Internal error during transcription")
        finally:
            self.done = True
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
