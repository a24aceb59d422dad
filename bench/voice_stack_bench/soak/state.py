"""The running soak's one record, which the load, the faults and the readings write and the
report reads: its servers and HA session, every request, every fault with its window, the usage
readings and the primes."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from voice_stack_dev.demo.services import Role
from voice_stack_dev.ha_client import HomeAssistantClient
from voice_stack_dev.procs import Service

from ..e2e.servers import Servers

GRACE_S = 30.0  # after a service is back: the integration's next poll (15 s) and a turn
WATCHED = (Role.HASS, Role.GATEWAY, Role.PROXY, Role.SPEECH, Role.LLAMA)


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Request:
    client: str  # "satellite-N" | "browser-N" | "title-N"
    kind: str  # "new" | "follow_up" | "chat" | "title"
    start: float  # s since the run began
    end: float
    ok: bool
    error: str | None = None  # the message the user got
    hang: bool = False
    first_audio_ms: float | None = None
    slot: int | None = None
    in_window: bool | None = None


@dataclass
class Fault:
    name: str
    start: float
    back: float | None = None  # the service answers again
    error: str | None = None
    first_task_s: float | None = None  # llama_kill: until the agent's slot began any task

    def window(self) -> tuple[float, float]:
        return self.start, (self.back if self.back is not None else self.start) + GRACE_S


def overlaps(lo: float, hi: float, windows: list[tuple[float, float]]) -> bool:
    """Whether the span from `lo` to `hi` overlaps any fault window."""
    return any(lo <= end and hi >= start for start, end in windows)


@dataclass
class Soak:
    """The running soak: servers, HA session (replaced when HA restarts), what was seen."""

    servers: Servers
    began: float
    stop_at: float
    ha: HomeAssistantClient | None = None
    pipeline_id: str = ""
    general_key: str = ""
    requests: list[Request] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    usage: list[dict[str, Any]] = field(default_factory=list)
    primes: list[float] = field(default_factory=list)  # s since the run began
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def now(self) -> float:
        return time.monotonic() - self.began

    def service(self, role: Role) -> Service:
        return self.servers.stack.services[role]


async def pause(soak: Soak, seconds: float) -> None:
    """Sleep `seconds`, or less if the run ends meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(soak.done.wait(), seconds)
