"""HTTP side port: GET /health (JSON, HTTP 200 while the gateway runs) and GET /metrics, to the
allowed networks only (403 to anyone else)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

Health = Callable[[], dict[str, object]]
Prometheus = Callable[[], str]
Allowed = Callable[[str | None], bool]  # the client's address; False: refused (and counted)
_HEALTH: web.AppKey[Health] = web.AppKey("health")
_PROMETHEUS: web.AppKey[Prometheus] = web.AppKey("prometheus")
_ALLOWED: web.AppKey[Allowed] = web.AppKey("allowed")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _only_allowed(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.app[_ALLOWED](request.remote):
        return web.json_response({"error": "not allowed from this address"}, status=403)
    return await handler(request)


async def _health(request: web.Request) -> web.Response:
    return web.json_response(request.app[_HEALTH]())


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(
        text=request.app[_PROMETHEUS](),
        content_type="text/plain",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def build_app(health: Health, prometheus: Prometheus, allowed: Allowed) -> web.Application:
    app = web.Application(middlewares=[_only_allowed], client_max_size=64 * 1024)
    app[_HEALTH] = health
    app[_PROMETHEUS] = prometheus
    app[_ALLOWED] = allowed
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    return app
