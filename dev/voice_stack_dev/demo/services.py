"""The demo's five services: which they are, what a run keeps for the next one, starting them on
loopback in dependency order and stopping them all for sure; and how the demo tells its user
(progress lines on stderr, `DemoError` naming the service that failed and its log).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from ..gateway import start_gateway
from ..llama import start_llama
from ..nginx import start_proxy
from ..paths import CACHE
from ..procs import Service, ServiceError, free_port, jemalloc_env
from ..speech_server import start_speech_server


# The one error the demo reports: which service, why, and where its log is.
class DemoError(Exception):
    """A failed step, phrased for the person running the demo."""

    def __init__(self, service: str, reason: str, log_path: str | Path | None = None) -> None:
        super().__init__(f"{service}: {reason}")
        self.service = service
        self.reason = reason
        self.log_path = str(log_path) if log_path else None

    def describe(self) -> str:
        text = f"{self.service} failed: {self.reason}"
        if self.log_path:
            text += f"\n  log: {self.log_path}"
        return text


def log(message: str) -> None:
    """A progress line on stderr (stdout carries only the report, or its JSON)."""
    print(f"[demo] {message}", file=sys.stderr, flush=True)


# The demo's five services, in start order: one table for their names, labels and health URLs.
class Role(StrEnum):
    """What a service does in the stack (also the key of its port in the state file)."""

    LLAMA = "llama"
    PROXY = "proxy"
    SPEECH = "speech"
    GATEWAY = "gateway"
    HASS = "hass"


@dataclass(frozen=True)
class ServiceSpec:
    role: Role
    label: str
    health_path: str


SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec(Role.LLAMA, "llama-server", "/health"),
    ServiceSpec(Role.PROXY, "auth proxy (nginx, compose template)", "/proxy/status"),
    ServiceSpec(Role.SPEECH, "speech server (piper + faster-whisper)", "/health"),
    ServiceSpec(Role.GATEWAY, "Voice Stack gateway (Wyoming)", "/health"),
    # The frontend is up (onboarding answers 400 before it).
    ServiceSpec(Role.HASS, "Home Assistant 2026.11", "/manifest.json"),
)
SPEC = {spec.role: spec for spec in SERVICES}
# The gateway has a second port: Wyoming on `gateway`, its /health and /metrics on this one.
GATEWAY_HTTP_PORT = "gateway_http"
PORT_NAMES: tuple[str, ...] = (*(spec.role.value for spec in SERVICES), GATEWAY_HTTP_PORT)


# What a demo run keeps for the next one: generated keys, the HA login, ports, HA's config dir.
DEFAULT_DIR = CACHE / "demo"


def _key() -> str:
    return secrets.token_urlsafe(32)


@dataclass
class DemoState:
    """Persisted in <dir>/state.json (mode 0600): secrets never leave it or the config dir."""

    llama_key: str = field(default_factory=_key)
    proxy_key: str = field(default_factory=_key)  # the proxy's general key
    agent_key: str = field(default_factory=_key)  # the proxy's agent key: what HA is given
    username: str = "demo"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    onboarded: bool = False
    wyoming_port: int | None = None
    proxy_url: str | None = None  # what HA's voice_stack entry points at
    ports: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path) -> DemoState:
        path = directory / "state.json"
        if path.is_file():
            data = json.loads(path.read_text())
            known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
            return cls(**known)
        return cls()

    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.chmod(tmp, 0o600)
        tmp.replace(path)

    def assign_ports(self) -> None:
        """Keep last run's ports when they are still free (HA's entries point at them)."""
        for name in PORT_NAMES:
            port = self.ports.get(name)
            if port is None or not _port_free(port):
                self.ports[name] = _fresh_port(set(self.ports.values()))


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _fresh_port(taken: set[int]) -> int:
    while (port := free_port()) in taken:
        pass
    return port


# Start the demo's real servers on loopback, in dependency order, and stop them all for sure.
DEFAULT_MODEL = "smollm2"
LLAMA_THREADS = 1  # -t 2 on 2 busy cores was 20x slower (spin-waiting threads)
CTX_PER_SLOT = 4096  # SmolLM2 gets no tools: its prompt is under 200 tokens
# A user's model gets HA's Assist API when it can call tools: ~3k prompt tokens with them.
USER_MODEL_CTX_PER_SLOT = 8192
N_PARALLEL = 4
# llama-server's host prompt cache, set on purpose: its own default (8 GiB) is what it grows to
# under a browser load (issue 20's soak); 512 MiB is ~23k tokens of SmolLM2 (~23 KB of KV each).
CACHE_RAM_MIB = 512
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
    services: dict[Role, Service] = field(default_factory=dict)
    startup_s: dict[Role, float] = field(default_factory=dict)

    def url(self, role: Role) -> str:
        return self.services[role].url

    def log(self, role: Role) -> Path:
        return self.services[role].log_path

    def stop(self) -> None:
        """Stop in reverse start order (HA first, llama-server last)."""
        for service in reversed(list(self.services.values())):
            service.stop()
        self.services.clear()

    def dead(self) -> Role | None:
        """The first service that is no longer running, if any."""
        return next((r for r, s in self.services.items() if not s.running), None)

    def run(self, role: Role, log: Path, start: Callable[[], Service]) -> None:
        began = time.monotonic()
        label = SPEC[role].label
        try:
            service = start()
        except ServiceError as err:
            raise DemoError(label, str(err).split("\n", 1)[0], log) from err
        except OSError as err:
            raise DemoError(label, f"cannot start: {err}", log) from err
        self.services[role] = service
        self.startup_s[role] = time.monotonic() - began


def start_backends(stack: Stack, state: DemoState, model: str) -> None:
    """llama-server + proxy, and the speech server + gateway, the two chains in parallel."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(_start_llm_chain, stack, state, model),
            pool.submit(_start_speech_chain, stack, state),
        ]
        for future in futures:
            future.result()


