"""What a demo run keeps for the next one: generated keys, the HA login, ports, HA's config dir."""

from __future__ import annotations

import json
import os
import secrets
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..paths import CACHE
from ..procs import free_port
from .roles import PORT_NAMES

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
