"""HTTP side port: GET /health (JSON, HTTP 200 while the gateway runs) and GET /metrics."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

Health = Callable[[], dict[str, object]]
Prometheus = Callable[[], str]
_HEALTH: web.AppKey[Health] = web.AppKey("health")
_PROMETHEUS: web.AppKey[Prometheus] = web.AppKey("prometheus")


async def _health(request: web.Request) -> web.Response:
    return web.json_response(request.app[_HEALTH]())


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(
        text=request.app[_PROMETHEUS](),
        content_type="text/plain",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def build_app(health: Health, prometheus: Prometheus) -> web.Application:
    app = web.Application()
    app[_HEALTH] = health
    app[_PROMETHEUS] = prometheus
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    return app
