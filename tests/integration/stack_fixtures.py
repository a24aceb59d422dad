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
from homeassistant.config_entries import ConfigEntryState
from homeassistant.core import HomeAssistant
from homeassistant.setup import async_setup_component
from pytest_homeassistant_custom_component.common import MockConfigEntry

from custom_components.voice_stack.const import (
    CONF_API_KEY,
    CONF_GATEWAY_URL,
    CONF_URL,
    DOMAIN,
)
from voice_stack_dev.llama import LlamaServer, start_llama
from voice_stack_dev.nginx import NginxProxy, start_proxy
from voice_stack_dev.paths import venv_bin
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


def start_gateway(speech_url: str, log_dir: Path) -> Service:
    """The real gateway, probing the speech server every second."""
    wyoming_port, http_port = free_port(), free_port()
    argv = [
        str(venv_bin("gw", "voice-stack-gateway")),
        "--uri", f"tcp://127.0.0.1:{wyoming_port}",
        "--http-uri", f"tcp://127.0.0.1:{http_port}",
        "--stt-openai-url", f"{speech_url}/v1",
        "--tts-openai-url", f"{speech_url}/v1",
        "--refresh-interval", "1",
        "--zeroconf", "false",
    ]  # fmt: skip
    return Service(
        name="voice-stack-gateway",
        argv=argv,
        port=http_port,
        log_path=log_dir / f"gateway-{http_port}.log",
    ).start()


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
        gateway = start_gateway(speech.url, service_logs)
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


async def setup_entry(hass: HomeAssistant, entry: MockConfigEntry) -> None:
    """Add and load the entry with HA's own setup path."""
    assert await async_setup_component(hass, "homeassistant", {})
    entry.add_to_hass(hass)
    assert await hass.config_entries.async_setup(entry.entry_id)
    await hass.async_block_till_done()
    assert entry.state is ConfigEntryState.LOADED


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
