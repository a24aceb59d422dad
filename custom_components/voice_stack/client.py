"""llama-server's own endpoints (/health, /props, /v1/models, slot save and restore) over HA's
aiohttp session; chat completions go through the openai SDK (chat.py).

Every call has a timeout and none is retried behind the caller's back, with one
exception: a pooled keep-alive connection that the server already closed fails
while the request is being written, so the request cannot have run; that single
case is sent again on a fresh connection.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from .const import PROBE_TIMEOUT
from .data import ServerProps, parse_props
from .errors import (
    LlamaConnectionError,
    LlamaError,
    LlamaNotServerError,
    LlamaTimeoutError,
    error_from_reply,
)


class LlamaClient:
    """Thin async wrapper over llama-server's endpoints; session is injected."""

    def __init__(self, session: aiohttp.ClientSession, url: str, api_key: str) -> None:
        """Store the shared session, base URL and key."""
        self._session = session
        self.url = url.rstrip("/")
        self._api_key = api_key

    def _headers(self, auth: bool) -> dict[str, str]:
        if auth and self._api_key:
            return {"Authorization": f"Bearer {self._api_key}"}
        return {}

    async def _send(
        self, call: Callable[[], Awaitable[aiohttp.ClientResponse]], idempotent: bool
    ) -> aiohttp.ClientResponse:
        """Send, resending once only when the request cannot have run."""
        try:
            return await call()
        except aiohttp.ClientConnectionResetError:
            # Writing to a keep-alive connection the server had closed.
            pass
        except aiohttp.ServerDisconnectedError:
            if not idempotent:
                raise
        return await call()

    @asynccontextmanager
    async def _request(
        self,
        method: str,
        path: str,
        *,
        auth: bool = True,
        json_body: dict[str, Any] | None = None,
        idempotent: bool | None = None,
        client_timeout: aiohttp.ClientTimeout,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Open a request; map transport failures to client errors."""

        async def call() -> aiohttp.ClientResponse:
            return await self._session.request(
                method,
                f"{self.url}{path}",
                headers=self._headers(auth),
                json=json_body,
                timeout=client_timeout,
            )

        try:
            resp = await self._send(call, method == "GET" if idempotent is None else idempotent)
        except TimeoutError as err:
            raise LlamaTimeoutError("Timed out waiting for the server") from err
        except aiohttp.ClientError as err:
            raise LlamaConnectionError(str(err) or type(err).__name__) from err
        try:
            yield resp
        except TimeoutError as err:
            raise LlamaTimeoutError("Timed out reading the reply") from err
        except aiohttp.ClientError as err:
            raise LlamaConnectionError(str(err) or type(err).__name__) from err
        finally:
            resp.release()

    async def _get_json(
        self, path: str, *, auth: bool = True, timeout_s: float = PROBE_TIMEOUT
    ) -> Any:
        async with self._request(
            "GET", path, auth=auth, client_timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            body = await _read_json(resp)
            if resp.status >= 400:
                raise _error(resp.status, body)
            return body

    async def health(self) -> dict[str, Any]:
        """GET /health (public). Raises LlamaNotServerError on a foreign reply."""
        body = await self._get_json("/health", auth=False)
        if not isinstance(body, dict) or "status" not in body:
            raise LlamaNotServerError("/health did not answer like llama-server")
        return body

    async def props(self) -> ServerProps:
        """GET /props (needs the key)."""
        body = await self._get_json("/props")
        if not isinstance(body, dict) or "total_slots" not in body:
            raise LlamaNotServerError("/props did not answer like llama-server")
        return parse_props(body)

    async def models(self) -> list[str]:
        """Model ids from GET /v1/models."""
        body = await self._get_json("/v1/models")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            return []
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]

    async def slot_action(
        self, slot: int, action: str, filename: str | None = None, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        """POST /slots/{id}?action=save|restore|erase."""
        body = {"filename": filename} if filename else {}
        async with self._request(
            "POST",
            f"/slots/{slot}?action={action}",
            json_body=body,
            idempotent=True,  # saving or loading the same file twice changes nothing
            client_timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            reply = await _read_json(resp)
            if resp.status >= 400:
                raise _error(resp.status, reply)
            return reply if isinstance(reply, dict) else {}


def _error(status: int, body: Any) -> LlamaError:
    return error_from_reply(status, body.get("error") if isinstance(body, dict) else None)


async def _read_json(resp: aiohttp.ClientResponse) -> Any:
    """Read a JSON body; a non-JSON body yields None."""
    text = await resp.text()
    try:
        return json.loads(text)
    except ValueError:
        return None
