"""Runtime data of a Voice Stack config entry (contract 6)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from homeassistant.config_entries import ConfigEntry

from .client import LlamaClient
from .timings import Timings

if TYPE_CHECKING:
    from .coordinator import Coordinators
    from .warm import SlotWarmer


@dataclass
class VoiceStackData:
    """What the platforms share for one server."""

    client: LlamaClient
    timings: dict[str, Timings] = field(default_factory=dict)
    props: dict[str, Any] = field(default_factory=dict)
    warmer: SlotWarmer | None = None
    # Health and speed pollers (sensors engineer); set before the platforms load.
    coordinators: Coordinators | None = None


type VoiceStackConfigEntry = ConfigEntry[VoiceStackData]
