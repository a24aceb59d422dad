"""The demo's five services, in start order: one table for their names, labels and health URLs."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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
