"""Async client for llama-server's HTTP API (directly or behind the auth proxy).

Every call has a timeout and none is retried behind the caller's back, with one
exception: a pooled keep-alive connection that the server already closed fails
while the request is being written, so the request cannot have run; that single
case is sent again on a fresh connection.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from .const import CONNECT_TIMEOUT, PROBE_TIMEOUT


def without_userinfo(url: str) -> str:
    """The URL without user:pass@ (for ids, titles and messages)."""
    parts = urlsplit(url)
    query = f"?{parts.query}" if parts.query else ""
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}{query}"


class LlamaError(Exception):
    """Base class for llama-server client errors."""


class LlamaConnectionError(LlamaError):
    """The server could not be reached or dropped the connection."""


class LlamaTimeoutError(LlamaError):
    """The server did not answer in time."""


class LlamaAuthError(LlamaError):
    """The API key was rejected (401/403)."""


class LlamaNotServerError(LlamaError):
    """The URL answers, but not like llama-server."""


class LlamaContextError(LlamaError):
    """The prompt does not fit in the slot's context."""

    def __init__(self, message: str, n_prompt_tokens: int | None, n_ctx: int | None) -> None:
        """Keep the sizes the server reported."""
        super().__init__(message)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class LlamaResponseError(LlamaError):
    """The server answered with an error status or an error event."""

    def __init__(self, message: str, status: int | None = None) -> None:
        """Keep the HTTP status."""
        super().__init__(message)
        self.status = status


class LlamaStreamError(LlamaError):
    """The stream ended before the reply was complete."""


def _error_message(body: Any, fallback: str) -> str:
    if isinstance(body, dict) and isinstance(err := body.get("error"), dict):
        return str(err.get("message") or fallback)
    return fallback


def _raise_for_error(status: int, body: Any) -> None:
    """Map an error reply to the matching exception."""
    message = _error_message(body, f"HTTP {status}")
    if status in (401, 403):
        raise LlamaAuthError(message)
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and err.get("type") == "exceed_context_size_error":
        raise LlamaContextError(message, err.get("n_prompt_tokens"), err.get("n_ctx"))
    raise LlamaResponseError(message, status)


def parse_sse_line(line: str) -> dict[str, Any] | None:
    """Parse one SSE line; None for comments, blanks, non-data fields and [DONE]."""
    line = line.rstrip("\r\n")
    if not line.startswith("data:"):
        return None  # ':' pings, 'event:'/'id:' fields, blank separators
    data = line[5:].strip()
    if not data or data == "[DONE]":
        return None
    try:
        parsed = json.loads(data)
    except ValueError as err:
        raise LlamaStreamError(f"Malformed stream event: {data[:80]}") from err
    if not isinstance(parsed, dict):
        raise LlamaStreamError("Malformed stream event")
    if "error" in parsed:
        _raise_for_error(int(_error_status(parsed)), parsed)
    return parsed


def _error_status(body: dict[str, Any]) -> int:
    err = body.get("error")
    code = err.get("code") if isinstance(err, dict) else None
    return code if isinstance(code, int) else 500


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
            resp = await self._send(call, idempotent=method == "GET")
        except TimeoutError as err:
            raise LlamaTimeoutError("Timed out waiting for the server") from err
        except aiohttp.ClientError as err:
            raise LlamaConnectionError(str(err) or type(err).__name__) from err
        try:
            yield resp
        except TimeoutError as err:
            raise LlamaTimeoutError("Timed out reading the reply") from err
        except aiohttp.ClientPayloadError as err:
            raise LlamaStreamError("The server closed the reply early") from err
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
                _raise_for_error(resp.status, body)
            return body

    async def health(self) -> dict[str, Any]:
        """GET /health (public). Raises LlamaNotServerError on a foreign reply."""
        body = await self._get_json("/health", auth=False)
        if not isinstance(body, dict) or "status" not in body:
            raise LlamaNotServerError("/health did not answer like llama-server")
        return body

    async def props(self) -> dict[str, Any]:
        """GET /props (needs the key)."""
        body = await self._get_json("/props")
        if not isinstance(body, dict) or "total_slots" not in body:
            raise LlamaNotServerError("/props did not answer like llama-server")
        return body

    async def slots(self) -> list[dict[str, Any]]:
        """GET /slots (needs the key)."""
        body = await self._get_json("/slots")
        if not isinstance(body, list):
            raise LlamaNotServerError("/slots did not answer like llama-server")
        return [s for s in body if isinstance(s, dict)]

    async def models(self) -> list[str]:
        """Model ids from GET /v1/models."""
        body = await self._get_json("/v1/models")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            return []
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]

    async def proxy_status(self) -> dict[str, Any] | None:
        """GET /proxy/status of the Voice Stack auth proxy; None when absent."""
        try:
            body = await self._get_json("/proxy/status", auth=False)
        except LlamaResponseError as err:
            if err.status in (404, 405):
                return None
            raise
        except LlamaNotServerError, LlamaAuthError:
            # Plain llama-server (no Voice Stack proxy in front).
            return None
        if not isinstance(body, dict) or "reserved_slots" not in body:
            return None
        return body

    async def slot_action(
        self, slot: int, action: str, filename: str | None = None, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        """POST /slots/{id}?action=save|restore|erase."""
        body = {"filename": filename} if filename else {}
        async with self._request(
            "POST",
            f"/slots/{slot}?action={action}",
            json_body=body,
            client_timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            reply = await _read_json(resp)
            if resp.status >= 400:
                _raise_for_error(resp.status, reply)
            return reply if isinstance(reply, dict) else {}

    async def complete(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Non-streaming POST /v1/chat/completions."""
        async with self._request(
            "POST",
            "/v1/chat/completions",
            json_body={**payload, "stream": False},
            client_timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=CONNECT_TIMEOUT),
        ) as resp:
            reply = await _read_json(resp)
            if resp.status >= 400:
                _raise_for_error(resp.status, reply)
            if not isinstance(reply, dict):
                raise LlamaNotServerError("Unexpected completion reply")
            return reply

    async def stream(
        self, payload: dict[str, Any], timeout_s: float
    ) -> AsyncGenerator[dict[str, Any]]:
        """Streaming POST /v1/chat/completions; yields parsed chunks until [DONE]."""
        body = {**payload, "stream": True, "stream_options": {"include_usage": True}}
        async with self._request(
            "POST",
            "/v1/chat/completions",
            json_body=body,
            client_timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=CONNECT_TIMEOUT),
        ) as resp:
            if resp.status >= 400:
                _raise_for_error(resp.status, await _read_json(resp))
            done = False
            async for raw in resp.content:
                line = raw.decode("utf-8", errors="replace")
                if line.startswith("data:") and line[5:].strip() == "[DONE]":
                    done = True
                    break
                if (chunk := parse_sse_line(line)) is not None:
                    yield chunk
            if not done:
                raise LlamaStreamError("The server closed the reply early")


async def _read_json(resp: aiohttp.ClientResponse) -> Any:
    """Read a JSON body; a non-JSON body yields None."""
    text = await resp.text()
    try:
        return json.loads(text)
    except ValueError:
        return None
