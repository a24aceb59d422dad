"""HTTP side port: GET /health (JSON, HTTP 200 while the gateway runs) and GET /metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from .gateway import Gateway

GATEWAY_KEY: web.AppKey[Gateway] = web.AppKey("gateway")


async def _health(request: web.Request) -> web.Response:
    return web.json_response(request.app[GATEWAY_KEY].health())


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(
        text=request.app[GATEWAY_KEY].metrics.prometheus(),
        content_type="text/plain",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def build_app(gateway: Gateway) -> web.Application:
    app = web.Application()
    app[GATEWAY_KEY] = gateway
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    return app
