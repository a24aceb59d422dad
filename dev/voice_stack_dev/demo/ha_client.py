"""Home Assistant's REST and websocket APIs, used the way the frontend uses them."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Mapping
from typing import Any, Self

import aiohttp

from .errors import DemoError

REST_TIMEOUT = aiohttp.ClientTimeout(total=60, connect=10)
WS_TIMEOUT = 60.0
SERVICE = "Home Assistant"

type Json = dict[str, Any]


class HomeAssistantClient:
    """An authenticated REST + websocket session against one HA instance."""

    def __init__(self, base_url: str, log_path: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.log_path = log_path
        self.client_id = f"{self.base_url}/"
        self.redirect_uri = f"{self.base_url}/?auth_callback=1"
        self.access_token: str | None = None
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

    def _fail(self, what: str, why: str) -> DemoError:
        return DemoError(SERVICE, f"{what}: {why}", self.log_path)

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
        """One REST call; returns the decoded JSON (or None), raises DemoError otherwise."""
        headers = {"Authorization": f"Bearer {self.access_token}"} if auth else {}
        try:
            async with self._session.request(
                method, self.base_url + path, json=json, data=form, headers=headers
            ) as resp:
                text = await resp.text()
                if resp.status not in ok:
                    raise self._fail(f"{method} {path}", f"HTTP {resp.status}: {text[:300]}")
                if resp.content_type == "application/json" and text:
                    return await resp.json()
                return None
        except (aiohttp.ClientError, TimeoutError) as err:
            raise self._fail(f"{method} {path}", repr(err)) from err

    async def download(self, path: str) -> bytes:
        """Fetch a file (e.g. TTS audio), with the session's token."""
        headers = {"Authorization": f"Bearer {self.access_token}"}
        try:
            async with self._session.get(self.base_url + path, headers=headers) as resp:
                if resp.status != 200:
                    raise self._fail(f"GET {path}", f"HTTP {resp.status}")
                return await resp.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise self._fail(f"GET {path}", repr(err)) from err

    async def token_from_code(self, code: str) -> None:
        """Exchange an authorization code for an access token (the frontend's last login step)."""
        tokens = await self.request(
            "POST",
            "/auth/token",
            form={"grant_type": "authorization_code", "code": code, "client_id": self.client_id},
            auth=False,
        )
        self.access_token = tokens["access_token"]

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
            raise self._fail("login", f"rejected: {result.get('errors')}")
        await self.token_from_code(result["result"])

    # --- websocket ------------------------------------------------------------------------------

    async def connect_ws(self) -> None:
        """Open /api/websocket and authenticate with the access token."""
        url = self.base_url.replace("http", "ws", 1) + "/api/websocket"
        try:
            self._ws = await self._session.ws_connect(url, heartbeat=30, max_msg_size=0)
            hello = await self._ws.receive_json(timeout=WS_TIMEOUT)
            if hello.get("type") != "auth_required":
                raise self._fail("websocket", f"unexpected greeting {hello}")
            await self._ws.send_json({"type": "auth", "access_token": self.access_token})
            reply = await self._ws.receive_json(timeout=WS_TIMEOUT)
        except (aiohttp.ClientError, TimeoutError) as err:
            raise self._fail("websocket", repr(err)) from err
        if reply.get("type") != "auth_ok":
            raise self._fail("websocket", f"authentication failed: {reply.get('message')}")
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

    async def _receive(self, queue: asyncio.Queue[Json], what: str, limit: float) -> Json:
        try:
            item = await asyncio.wait_for(queue.get(), limit)
        except TimeoutError as err:
            raise self._fail(what, f"no answer within {limit:.0f} s") from err
        if item.get("type") == "closed":
            raise self._fail(what, "the websocket closed")
        return item

    async def ws(self, command: str, *, limit: float = WS_TIMEOUT, **payload: Any) -> Any:
        """Send one websocket command and return its result."""
        assert self._ws is not None, "connect_ws first"
        msg_id, queue = self._open()
        try:
            await self._ws.send_json({"id": msg_id, "type": command, **payload})
            reply = await self._receive(queue, command, limit)
        finally:
            self._waiters.pop(msg_id, None)
        if not reply.get("success", False):
            error = reply.get("error", {})
            raise self._fail(command, f"{error.get('code')}: {error.get('message')}")
        return reply.get("result")

    @contextlib.asynccontextmanager
    async def ws_subscription(
        self, command: str, **payload: Any
    ) -> AsyncIterator[tuple[int, asyncio.Queue[Json]]]:
        """Send a command whose answer is a stream of events; yields (id, queue of messages)."""
        assert self._ws is not None, "connect_ws first"
        msg_id, queue = self._open()
        try:
            await self._ws.send_json({"id": msg_id, "type": command, **payload})
            yield msg_id, queue
        finally:
            self._waiters.pop(msg_id, None)

    async def next_message(self, queue: asyncio.Queue[Json], what: str, limit: float) -> Json:
        return await self._receive(queue, what, limit)

    async def send_binary(self, data: bytes) -> None:
        assert self._ws is not None, "connect_ws first"
        await self._ws.send_bytes(data)
