"""The fakes of the servers the integration talks to (tests/integration), one per kind of server:
only for what a real server cannot be made to do on demand (faults, malformed replies, fixed
figures for deterministic snapshots), and Ollama, the foreign server the entry flow names."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Self

import aiohttp
from aiohttp import web

from ..llama import LlamaServer

type Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

FAKE_KEY = "fake-key"
PROPS: dict[str, Any] = {
    "total_slots": 4,
    "model_path": "/models/fake-model.gguf",
    "build_info": "b1-fake",
    "media_marker": "<__media_fake__>",
    "default_generation_settings": {"n_ctx": 4096},
    "chat_template_caps": {"supports_tool_calls": True},
}
# llama-server b11669's answer to every request while it loads its model, byte for byte.
LOADING_BODY = '{"error":{"message":"Loading model","type":"unavailable_error","code":503}}'
TIMINGS = {
    "cache_n": 10,
    "prompt_n": 5,
    "predicted_n": 3,
    "predicted_per_second": 50.0,
    "prompt_per_second": 500.0,
}


def sse(*events: dict[str, Any] | str) -> bytes:
    """Encode SSE lines; strings are sent verbatim (pings, [DONE], garbage)."""
    return "".join(
        e if isinstance(e, str) else f"data: {json.dumps(e)}\n\n" for e in events
    ).encode()


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """One chat.completion.chunk."""
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


GOOD_STREAM = sse(
    chunk({"role": "assistant", "content": None}),
    ": ping\n\n",
    chunk({"content": "Hi "}),
    chunk({"content": "there."}),
    chunk({}, "stop", timings=TIMINGS),
    "data: [DONE]\n\n",
)


def metrics_text(
    prompt: float = 0, cached: float = 0, predicted: float = 0, seconds: float = 0
) -> str:
    """llama-server's /metrics counters, with figures a test chooses."""
    return "\n".join(
        [
            f"llamacpp:prompt_tokens_total {prompt}",
            f"llamacpp:prompt_tokens_cached_total {cached}",
            f"llamacpp:prompt_seconds_total {seconds / 10}",
            f"llamacpp:tokens_predicted_total {predicted}",
            f"llamacpp:tokens_predicted_seconds_total {seconds}",
            "llamacpp:requests_processing 0",
            "llamacpp:requests_deferred 0",
            "",
        ]
    )


async def stream_bytes(
    request: web.Request, body: bytes, *, close_early: bool = False
) -> web.StreamResponse:
    """Send an SSE body; optionally drop the connection before its end."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(body)
    if close_early:
        assert request.transport is not None
        request.transport.close()
        return resp
    await resp.write_eof()
    return resp


def streaming(body: bytes, *, close_early: bool = False) -> Handler:
    """A chat handler that streams this body."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await stream_bytes(request, body, close_early=close_early)

    return handler


def status(code: int, error_type: str = "server_error", **extra: Any) -> Handler:
    """A handler answering llama-server's error JSON with this status."""

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


class FakeServer:
    """An aiohttp server on a free loopback port."""

    def __init__(self) -> None:
        """Not listening yet."""
        self.url = ""
        self._runner: web.AppRunner | None = None

    def routes(self, app: web.Application) -> None:
        """Add the routes (subclasses)."""

    async def start(self) -> Self:
        """Listen on 127.0.0.1."""
        app = web.Application(middlewares=self.middlewares())
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    def middlewares(self) -> list[Any]:
        """Middlewares (subclasses)."""
        return []

    async def stop(self) -> None:
        """Close the server."""
        if self._runner:
            await self._runner.cleanup()
            self._runner = None


