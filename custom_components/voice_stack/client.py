"""One client per server of the stack over HA's aiohttp session: llama-server's own endpoints
(/health, /props, /slots, /metrics, /v1/models, slot save and restore), the auth proxy
(/proxy/status and its key check) and the gateway (/health, /metrics). Chat completions go
through the openai SDK (chat.py). The flows, the coordinators and the warm-up all use these.

One transport owns what every call shares: the base URL, the key, a timeout on every call,
no redirects followed (the key stays with the server it was given for), and the mapping of
transport failures to the client errors (errors.py). No call is retried behind the caller's
back, with one exception: a pooled keep-alive connection that the server already closed fails
while the request is being written, so the request cannot have run; that single case is sent
again on a fresh connection.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp

from .const import PROBE_TIMEOUT
from .data import (
    GatewayHealth,
    MalformedReplyError,
    ProxyStatus,
    ServerProps,
    parse_gateway_health,
    parse_prometheus,
    parse_props,
    parse_proxy_status,
)
from .errors import (
    LlamaConnectionError,
    LlamaError,
    LlamaNotServerError,
    LlamaResponseError,
    LlamaTimeoutError,
    error_from_reply,
)

# A key no proxy will hold: the proxy must refuse it just like a missing one.
WRONG_KEY: Final = "voice-stack-probe-not-a-key"


@dataclass(frozen=True, slots=True)
class Reply:
    """Status and body of one GET."""

    status: int
    text: str
    latency_ms: float
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.text)
        except ValueError:
            return None


class ServiceClient:
    """The transport to one server: its base URL and key; session is injected."""

    def __init__(self, session: aiohttp.ClientSession, url: str, api_key: str = "") -> None:
        """Store the shared session, base URL and key."""
        self._session = session
        self.url = url.rstrip("/")
        self._api_key = api_key

    def _headers(self, auth: bool, key: str | None) -> dict[str, str]:
        key = key if key is not None else (self._api_key if auth else "")
        return {"Authorization": f"Bearer {key}"} if key else {}

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
        key: str | None = None,
        json_body: dict[str, Any] | None = None,
        idempotent: bool | None = None,
        timeout_s: float | None = None,
        keep_alive: bool = True,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """Open a request; map transport failures to client errors (they carry the URL)."""
        url = f"{self.url}{path}"
        timeout = aiohttp.ClientTimeout(total=timeout_s or PROBE_TIMEOUT)
        headers = self._headers(auth, key) | ({} if keep_alive else {"Connection": "close"})

        async def call() -> aiohttp.ClientResponse:
            return await self._session.request(
                method,
                url,
                headers=headers,
                json=json_body,
                timeout=timeout,
                allow_redirects=False,
            )

        try:
            resp = await self._send(call, method == "GET" if idempotent is None else idempotent)
        except TimeoutError as err:
            raise LlamaTimeoutError("Timed out waiting for the server", url=url) from err
        except aiohttp.ClientError as err:
            raise LlamaConnectionError(str(err) or type(err).__name__, url=url) from err
        try:
            yield resp
        except TimeoutError as err:
            raise LlamaTimeoutError("Timed out reading the reply", url=url) from err
        except aiohttp.ClientError as err:
            raise LlamaConnectionError(str(err) or type(err).__name__, url=url) from err
        finally:
            resp.release()

    async def get(self, path: str, *, auth: bool = True, key: str | None = None) -> Reply:
        """GET a path, whatever its status; `key` instead of the server's key when given.
        The connection closes after the reply: a poll comes every 15-60 s and HA's pool drops
        a connection idle for 15 s, so a kept one was reused by chance and held a socket (and
        the gateway's handler task) open on the server in between."""
        started = time.monotonic()
        async with self._request("GET", path, auth=auth, key=key, keep_alive=False) as resp:
            text = await resp.text(errors="replace")
            headers = {name.lower(): value for name, value in resp.headers.items()}
        return Reply(resp.status, text, (time.monotonic() - started) * 1000, headers)

    async def get_json(self, path: str, *, auth: bool = True) -> Any:
        """GET a path's JSON body; an error status raises the client error it stands for."""
        reply = await self.get(path, auth=auth)
        body = reply.json()
        if reply.status >= 400:
            raise _error(reply.status, body, f"{self.url}{path}")
        return body


class LlamaClient(ServiceClient):
    """llama-server's own endpoints (usually through the auth proxy)."""

    async def health(self) -> dict[str, Any]:
        """GET /health (public). Raises LlamaNotServerError on a foreign reply."""
        body = await self.get_json("/health", auth=False)
        if not isinstance(body, dict) or "status" not in body:
            raise LlamaNotServerError("/health did not answer like llama-server")
        return body

    async def props(self) -> ServerProps:
        """GET /props (needs the key)."""
        body = await self.get_json("/props")
        if not isinstance(body, dict) or "total_slots" not in body:
            raise LlamaNotServerError("/props did not answer like llama-server")
        return parse_props(body)

    async def models(self) -> list[str]:
        """Model ids from GET /v1/models."""
        body = await self.get_json("/v1/models")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            return []
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]

    async def slot_action(
        self, slot: int, action: str, filename: str | None = None, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        """POST /slots/{id}?action=save|restore|erase."""
        path = f"/slots/{slot}?action={action}"
        async with self._request(
            "POST",
            path,
            json_body={"filename": filename} if filename else {},
            idempotent=True,  # saving or loading the same file twice changes nothing
            timeout_s=timeout_s,
        ) as resp:
            reply = _json(await resp.text(errors="replace"))
            if resp.status >= 400:
                raise _error(resp.status, reply, f"{self.url}{path}")
            return reply if isinstance(reply, dict) else {}


class ProxyClient(ServiceClient):
    """The Voice Stack auth proxy, at the same URL and with the same key as llama-server."""

    async def status(self) -> tuple[Reply, ProxyStatus | None]:
        """GET /proxy/status (open; with our key it says that key's scope); None: no proxy."""
        reply = await self.get("/proxy/status")
        return reply, parse_proxy_status(reply.json()) if reply.status == 200 else None

    async def lets_through(self, key: str | None) -> bool | None:
        """Whether a guarded path answers with `key` (None: no key); None when unclear."""
        status = (await self.get("/v1/models", auth=False, key=key)).status
        if status in (401, 403):
            return False
        if 200 <= status < 300:
            return True
        return None


class GatewayClient(ServiceClient):
    """The Voice Stack gateway's HTTP side port (no key)."""

    async def health(self) -> tuple[Reply, GatewayHealth]:
        """GET /health. Raises LlamaResponseError on an error status, LlamaNotServerError on a
        reply that is not the gateway's."""
        reply, url = await self.get("/health", auth=False), f"{self.url}/health"
        if reply.status != 200:
            raise LlamaResponseError(f"HTTP {reply.status}", reply.status, url=url)
        try:
            return reply, parse_gateway_health(reply.json())
        except MalformedReplyError as err:
            raise LlamaNotServerError("/health did not answer like the gateway", url=url) from err

    async def metrics(self) -> dict[str, float]:
        """The samples of GET /metrics (none when it does not answer 200)."""
        reply = await self.get("/metrics", auth=False)
        return parse_prometheus(reply.text) if reply.status == 200 else {}


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _error(status: int, body: Any, url: str) -> LlamaError:
    err = error_from_reply(status, body.get("error") if isinstance(body, dict) else None)
    err.url = url
    return err
