"""The demo's result, assembled from each step's own small result (JSON for the e2e tests), and
as people read it: who answered each request, and where the time went.
"""

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


# The demo's report as people read it: who answered each request, and where the time went.
def render(report: DemoReport) -> str:
    out = ["", "Voice Stack demo: spoken requests through Home Assistant's Assist, in real time"]
    out += _service_lines(report)
    if report.plan is not None:
        out += ["", *plan_notes(report.plan)]
    for previous, turn in zip([None, *report.turns], report.turns, strict=False):
        out += ["", *_turn_lines(turn, previous)]
    if report.sensors:
        out += _entity_lines(report.sensors)
    if report.provisioning is not None:
        repairs = ", ".join(report.repairs) or "none"
        out += ["", f"Voice Stack repairs open in Home Assistant: {repairs}"]
    health = [s for s in report.services if s.health != "?"]
    if health:
        width = max(len(s.label) for s in health)
        out += ["", "Health (each service's own /health)"]
        out += [f"  {s.label:<{width}} {s.health:<5} {s.detail}" for s in health]
    if report.error:
        out += ["", f"FAILED: {report.error['service']}: {report.error['reason']}"]
        if report.error.get("log"):
            out.append(f"  log: {report.error['log']}")
    return "\n".join(out)


def plan_notes(plan: AgentPlan) -> list[str]:
    """What the model can do, and so who handles commands."""
    lines = [f"Model  {plan.model}"]
    if plan.control:
        lines.append(
            "  Its chat template can call tools: the agent controls exposed devices itself "
            "through HA's Assist API (a tool-calling model of a few billion parameters does "
            "this well)."
        )
    else:
        lines.append(
            "  It cannot call tools, so the agent gets no device control (no LLM API) and "
            'Voice Stack raises no "model cannot call tools" repair.'
        )
    if plan.commands_to_agent:
        lines.append(
            "  --commands-to-agent: every request, commands too, goes to the agent"
            + ("." if plan.control else ", which cannot switch the light.")
        )
    else:
        lines.append(
            "  The pipeline prefers handling commands locally: HA's own intents answer "
            "commands, the agent everything else (--commands-to-agent changes that)."
        )
    return lines


def _service_lines(report: DemoReport) -> list[str]:
    out = ["", "Services"] if report.services else []
    width = max((len(info.label) for info in report.services), default=0)
    for info in report.services:
        took = f"ready in {info.startup_s:4.1f} s" if info.startup_s is not None else ""
        out.append(f"  {info.label:<{width}} {info.url:<23} {took}")
    if report.provisioning is not None:
        out.append("  " + _provisioning_line(report.provisioning))
    return out


def _provisioning_line(done: Provisioning) -> str:
    what = "reused, checked" if done.reused else "onboarding, config flows, pipeline"
    http = done.setup.http
    hosts = ", ".join(http.hosts)
    return (
        f"HA set up ({what}) in {done.seconds:.1f} s; it listens on {hosts}:{http.port} only "
        "(its HTTP settings confirmed, none pending)"
    )


def _ms(value: float | None) -> str:
    return f"{value:6.0f} ms" if value is not None else "     - ms"


def answered_by(turn: Turn) -> str:
    if turn.answered_locally:
        return "Home Assistant's own intents (prefer handling commands locally)"
    slot = turn.agent.slot if turn.agent is not None else turn.slot_used
    agrees = "; llama-server's /slots agrees" if turn.slot_used == slot else ""
    return f"the Voice Stack agent {turn.engine} on slot {slot}{agrees}"


# Why a turn's audio stopped counting (assist_timings' audio_stop_by), as the report says it.
_STOPPED_BY = {
    "vad": "HA's VAD heard the silence",
    "transcript": "the gateway answered at the pause",
}


def _turn_lines(turn: Turn, previous: Turn | None) -> list[str]:
    t = turn.timings
    lines = [
        f'{turn.number}. {turn.kind.capitalize():<10}"{turn.text}"  ({turn.speech_s:.1f} s '
        "of speech, streamed in real time)",
        f'   heard     "{turn.transcript}"',
        f"   answered  by {answered_by(turn)}",
        f'   reply     "{turn.reply}"',
    ]
    if turn.light_after is not None:
        lines.append(f"   light     {turn.light_before} -> {turn.light_after}")
    if turn.agent is not None:
        lines.append(f"   prompt    {cache_line(turn, previous)}")
    lines.append(f"   end of speech -> first reply audio {_ms(t.to_first_audio_ms)}")
    stopped = _STOPPED_BY.get(t.audio_stop_by, "0.7 s of silence sent")
    for name, value in t.parts().items():
        why = f"  ({stopped})" if name == "end of speech -> audio-stop" else ""
        lines.append(f"     {name:<33}{_ms(value)}{why}")
    if turn.reply_wav:
        streamed = "; streamed while the agent wrote" if t.streamed else ""
        lines.append(f"   reply audio {turn.reply_wav} ({turn.reply_audio_s:.1f} s){streamed}")
    return lines


def cache_line(turn: Turn, previous: Turn | None) -> str:
    """How much of the prompt the slot's KV cache served; a follow-up says whether the whole
    previous turn was still there."""
    agent = turn.agent
    assert agent is not None
    total = agent.cached_tokens + agent.prompt_tokens
    line = f"{agent.cached_tokens} of {total} prompt tokens from slot {agent.slot}'s cache"
    if (reuse := agent.reuse_percent) is not None:
        line += f" ({reuse:.0f}%)"
    before = previous.agent if previous is not None else None
    if (
        before is not None
        and previous is not None
        and turn.conversation_id == (previous.conversation_id)
    ):
        kept = before.cached_tokens + before.prompt_tokens
        if agent.cached_tokens >= kept:
            line += f": the whole previous turn ({kept} tokens) was still cached"
    line += f"; {agent.prompt_tokens} new tokens processed"
    if agent.time_to_first_token_ms is not None:
        line += f", first token after {agent.time_to_first_token_ms:.0f} ms"
    return line


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
        return reading.state  # "unknown", "ready"...: no unit
    text = f"{number:.0f}" if number.is_integer() or abs(number) >= 100 else f"{number:.1f}"
    return text + (f" {reading.unit}" if reading.unit else "")
