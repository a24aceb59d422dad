"""A real local stack for the sensor tests: llama-server behind the nginx auth proxy, the
speech server (piper + faster-whisper) and the Wyoming gateway probing it.

A test module wraps `run_live_stack` in a module-scoped fixture.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import (
    CONF_API_KEY,
    CONF_GATEWAY_URL,
    CONF_URL,
    DOMAIN,
)
from custom_components.voice_stack.coordinator import Coordinators
from tests.integration.agent_helpers import setup_entry
from voice_stack_dev.gateway import start_gateway
from voice_stack_dev.llama import LlamaServer, start_llama
from voice_stack_dev.nginx import NginxProxy, start_proxy
from voice_stack_dev.procs import Service, free_port
from voice_stack_dev.speech_server import start_speech_server

PROXY_KEY = "sensor-test-proxy-key"
UPSTREAM_KEY = "sensor-test-upstream-key"


@dataclass
class LiveStack:
    """The running services; tests may stop and restart any of them."""

    llama: LlamaServer
    proxy: NginxProxy
    speech: Service
    gateway: Service

    @property
    def gateway_url(self) -> str:
        return self.gateway.url

    def all(self) -> list[Service]:
        return [self.llama, self.proxy, self.speech, self.gateway]


def _start_gateway(speech_url: str, log_dir: Path) -> Service:
    """The real gateway, probing the speech server every second."""
    http_port = free_port()
    return start_gateway(
        speech_url,
        log_dir / f"gateway-{http_port}.log",
        http_port=http_port,
        extra_args=["--refresh-interval", "1", "--zeroconf", "false"],
    )


def run_live_stack(service_logs: Path) -> Iterator[LiveStack]:
    """Start the four services (wrap in a module-scoped fixture); tests leave them running."""
    started: list[Service] = []
    try:
        llama = start_llama("tiny-text", api_key=UPSTREAM_KEY, log_dir=service_logs)
        started.append(llama)
        proxy = start_proxy(llama.url, PROXY_KEY, UPSTREAM_KEY, log_dir=service_logs)
        started.append(proxy)
        speech = start_speech_server(log_dir=service_logs, cpu_threads=1)
        started.append(speech)
        gateway = _start_gateway(speech.url, service_logs)
        started.append(gateway)
        yield LiveStack(llama, proxy, speech, gateway)
    finally:
        for service in reversed(started):
            service.stop()


def stack_entry(
    url: str, api_key: str, gateway_url: str | None, subentries: list[dict[str, Any]]
) -> MockConfigEntry:
    """An entry as the config flow creates it (gateway URL in the options)."""
    return MockConfigEntry(
        domain=DOMAIN,
        title="voice stack",
        unique_id=url,
        data={CONF_URL: url, CONF_API_KEY: api_key},
        options={CONF_GATEWAY_URL: gateway_url} if gateway_url else {},
        subentries_data=subentries,
    )


async def setup_stack_entry(
    hass: HomeAssistant,
    url: str,
    api_key: str,
    gateway_url: str | None = None,
    subentries: list[dict[str, Any]] | None = None,
) -> MockConfigEntry:
    """An entry as the config flow creates it, added and loaded."""
    entry = stack_entry(url, api_key, gateway_url, subentries or [])
    await setup_entry(hass, entry)
    return entry


def coordinators_of(entry: ConfigEntry) -> Coordinators:
    """The pollers of a loaded entry."""
    coordinators: Coordinators | None = entry.runtime_data.coordinators
    assert coordinators is not None
    return coordinators


async def wait_gateway(
    hass: HomeAssistant, gateway_url: str, check: Callable[[dict[str, Any]], bool]
) -> None:
    """Wait (bounded) until the gateway's own backend probe has seen a change."""

    def read() -> dict[str, Any]:
        with urllib.request.urlopen(f"{gateway_url}/health", timeout=5) as resp:
            return dict(json.loads(resp.read()))

    for _ in range(100):
        if check(await hass.async_add_executor_job(read)):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the gateway never reported the expected backend state")


type Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def start_fake(routes: dict[str, Handler]) -> tuple[web.AppRunner, str]:
    """A small aiohttp server on loopback, for faults real servers cannot be made to show."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_route("*", path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"
