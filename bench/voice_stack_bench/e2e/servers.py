"""The benchmark's servers, all on 127.0.0.1: the demo's own (llama-server with SmolLM2 -np 4
behind the auth proxy, the speech server behind the Voice Stack gateway, a real Home Assistant
2026.11, started by the demo's code) plus wyoming-openai 0.8.0 on the same speech server for
the stock pipeline. `stop()` stops every one of them, whatever had started."""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from voice_stack_dev.demo.ha_config import write_config
from voice_stack_dev.demo.services import (
    DEFAULT_MODEL,
    N_PARALLEL,
    DemoError,
    DemoState,
    Role,
    Stack,
    start_backends,
    start_home_assistant,
)
from voice_stack_dev.gateway import start_wyoming_openai
from voice_stack_dev.nginx import start_proxy
from voice_stack_dev.procs import Service, ServiceError
from voice_stack_dev.speech_server import STT_MODEL, TTS_MODEL, VOICE

WYOMING_OPENAI = "wyoming-openai 0.8.0"


@dataclass
class Servers:
    """Everything the benchmark started, with the keys the demo's state generated."""

    work: Path
    state: DemoState = field(default_factory=DemoState)
    stack: Stack = field(init=False)
    wyoming_openai: Service | None = None

    def __post_init__(self) -> None:
        self.stack = Stack(self.work / "logs")

    @property
    def config_dir(self) -> Path:
        return self.work / "ha-config"

    @property
    def logs(self) -> Path:
        return self.stack.logs

    def url(self, role: Role) -> str:
        return self.stack.url(role)

    @property
    def wyoming_openai_port(self) -> int:
        if self.wyoming_openai is None:
            raise DemoError(WYOMING_OPENAI, "not started")
        return self.wyoming_openai.port

    async def start(self, *, stock: bool = True) -> None:
        """The demo's services (backends and HA in parallel), then wyoming-openai (for the
        stock pipeline; `stock=False` leaves it out)."""
        self.state.assign_ports()
        self.state.save(self.work)
        write_config(self.config_dir, self.state.ports[Role.HASS], http_block=True)
        await asyncio.gather(
            asyncio.to_thread(start_backends, self.stack, self.state, DEFAULT_MODEL),
            asyncio.to_thread(start_home_assistant, self.stack, self.state, self.config_dir),
        )
        if stock:
            await asyncio.to_thread(self._start_wyoming_openai)

    def _start_wyoming_openai(self) -> None:
        speech_v1 = f"{self.url(Role.SPEECH)}/v1"
        log = self.logs / "wyoming-openai.log"
        try:
            self.wyoming_openai = start_wyoming_openai(
                speech_v1, speech_v1, log, stt_model=STT_MODEL, tts_model=TTS_MODEL, voice=VOICE
            )
        except (ServiceError, subprocess.CalledProcessError, OSError) as err:
            reason = str(err).split("\n", 1)[0]
            raise DemoError(
                WYOMING_OPENAI, f"{reason} (bench/setup-anchors installs it)", log
            ) from err

    def reserve(self, slots: tuple[int, ...]) -> None:
        """Restart the auth proxy on its port with another LLM_RESERVED_SLOTS."""
        self.stack.services[Role.PROXY].stop()
        self.stack.run(
            Role.PROXY,
            self.logs / "nginx-error.log",
            lambda: start_proxy(
                self.url(Role.LLAMA),
                self.state.proxy_key,
                self.state.llama_key,
                agent_key=self.state.agent_key,
                total_slots=N_PARALLEL,
                reserved_slots=slots,
                log_dir=self.logs,
                port=self.state.ports[Role.PROXY],
            ),
        )

    def stop(self) -> None:
        if self.wyoming_openai is not None:
            self.wyoming_openai.stop()
        self.stack.stop()
