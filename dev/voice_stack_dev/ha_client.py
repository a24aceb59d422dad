"""Home Assistant's REST and websocket APIs, used the way the frontend uses them.

Shared by the demo, the assist runner (`assist.py`) and benchmarks: every failure is a
`HomeAssistantApiError` naming the call, never a bare aiohttp exception or a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Self

import aiohttp

REST_TIMEOUT = aiohttp.ClientTimeout(total=60, connect=10)
# HA's access tokens live 30 minutes; a session renews its own this long before that, with its
# refresh token, as the frontend does (a soak's session outlives several).
RENEW_BEFORE_S = 120.0
WS_TIMEOUT = 60.0

type Json = dict[str, Any]


class HomeAssistantApiError(Exception):
    """A call to Home Assistant failed: `what` was called, `why` it failed."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")
        self.what = what
        self.why = why


class Subscription:
    """The messages of one websocket command that answers with a stream of events."""

    def __init__(self, command: str, msg_id: int, queue: asyncio.Queue[Json]) -> None:
        self.command = command
        self.msg_id = msg_id
        self._queue = queue

    async def next(self, limit: float) -> Json:
        """The next message, or HomeAssistantApiError after `limit` s or a closed socket."""
        try:
            item = await asyncio.wait_for(self._queue.get(), limit)
        except TimeoutError as err:
            raise HomeAssistantApiError(self.command, f"no answer within {limit:.0f} s") from err
        if item.get("type") == "closed":
            raise HomeAssistantApiError(self.command, "the websocket closed")
        return item


