"""One client per server of the stack over HA's aiohttp session: llama-server's own endpoints
(/health, /props, /slots, /metrics, /v1/models, slot save and restore, and whether the URL
reaches Ollama instead), the auth proxy (/proxy/status and its key check) and the gateway
(/health, /metrics). Chat completions go through the openai SDK (chat.py). The flows, the
coordinators and the warm-up all use these.

One transport owns what every call shares: the base URL, the key, a timeout on every call,
no redirects followed (the key stays with the server it was given for), and the mapping of
transport failures and error statuses to the client errors (errors.py); what each status means
is said here once. No call is retried behind the caller's back, with one exception: a pooled
keep-alive connection that the server already closed fails while the request is being written,
so the request cannot have run; that single case is sent again on a fresh connection.
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
from .errors import (
    ContextFullError,
    KeyRejectedError,
    ModelLoadingError,
    NotTheServiceError,
    ServiceError,
    ServiceResponseError,
    ServiceTimeoutError,
    ServiceUnreachableError,
)
from .payloads import (
    GatewayHealth,
    MalformedReplyError,
    ProxyStatus,
    ServerProps,
    SlotsSummary,
    parse_gateway_health,
    parse_prometheus,
    parse_props,
    parse_proxy_status,
    parse_slots,
)

# A key no proxy will hold: the proxy must refuse it just like a missing one.
WRONG_KEY: Final = "voice-stack-probe-not-a-key"

# What the servers' statuses mean, for every caller (the flows, the pollers, the warm-up).
KEY_REJECTED: Final = frozenset({401, 403})  # the key is missing or wrong
# llama-server: an endpoint switched off by a server flag (--no-slots, no --metrics, no
# --slot-save-path for slot save and restore)
SWITCHED_OFF: Final = 501
# A proxy in front of llama-server answers these when it cannot reach it (llama-server's own
# 503 while it loads a model says so in its body: see is_loading).
PROXY_UNREACHABLE_STATUSES: Final = frozenset({502, 503, 504})
PROCESS_START_HEADER: Final = "process-start-time-unix"  # of /metrics, in every build with it
# Ollama's GET / answers this (plain text); its GET /api/version answers {"version": "..."}.
OLLAMA_BANNER: Final = "Ollama is running"


def is_loading(error: Any) -> bool:
    """Whether an error object (`{"type": ..., "message": ...}`) says the model is loading."""
    return isinstance(error, dict) and (
        error.get("type") == "unavailable_error" or "loading" in str(error.get("message")).lower()
    )


def error_from_reply(status: int, error: Any) -> ServiceError:
    """The exception for an error reply; `error` is the body's "error" object (or None)."""
    message = str(error.get("message") or "") if isinstance(error, dict) else ""
    message = message or f"HTTP {status}"
    if status in KEY_REJECTED:
        return KeyRejectedError(message, status=status)
    if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
        sizes = error.get("n_prompt_tokens"), error.get("n_ctx")
        return ContextFullError(message, *sizes, status=status)
    if status == 503 and is_loading(error):
        return ModelLoadingError(message, status=status)
    if status in PROXY_UNREACHABLE_STATUSES:
        return ServiceUnreachableError(f"HTTP {status} from the proxy: {message}", status=status)
    return ServiceResponseError(message, status)


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
            raise ServiceTimeoutError("Timed out waiting for the server", url=url) from err
        except aiohttp.ClientError as err:
            raise ServiceUnreachableError(str(err) or type(err).__name__, url=url) from err
        try:
            yield resp
        except TimeoutError as err:
            raise ServiceTimeoutError("Timed out reading the reply", url=url) from err
        except aiohttp.ClientError as err:
            raise ServiceUnreachableError(str(err) or type(err).__name__, url=url) from err
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


@dataclass(frozen=True, slots=True)
class Health:
    """What llama-server's GET /health answered, whatever its status."""

    status: int
    latency_ms: float
    loading: bool  # up, but still loading its model (its own 503)


@dataclass(frozen=True, slots=True)
class Metrics:
    """llama-server's GET /metrics: its samples and the process it comes from."""

    samples: dict[str, float]
    started: str | None  # its Process-Start-Time-Unix header (see LlamaData.started)


