"""The real local stack for the health and speed tests: llama-server behind the real nginx
auth proxy, the speech server (piper + faster-whisper) and the Wyoming gateway probing it."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homeassistant.core import HomeAssistant

from voice_stack_dev.gateway import start_gateway
from voice_stack_dev.llama import LlamaServer, start_llama
from voice_stack_dev.nginx import NginxProxy, start_proxy
from voice_stack_dev.procs import Service, free_port
from voice_stack_dev.speech_server import start_speech_server

UPSTREAM_KEY = "live-stack-upstream-key"
PROXY_KEY = "live-stack-proxy-key"


@dataclass
class LiveStack:
    """The running services; a test may stop and start any of them (and must restart it)."""

    llama: LlamaServer
    proxy: NginxProxy
    speech: Service
    gateway: Service

    @property
    def agent_key(self) -> str:
        """The key Voice Stack's agents use at the proxy."""
        return self.proxy.agent_key


def run_live_stack(service_logs: Path) -> Iterator[LiveStack]:
    """Start the four services (wrap in a fixture); stopped in reverse order afterwards."""
    started: list[Service] = []
    try:
        llama = start_llama("tiny-text", api_key=UPSTREAM_KEY, log_dir=service_logs)
        started.append(llama)
        proxy = start_proxy(llama.url, PROXY_KEY, UPSTREAM_KEY, log_dir=service_logs)
        started.append(proxy)
        speech = start_speech_server(log_dir=service_logs, cpu_threads=1)
        started.append(speech)
        http_port = free_port()
        gateway = start_gateway(
            speech.url,
            service_logs / f"gateway-{http_port}.log",
            http_port=http_port,
            extra_args=["--refresh-interval", "1"],
        )
        started.append(gateway)
        yield LiveStack(llama, proxy, speech, gateway)
    finally:
        for service in reversed(started):
            service.stop()


async def wait_gateway(
    hass: HomeAssistant, gateway_url: str, check: Callable[[dict[str, Any]], bool]
) -> None:
    """Wait (bounded) until the gateway's own backend probe has seen a change."""

    def read() -> dict[str, Any]:
        with urllib.request.urlopen(f"{gateway_url}/health", timeout=5) as resp:
            return dict(json.loads(resp.read()))

    for _ in range(200):
        if check(await hass.async_add_executor_job(read)):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the gateway never reported the expected backend state")