class HomeAssistantClient:
    """An authenticated REST + websocket session against one HA instance."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.client_id = f"{self.base_url}/"
        self.redirect_uri = f"{self.base_url}/?auth_callback=1"
        self.access_token: str | None = None
        self.refresh_token: str | None = None
        self._expires = float("inf")  # time.monotonic() when the access token runs out
        self._renewing = asyncio.Lock()
        self._session = aiohttp.ClientSession(timeout=REST_TIMEOUT)
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._waiters: dict[int, asyncio.Queue[Json]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._ws is not None:
            await self._ws.close()
        await self._session.close()

    def _headers(self, auth: bool = True) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.access_token}"} if auth else {}

    # --- REST -----------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: object = None,
        form: Mapping[str, str] | None = None,
        auth: bool = True,
        ok: tuple[int, ...] = (200, 201),
    ) -> Any:
        """One REST call; returns the decoded JSON (or None), raises HomeAssistantApiError."""
        what = f"{method} {path}"
        if auth:
            await self._renew_if_due()
        try:
            async with self._session.request(
                method, self.base_url + path, json=json, data=form, headers=self._headers(auth)
            ) as resp:
                text = await resp.text()
                if resp.status not in ok:
                    raise HomeAssistantApiError(what, f"HTTP {resp.status}: {text[:300]}")
                if resp.content_type == "application/json" and text:
                    return await resp.json()
                return None
        except (aiohttp.ClientError, TimeoutError) as err:
            raise HomeAssistantApiError(what, repr(err)) from err

    async def download(self, path: str, *, limit: float = 120.0) -> tuple[bytes, float | None]:
        """Fetch a file (e.g. TTS audio) as it streams in.

        Returns the body and the `time.monotonic()` at which its first bytes arrived (None
        when it was empty): HA's TTS view sends nothing until the first audio chunk exists.
        """
        what = f"GET {path}"
        await self._renew_if_due()
        timeout = aiohttp.ClientTimeout(total=limit, connect=10)
        chunks: list[bytes] = []
        first: float | None = None
        try:
            async with self._session.get(
                self.base_url + path, headers=self._headers(), timeout=timeout
            ) as resp:
                if resp.status != 200:
                    raise HomeAssistantApiError(what, f"HTTP {resp.status}")
                async for chunk in resp.content.iter_any():
                    if first is None:
                        first = time.monotonic()
                    chunks.append(chunk)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise HomeAssistantApiError(what, repr(err)) from err
        return b"".join(chunks), first

    async def token_from_code(self, code: str) -> None:
        """Exchange an authorization code for an access token (the frontend's last login step)."""
        tokens = await self.request(
            "POST",
            "/auth/token",
            form={"grant_type": "authorization_code", "code": code, "client_id": self.client_id},
            auth=False,
        )
        self.refresh_token = tokens.get("refresh_token")
        self._took(tokens)

    def _took(self, tokens: Mapping[str, Any]) -> None:
        self.access_token = tokens["access_token"]
        expires_in = tokens.get("expires_in")
        self._expires = (
            time.monotonic() + float(expires_in) if expires_in is not None else float("inf")
        )

    async def _renew_if_due(self) -> None:
        """A new access token from the refresh token once the one held is about to run out
        (the websocket, authenticated when it opened, stays so)."""
        if self.refresh_token is None or time.monotonic() < self._expires - RENEW_BEFORE_S:
            return
        async with self._renewing:  # one renewal for every call that found it due
            if time.monotonic() < self._expires - RENEW_BEFORE_S:
                return
            form = {"grant_type": "refresh_token", "refresh_token": self.refresh_token,
                    "client_id": self.client_id}  # fmt: skip
            self._took(await self.request("POST", "/auth/token", form=form, auth=False))

    async def login(self, username: str, password: str) -> None:
        """The login form: a login flow with the homeassistant auth provider."""
        flow = await self.request(
            "POST",
            "/auth/login_flow",
            json={
                "client_id": self.client_id,
                "handler": ["homeassistant", None],
                "redirect_uri": self.redirect_uri,
            },
            auth=False,
        )
        result = await self.request(
            "POST",
            f"/auth/login_flow/{flow['flow_id']}",
            json={"client_id": self.client_id, "username": username, "password": password},
            auth=False,
        )
        if result.get("type") != "create_entry":
            raise HomeAssistantApiError("login", f"rejected: {result.get('errors')}")
        await self.token_from_code(result["result"])

    # --- websocket ------------------------------------------------------------------------------

    async def connect_ws(self) -> None:
        """Open /api/websocket and authenticate with the access token."""
        url = self.base_url.replace("http", "ws", 1) + "/api/websocket"
        try:
            self._ws = await self._session.ws_connect(url, heartbeat=30, max_msg_size=0)
            hello = await self._ws.receive_json(timeout=WS_TIMEOUT)
            if hello.get("type") != "auth_required":
                raise HomeAssistantApiError("websocket", f"unexpected greeting {hello}")
            await self._ws.send_json({"type": "auth", "access_token": self.access_token})
            reply = await self._ws.receive_json(timeout=WS_TIMEOUT)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise HomeAssistantApiError("websocket", repr(err)) from err
        if reply.get("type") != "auth_ok":
            raise HomeAssistantApiError(
                "websocket", f"authentication failed: {reply.get('message')}"
            )
        self._reader = asyncio.create_task(self._read_loop())

    async def _read_loop(self) -> None:
        assert self._ws is not None
        async for msg in self._ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            data = msg.json()
            for item in data if isinstance(data, list) else [data]:
                if (queue := self._waiters.get(item.get("id", -1))) is not None:
                    queue.put_nowait(item)
        for queue in self._waiters.values():
            queue.put_nowait({"type": "closed"})

    def _open(self) -> tuple[int, asyncio.Queue[Json]]:
        msg_id = next(self._ids)
        queue: asyncio.Queue[Json] = asyncio.Queue()
        self._waiters[msg_id] = queue
        return msg_id, queue

    async def ws(self, command: str, *, limit: float = WS_TIMEOUT, **payload: Any) -> Any:
        """Send one websocket command and return its result."""
        async with self._command(command, **payload) as messages:
            reply = await messages.next(limit)
        if not reply.get("success", False):
            error = reply.get("error", {})
            raise HomeAssistantApiError(command, f"{error.get('code')}: {error.get('message')}")
        return reply.get("result")

    @contextlib.asynccontextmanager
    async def subscribe(self, command: str, **payload: Any) -> AsyncIterator[Subscription]:
        """Send a command whose answer is a stream of messages (its result, then events).

        On leaving, unsubscribe as the frontend does: HA otherwise keeps every subscription
        (and a pipeline run's cancel handle) for the connection's life, which a soak's
        thousands of turns add up.
        """
        async with self._command(command, **payload) as messages:
            try:
                yield messages
            finally:
                await self._unsubscribe(messages.msg_id)

    @contextlib.asynccontextmanager
    async def _command(self, command: str, **payload: Any) -> AsyncIterator[Subscription]:
        if self._ws is None:
            raise HomeAssistantApiError(command, "the websocket is not connected")
        msg_id, queue = self._open()
        try:
            await self._ws.send_json({"id": msg_id, "type": command, **payload})
            yield Subscription(command, msg_id, queue)
        finally:
            self._waiters.pop(msg_id, None)

    async def _unsubscribe(self, msg_id: int) -> None:
        """Fire and forget: the read loop drops the reply, and a closed socket has none."""
        if self._ws is None or self._ws.closed:
            return
        with contextlib.suppress(aiohttp.ClientError, ConnectionError):
            await self._ws.send_json(
                {"id": next(self._ids), "type": "unsubscribe_events", "subscription": msg_id}
            )

    async def send_binary(self, data: bytes) -> None:
        """One binary websocket frame (pipeline audio: handler id byte, then PCM)."""
        if self._ws is None:
            raise HomeAssistantApiError("websocket", "not connected")
        try:
            await self._ws.send_bytes(data)
        except (aiohttp.ClientError, ConnectionError) as err:
            raise HomeAssistantApiError("websocket audio", repr(err)) from err
