"""The demo's result: one dataclass, printed for people or as JSON for the end-to-end test."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from .observe import EntityReading


@dataclass
class ServiceInfo:
    label: str
    url: str
    log: str
    startup_s: float | None = None
    health: str = "?"
    detail: str = ""


@dataclass
class DemoResult:
    """Everything one run found; `ok` is False with `error` set when a step failed."""

    ok: bool = False
    request_text: str = ""
    request_audio_s: float = 0.0
    transcript: str = ""
    reply: str = ""
    reply_type: str = ""
    processed_locally: bool | None = None
    agent_entity: str = ""
    agent_slot: int | None = None
    slot_used: int | None = None
    stage_ms: dict[str, float] = field(default_factory=dict)
    pipeline_ms: float = 0.0
    reply_fetch_ms: float = 0.0
    reply_wav: str = ""
    reply_audio_s: float = 0.0
    light_entity: str = ""
    light_before: str = ""
    light_after: str = ""
    provision_s: float = 0.0
    reused: bool = False
    pipeline_id: str = ""
    voice_stack_entry: str = ""
    services: dict[str, ServiceInfo] = field(default_factory=dict)
    sensors: list[EntityReading] = field(default_factory=list)
    ha_url: str = ""
    dashboard_url: str | None = None
    error: dict[str, str | None] | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


ORDER = ("llama", "proxy", "speech", "gateway", "hass")


def _ordered(services: dict[str, ServiceInfo]) -> list[ServiceInfo]:
    return [
        services[role]
        for role in sorted(
            services, key=lambda r: (r not in ORDER, ORDER.index(r) if r in ORDER else 0)
        )
    ]


def _ms(value: float | None) -> str:
    return f"{value:7.0f} ms" if value is not None else "      - ms"


def render(result: DemoResult) -> str:
    """The human-readable report."""
    out: list[str] = ["", "Voice Stack demo: one spoken request through Home Assistant's Assist"]
    if result.services:
        out += ["", "Services"]
    for info in _ordered(result.services):
        took = f"ready in {info.startup_s:4.1f} s" if info.startup_s is not None else ""
        out.append(f"  {info.label:<40} {info.url:<28} {took}")
    if result.provision_s:
        what = "reused, checked" if result.reused else "onboarding, config flows, pipeline"
        out.append(f"  HA set up ({what}) in {result.provision_s:.1f} s")
    if result.request_text:
        out += _pipeline_lines(result)
    if result.sensors:
        out += _entity_lines(result.sensors)
    health = [i for i in _ordered(result.services) if i.health != "?"]
    if health:
        out.append("")
        out.append("Health (each service's own /health)")
        for info in health:
            out.append(f"  {info.label:<40} {info.health:<5} {info.detail}")
    if result.error:
        out.append("")
        out.append(f"FAILED: {result.error['service']}: {result.error['reason']}")
        if result.error.get("log"):
            out.append(f"  log: {result.error['log']}")
    return "\n".join(out)


def _pipeline_lines(r: DemoResult) -> list[str]:
    stages = r.stage_ms
    slot = "?" if r.slot_used is None else str(r.slot_used)
    lines = [
        "",
        f'Request  "{r.request_text}"  ({r.request_audio_s:.1f} s of speech from piper)',
        f'  STT    {_ms(stages.get("stt"))}  transcript: "{r.transcript}"',
        f'  Agent  {_ms(stages.get("intent"))}  reply: "{" ".join(r.reply.split())}"',
        f"                     by {r.agent_entity} (slot {r.agent_slot}); "
        f"llama-server served slot {slot}"
        + ("; handled by HA's local intents!" if r.processed_locally else ""),
        f"  TTS    {_ms(stages.get('tts'))}  (streams alongside the reply); the rest of the "
        f"audio came {r.reply_fetch_ms:.0f} ms later -> {r.reply_wav} ({r.reply_audio_s:.1f} s)",
        f"  Whole run (audio in -> reply audio out): {r.pipeline_ms + r.reply_fetch_ms:.0f} ms",
    ]
    if r.light_entity:
        lines.append(f"  {r.light_entity}: {r.light_before} -> {r.light_after}")
    return lines


def _entity_lines(readings: list[EntityReading]) -> list[str]:
    sensors = [r for r in readings if r.entity_id.startswith("sensor.")]
    health = [r for r in readings if r.entity_id.startswith("binary_sensor.")]
    lines = ["", "Voice Stack sensors in Home Assistant (speed, cache, load)"]
    lines += [f"  {r.name:<52} {_value(r)}" for r in sensors]
    lines += ["", "Voice Stack health in Home Assistant (binary sensors)"]
    lines += [f"  {r.name:<52} {_value(r)}" for r in health]
    return lines


def _value(reading: EntityReading) -> str:
    """Numbers rounded for reading; everything else as HA has it."""
    try:
        number = float(reading.state)
    except ValueError:
        text = reading.state
    else:
        text = f"{number:.0f}" if number.is_integer() or abs(number) >= 100 else f"{number:.1f}"
    return text + (f" {reading.unit}" if reading.unit else "")
