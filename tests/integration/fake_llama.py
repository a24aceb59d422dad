"""A fake llama-server on loopback, only for faults a real one cannot be made to produce."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

PROPS = {"total_slots": 4, "model_path": "/models/fake.gguf", "build_info": "fake"}


def sse(*events: dict[str, Any] | str) -> bytes:
    """Encode SSE lines; strings are sent verbatim (pings, [DONE], garbage)."""
    out = []
    for event in events:
        out.append(event if isinstance(event, str) else f"data: {json.dumps(event)}\n\n")
    return "".join(out).encode()


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """One chat.completion.chunk."""
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


TIMINGS = {
    "cache_n": 10,
    "prompt_n": 5,
    "predicted_n": 3,
    "predicted_per_second": 50.0,
    "prompt_per_second": 500.0,
}
GOOD_STREAM = sse(
    chunk({"role": "assistant", "content": None}),
    ": ping\n\n",
    chunk({"role": "assistant", "content": None}),
    chunk({"content": "Hi "}),
    chunk({"content": "there."}),
    chunk({}, "stop", timings=TIMINGS),
    "data: [DONE]\n\n",
)


class FakeLlama:
    """aiohttp app whose chat handler a test can swap at any time."""

    def __init__(self) -> None:
        """Default: a healthy server streaming GOOD_STREAM."""
        self.chat: Handler = self.good_stream
        self.requests: list[dict[str, Any]] = []
        self.health_body: str = json.dumps({"status": "ok"})
        self.props_status = 200
        self.props = dict(PROPS)
        self.overrides: dict[str, tuple[int, str]] = {}  # path -> (status, raw body)
        self.warm_requests: list[dict[str, Any]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def good_stream(self, request: web.Request) -> web.StreamResponse:
        """Stream a short valid reply."""
        return await stream_bytes(request, GOOD_STREAM)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):  # the warm-up request
            self.warm_requests.append(body)
            if "/v1/chat/completions" in self.overrides:
                code, text = self.overrides["/v1/chat/completions"]
                return web.Response(status=code, text=text, content_type="application/json")
            return web.json_response({"choices": [], "timings": TIMINGS})
        self.requests.append(body)
        return await self.chat(request)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text=self.health_body, content_type="application/json")

    async def _props(self, request: web.Request) -> web.Response:
        if self.props_status != 200:
            return web.json_response(
                {"error": {"code": self.props_status, "message": "nope"}}, status=self.props_status
            )
        return web.json_response(self.props)

    async def _slots(self, request: web.Request) -> web.Response:
        return web.json_response([{"id": i, "n_ctx": 4096} for i in range(4)])

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake.gguf"}]})

    @web.middleware
    async def _override(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "GET" and request.path in self.overrides:
            code, text = self.overrides[request.path]
            return web.Response(status=code, text=text, content_type="application/json")
        return await handler(request)

    async def start(self) -> FakeLlama:
        """Listen on a free loopback port."""
        app = web.Application(middlewares=[self._override])
        app.router.add_get("/health", self._health)
        app.router.add_get("/props", self._props)
        app.router.add_get("/slots", self._slots)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        """Close the server."""
        if self._runner:
            await self._runner.cleanup()


async def stream_bytes(
    request: web.Request, body: bytes, *, close_early: bool = False
) -> web.StreamResponse:
    """Send an SSE body; optionally drop the connection before [DONE]."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(body)
    if close_early:
        assert request.transport is not None
        request.transport.close()
        return resp
    await resp.write_eof()
    return resp


def status(code: int, error_type: str = "server_error", **extra: Any) -> Handler:
    """A handler answering an error JSON with this status."""

    async def handler(request: web.Request) -> web.Response:
        return web.json_response(
            {"error": {"code": code, "message": f"fake {code}", "type": error_type, **extra}},
            status=code,
        )

    return handler


def slow(seconds: float) -> Handler:
    """A handler that never answers in time."""

    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(seconds)
        return web.json_response({})

    return handler
