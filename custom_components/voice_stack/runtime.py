"""What one loaded config entry holds at run time (its runtime_data): built once in
async_setup_entry, complete."""

from __future__ import annotations

from dataclasses import dataclass, field

from homeassistant.config_entries import ConfigEntry

from .agent import Agent
from .chat import ChatClient
from .client import LlamaClient
from .coordinator import GatewayCoordinator, LlamaCoordinator, ProxyCoordinator
from .repairs import Repairs
from .slots import SlotScheduler
from .timings import Timings
from .warm import SlotPrimer
from .watcher import ServerWatcher


@dataclass(frozen=True, slots=True)
class Coordinators:
    """The pollers of one entry: the server, the proxy and (when configured) the gateway."""

    llm: LlamaCoordinator
    proxy: ProxyCoordinator
    gateway: GatewayCoordinator | None


@dataclass(slots=True)
class VoiceStackData:
    """What the platforms share for one server."""

    client: LlamaClient
    chat: ChatClient
    coordinators: Coordinators
    agents: dict[str, Agent]  # subentry id -> agent
    scheduler: SlotScheduler
    repairs: Repairs
    primer: SlotPrimer  # what it learned of the server: whether slots can be saved
    watcher: ServerWatcher
    timings: dict[str, Timings] = field(default_factory=dict)  # subentry id -> last reply


type VoiceStackConfigEntry = ConfigEntry[VoiceStackData]
