"""The demo's result, assembled from each step's own small result; JSON for the e2e tests."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from .observe import EntityReading
from .provision import AgentPlan, Setup
from .turns import Turn


@dataclass
class ServiceReport:
    role: str
    label: str
    url: str
    log: str
    startup_s: float | None = None
    health: str = "?"
    detail: str = ""


@dataclass(frozen=True)
class Provisioning:
    setup: Setup
    seconds: float
    reused: bool  # a second run: the owner, entries and pipeline were found again


@dataclass
class DemoReport:
    """Everything one run found; `ok` is False with `error` set when a step failed."""

    ok: bool = False
    plan: AgentPlan | None = None
    services: list[ServiceReport] = field(default_factory=list)
    provisioning: Provisioning | None = None
    turns: list[Turn] = field(default_factory=list)
    sensors: list[EntityReading] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)  # open voice_stack repair issues
    ha_url: str = ""
    dashboard_url: str | None = None
    error: dict[str, str | None] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, default=str)