class LlamaClient(ServiceClient):
    """llama-server's own endpoints (usually through the auth proxy)."""

    async def health(self) -> Health:
        """GET /health (public), whatever it answers: its status, latency and whether the
        model is still loading."""
        reply = await self.get("/health", auth=False)
        body = reply.json()
        error = body.get("error") if isinstance(body, dict) else None
        return Health(reply.status, reply.latency_ms, reply.status == 503 and is_loading(error))

    async def check_health(self) -> None:
        """GET /health (public): raises the error its status stands for, NotTheServiceError
        on a reply that is not llama-server's."""
        body = await self.get_json("/health", auth=False)
        if not isinstance(body, dict) or "status" not in body:
            raise NotTheServiceError("/health did not answer like llama-server")

    async def is_ollama(self) -> bool:
        """Whether the URL reaches Ollama instead (its default port, 11434, is the auth proxy's
        too): its root says so, or its /api/version answers as Ollama's does. Asked only of a
        server that answered, but not like llama-server; False when unsure."""
        try:
            root = await self.get("/", auth=False)
            if root.status == 200 and root.text.strip() == OLLAMA_BANNER:
                return True
            reply = await self.get("/api/version", auth=False)
        except ServiceError:
            return False
        body = reply.json()
        return (
            reply.status == 200
            and isinstance(body, dict)
            and set(body) == {"version"}
            and isinstance(body["version"], str)
        )

    async def props(self) -> ServerProps:
        """GET /props (needs the key). Raises NotTheServiceError on a reply that is not
        llama-server's."""
        url = f"{self.url}/props"
        reply = await self._read("/props")
        body = reply.json() if reply is not None else None
        if not isinstance(body, dict) or "total_slots" not in body:
            raise NotTheServiceError("/props did not answer like llama-server", url=url)
        return parse_props(body)

    async def slots(self) -> SlotsSummary | None:
        """GET /slots (needs the key); None when switched off (--no-slots). Raises
        NotTheServiceError on a reply that is not a list of slots."""
        reply = await self._read("/slots")
        if reply is None:
            return None
        try:
            return parse_slots(reply.json())
        except MalformedReplyError as err:
            raise NotTheServiceError(str(err), url=f"{self.url}/slots") from err

    async def metrics(self) -> Metrics | None:
        """GET /metrics (needs the key); None when switched off (started without --metrics)."""
        reply = await self._read("/metrics")
        if reply is None:
            return None
        started = reply.headers.get(PROCESS_START_HEADER) or None
        return Metrics(parse_prometheus(reply.text), started)

    async def _read(self, path: str) -> Reply | None:
        """GET a keyed endpoint: its 200 reply, None when a server flag switched it off;
        any other status raises the error it stands for."""
        reply = await self.get(path)
        if reply.status == SWITCHED_OFF:
            return None
        if reply.status != 200:
            raise _error(reply.status, reply.json(), f"{self.url}{path}")
        return reply

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
        if status in KEY_REJECTED:
            return False
        if 200 <= status < 300:
            return True
        return None


class GatewayClient(ServiceClient):
    """The Voice Stack gateway's HTTP side port (no key)."""

    async def health(self) -> tuple[Reply, GatewayHealth]:
        """GET /health. Raises ServiceResponseError on an error status, NotTheServiceError on a
        reply that is not the gateway's."""
        reply, url = await self.get("/health", auth=False), f"{self.url}/health"
        if reply.status != 200:
            raise ServiceResponseError(f"HTTP {reply.status}", reply.status, url=url)
        try:
            return reply, parse_gateway_health(reply.json())
        except MalformedReplyError as err:
            raise NotTheServiceError("/health did not answer like the gateway", url=url) from err

    async def metrics(self) -> dict[str, float]:
        """The samples of GET /metrics (none when it does not answer 200)."""
        reply = await self.get("/metrics", auth=False)
        return parse_prometheus(reply.text) if reply.status == 200 else {}


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _error(status: int, body: Any, url: str) -> ServiceError:
    err = error_from_reply(status, body.get("error") if isinstance(body, dict) else None)
    err.url = url
    return err