def _start_llm_chain(stack: Stack, state: DemoState, model: str) -> None:
    logs, ports = stack.logs, state.ports
    stack.run(
        Role.LLAMA,
        logs / f"llama-{Path(model).stem}-{ports[Role.LLAMA]}.log",
        lambda: start_llama(
            model,
            api_key=state.llama_key,
            n_parallel=N_PARALLEL,
            ctx_per_slot=CTX_PER_SLOT if model == DEFAULT_MODEL else USER_MODEL_CTX_PER_SLOT,
            threads=LLAMA_THREADS,
            extra_args=("--cache-ram", str(CACHE_RAM_MIB)),
            log_dir=logs,
            port=ports[Role.LLAMA],
        ),
    )
    stack.run(
        Role.PROXY,
        logs / "nginx-error.log",
        lambda: start_proxy(
            stack.url(Role.LLAMA),
            state.proxy_key,
            state.llama_key,
            agent_key=state.agent_key,
            total_slots=N_PARALLEL,
            reserved_slots=RESERVED_SLOTS,
            log_dir=logs,
            port=ports[Role.PROXY],
        ),
    )


def _start_speech_chain(stack: Stack, state: DemoState) -> None:
    logs, ports = stack.logs, state.ports
    stack.run(
        Role.SPEECH,
        logs / "speech_server.log",
        lambda: start_speech_server(log_dir=logs, port=ports[Role.SPEECH], cpu_threads=2),
    )
    log = logs / "gateway.log"
    stack.run(
        Role.GATEWAY,
        log,
        lambda: start_gateway(
            stack.url(Role.SPEECH),
            log,
            port=ports[Role.GATEWAY],
            http_port=ports[GATEWAY_HTTP_PORT],
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
        port=state.ports[Role.HASS],
        log_path=stack.logs / "home-assistant.log",
        health_path=SPEC[Role.HASS].health_path,
        env=jemalloc_env(),  # HA's memory as its own image runs it, not glibc malloc's
        startup_timeout=180.0,
        # A kill loses what HA saves late (a pipeline is written 10 s after a change, or at
        # its final write): give its staged shutdown the time it takes on a busy machine.
        stop_timeout=120.0,
    )
    stack.run(Role.HASS, hass.log_path, hass.start)