class FakeLlama(FakeServer):
    """llama-server's API with fixed figures; each reply can be swapped or overridden."""

    def __init__(self) -> None:
        """A healthy server streaming GOOD_STREAM."""
        super().__init__()
        self.chat: Handler = streaming(GOOD_STREAM)
        self.requests: list[dict[str, Any]] = []  # streamed chat requests
        self.warm_requests: list[dict[str, Any]] = []  # non-streamed ones (warm-up, probe)
        self.props: dict[str, Any] = dict(PROPS)
        self.slots: list[dict[str, Any]] = [{"id": i, "n_ctx": 4096} for i in range(4)]
        self.metrics = metrics_text()
        self.overrides: dict[str, tuple[int, str]] = {}  # path -> (status, raw body)
        self.delays: dict[str, float] = {}  # path -> seconds before answering
        self.chat_posts = 0  # chat requests received, answered or overridden
        self.proxy_status: dict[str, Any] | None = None  # act as the auth proxy when set
        # what a request other than /health and /proxy/status must carry (None: anything)
        self.key: str | None = FAKE_KEY

    def routes(self, app: web.Application) -> None:
        """llama-server's endpoints (and the proxy's status when acting as one)."""
        app.router.add_get("/health", self._json(lambda: {"status": "ok"}))
        app.router.add_get("/props", self._json(lambda: self.props))
        app.router.add_get("/slots", self._json(lambda: self.slots))
        app.router.add_get("/v1/models", self._json(lambda: {"data": [{"id": "fake-model"}]}))
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/proxy/status", self._proxy)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/slots/{slot}", self._json(lambda: {"ok": True}))

    def middlewares(self) -> list[Any]:
        """Overrides answer before any route."""
        return [self._override]

    def _json(self, body: Callable[[], Any]) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            return web.json_response(body())

        return handler

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics, content_type="text/plain")

    async def _proxy(self, request: web.Request) -> web.Response:
        if self.proxy_status is None:
            return web.json_response({"error": {"code": 404}}, status=404)
        return web.json_response(self.proxy_status)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            self.warm_requests.append(body)
            return web.json_response({"choices": [], "timings": TIMINGS})
        self.requests.append(body)
        return await self.chat(request)

    @web.middleware
    async def _override(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == "/v1/chat/completions":
            self.chat_posts += 1
        if (delay := self.delays.get(request.path)) is not None:
            await asyncio.sleep(delay)
        if (found := self.overrides.get(request.path)) is not None:
            code, text = found
            return web.Response(status=code, text=text, content_type="application/json")
        guarded = request.path not in ("/health", "/proxy/status")
        wrong = request.headers.get("Authorization") != f"Bearer {self.key}"
        if guarded and self.key is not None and wrong:
            return web.json_response(
                {"error": {"code": 401, "message": "Invalid API Key"}}, status=401
            )
        return await handler(request)


class FakeGateway(FakeServer):
    """The gateway's /health and /metrics with fixed figures."""

    def __init__(self) -> None:
        """Both backends up, no speech request yet."""
        super().__init__()
        self.health: dict[str, Any] = {
            "status": "ok",
            "version": "0.1.0",
            "uptime_s": 10.0,
            "active_sessions": 0,
            "backends": {
                kind: {
                    "url": f"http://{kind}:8000/v1",
                    "status": "ok",
                    "last_success": "2026-12-01T00:00:00+00:00",
                    "last_error": None,
                    "last_error_at": None,
                    "latency_ms": 2.0,
                    "models": [f"{kind}-model"],
                }
                for kind in ("asr", "tts")
            },
        }
        self.latency: dict[str, tuple[float, int]] = {}  # kind -> (seconds total, count)
        self.health_status = 200

    def routes(self, app: web.Application) -> None:
        """/health and /metrics."""
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response(self.health, status=self.health_status)

    async def _metrics(self, request: web.Request) -> web.Response:
        lines = []
        for kind, (total, count) in self.latency.items():
            lines += [
                f'gateway_latency_seconds_sum{{kind="{kind}"}} {total}',
                f'gateway_latency_seconds_count{{kind="{kind}"}} {count}',
            ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


class FakeOllama(FakeServer):
    """Ollama (not provisioned: the flow only has to tell it apart) as the entry flow meets it:
    its root's banner, GET /api/version, and Go's plain-text 404 on every other path, /health and
    /props included."""

    def __init__(self) -> None:
        """Ollama 0.12 answering on its own."""
        super().__init__()
        self.banner: str | None = "Ollama is running"  # None: a front end serves / itself

    def routes(self, app: web.Application) -> None:
        """/, /api/version, and 404 for the rest."""
        app.router.add_get("/", self._root)
        app.router.add_get("/api/version", self._version)
        app.router.add_route("*", "/{tail:.*}", self._not_found)

    async def _root(self, request: web.Request) -> web.Response:
        if self.banner is None:
            return await self._not_found(request)
        return web.Response(text=self.banner, content_type="text/plain")

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.12.6"})

    async def _not_found(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text="404 page not found", content_type="text/plain")


class ForwardingProxy(FakeServer):
    """Forwards to a real llama-server with its key; checks the client key, or (faulty) not."""

    def __init__(self, upstream: LlamaServer, key: str) -> None:
        """Forward to `upstream`, letting in requests that carry `key`."""
        super().__init__()
        self.upstream = upstream
        self.key = key
        self.check_key = True
        self.loading = False
        self.status: dict[str, int] = {}  # path -> forced status
        self.delay: dict[str, float] = {}  # path -> seconds before answering
        self.body: dict[str, str] = {}  # path -> forced 200 body
        self.drop: dict[str, tuple[str, ...]] = {}  # path -> fields left out of its JSON object

    def routes(self, app: web.Application) -> None:
        """Everything goes to one handler."""
        app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Apply the configured fault, else forward."""
        if (delay := self.delay.get(request.path)) is not None:
            await asyncio.sleep(delay)
        if (body := self.body.get(request.path)) is not None:
            return web.Response(text=body, content_type="application/json")
        if (code := self.status.get(request.path)) is not None:
            return web.json_response({"error": {"code": code}}, status=code)
        if self.loading:
            return web.json_response(
                {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
                status=503,
            )
        if request.path == "/proxy/status":
            return web.json_response(
                {"reserved_slots": [0], "total_slots": 4, "service": "fake-open-proxy"}
            )
        guarded = request.path != "/health"
        if (
            guarded
            and self.check_key
            and request.headers.get("Authorization") != f"Bearer {self.key}"
        ):
            return web.json_response({"error": {"code": 401}}, status=401)
        return await self._forward(request)

    async def _forward(self, request: web.Request) -> web.Response:
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method,
                self.upstream.url + request.path_qs,
                data=await request.read(),
                headers={**self.upstream.headers, "Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=30),
            ) as upstream,
        ):
            body = await upstream.read()
            if (fields := self.drop.get(request.path)) and upstream.status == 200:
                payload = json.loads(body)
                body = json.dumps({k: v for k, v in payload.items() if k not in fields}).encode()
            return web.Response(
                body=body, status=upstream.status, content_type=upstream.content_type
            )
