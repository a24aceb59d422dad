"""Start the demo's real servers on loopback, in dependency order, and stop them all for sure."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..gateway import start_gateway
from ..llama import start_llama
from ..procs import Service, ServiceError
from .errors import DemoError
from .state import DemoState

LLAMA_THREADS = 1  # -t 2 on 2 busy cores was 20x slower (spin-waiting threads)
CTX_PER_SLOT = 4096  # HA's Assist prompt with tools is ~3k tokens
N_PARALLEL = 4
RESERVED_SLOTS = (0,)
STT_MODEL = "tiny.en"
TTS_MODEL = "piper-joe"
TTS_VOICE = "joe"
GATEWAY_MODEL_ARGS = (
    "--stt-models", STT_MODEL,
    "--tts-models", TTS_MODEL,
    "--tts-voices", TTS_VOICE,
)  # fmt: skip


@dataclass
class Stack:
    """The running services, by role, with how long each took to become ready."""

    logs: Path
    services: dict[str, Service] = field(default_factory=dict)
    startup_s: dict[str, float] = field(default_factory=dict)

    def url(self, role: str) -> str:
        return self.services[role].url

    def stop(self) -> None:
        """Stop in reverse start order (HA first, llama-server last)."""
        for service in reversed(list(self.services.values())):
            service.stop()
        self.services.clear()

    def _run(self, role: str, label: str, log: Path, start: Callable[[], Service]) -> None:
        began = time.monotonic()
        try:
            service = start()
        except ServiceError as err:
            raise DemoError(label, str(err).split("\n", 1)[0], log) from err
        except (OSError, FileNotFoundError) as err:
            raise DemoError(label, f"cannot start: {err}", log) from err
        self.services[role] = service
        self.startup_s[role] = time.monotonic() - began


def start_backends(stack: Stack, state: DemoState) -> None:
    """llama-server + proxy, and the speech server + gateway, the two chains in parallel."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(_start_llm_chain, stack, state),
            pool.submit(_start_speech_chain, stack, state),
        ]
        for future in futures:
            future.result()


def _start_llm_chain(stack: Stack, state: DemoState) -> None:
    from ..nginx import start_proxy

    logs, ports = stack.logs, state.ports
    stack._run(
        "llama",
        "llama-server (SmolLM2-135M)",
        logs / f"llama-smollm2-{ports['llama']}.log",
        lambda: start_llama(
            "smollm2",
            api_key=state.llama_key,
            n_parallel=N_PARALLEL,
            ctx_per_slot=CTX_PER_SLOT,
            threads=LLAMA_THREADS,
            log_dir=logs,
            port=ports["llama"],
        ),
    )
    stack._run(
        "proxy",
        "auth proxy (nginx)",
        logs / "nginx-error.log",
        lambda: start_proxy(
            stack.url("llama"),
            state.proxy_key,
            state.llama_key,
            agent_key=state.agent_key,
            total_slots=N_PARALLEL,
            reserved_slots=RESERVED_SLOTS,
            log_dir=logs,
            port=ports["proxy"],
        ),
    )


def _start_speech_chain(stack: Stack, state: DemoState) -> None:
    from ..speech_server import start_speech_server

    logs, ports = stack.logs, state.ports
    stack._run(
        "speech",
        "speech server (piper + faster-whisper)",
        logs / "speech_server.log",
        lambda: start_speech_server(log_dir=logs, port=ports["speech"], cpu_threads=2),
    )
    log = logs / "gateway.log"
    stack._run(
        "gateway",
        "Voice Stack gateway",
        log,
        lambda: start_gateway(
            stack.url("speech"),
            log,
            port=ports["gateway"],
            http_port=ports["gateway_http"],
            extra_args=GATEWAY_MODEL_ARGS,
            name="Voice Stack gateway",
            startup_timeout=30.0,
        ),
    )


def start_home_assistant(stack: Stack, state: DemoState, config_dir: Path) -> None:
    """A real `hass` with --skip-pip: every requirement is provisioned by scripts/setup.

    It is the `hass` of the environment running the demo (ha11, from scripts/demo).
    """
    hass_bin = Path(sys.executable).parent / "hass"
    hass = Service(
        name="Home Assistant",
        argv=[str(hass_bin), "-c", str(config_dir), "--skip-pip"],
        port=state.ports["hass"],
        log_path=stack.logs / "home-assistant.log",
        health_path="/manifest.json",  # the frontend is up (onboarding answers 400 before)
        startup_timeout=180.0,
    )
    stack._run("hass", "Home Assistant", hass.log_path, hass.start)
