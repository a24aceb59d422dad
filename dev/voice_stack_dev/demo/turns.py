"""The spoken requests: a command HA's own intents handle, a question for our agent, and a
follow-up in the same conversation, where the slot's prompt cache shows."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..assist import AssistError, AssistRun, run_utterance
from ..assist_timings import AssistTimings
from ..ha_client import HomeAssistantClient
from . import audio, observe
from .console import log
from .errors import DemoError
from .provision import Setup

AGENT_SERVICE = "conversation agent (voice_stack -> auth proxy -> llama-server)"
LIGHT_WAIT_S = 10.0


@dataclass(frozen=True)
class Request:
    kind: str  # "command" | "question" | "follow-up"
    text: str
    continues: bool = False  # the previous request's conversation


def default_requests(command: str, question: str, follow_up: str) -> tuple[Request, ...]:
    return (
        Request("command", command),
        Request("question", question),
        Request("follow-up", follow_up, continues=True),
    )


@dataclass(frozen=True)
class Turn:
    """One request: what HA heard and answered, who answered, and where the time went."""

    number: int
    kind: str
    text: str
    speech_s: float
    transcript: str
    reply: str
    answered_locally: bool  # HA's own intents ("prefer handling commands locally")
    engine: str
    conversation_id: str | None
    slot_used: int | None  # llama-server's /slots: the slot of the latest task
    agent: observe.AgentTimings | None  # the agent's timings of this reply
    timings: AssistTimings
    light_before: str | None
    light_after: str | None
    reply_wav: str
    reply_audio_s: float


@dataclass(frozen=True)
class TurnContext:
    """What every turn needs from the running stack."""

    ha: HomeAssistantClient
    setup: Setup
    speech_url: str
    speech_log: str
    llama_url: str
    llama_key: str
    output: Path
    ffmpeg: str
    agent_controls_devices: bool  # the agent has HA's Assist API (a tool-calling model)


def service_for(code: str) -> str:
    """Name the part behind a pipeline error code (stt-*, intent-*, tts-*)."""
    if code.startswith("stt"):
        return "speech-to-text (gateway -> speech server)"
    if code.startswith("tts"):
        return "text-to-speech (gateway -> speech server)"
    if code.startswith(("intent", "conversation")):
        return AGENT_SERVICE
    return "Assist pipeline"


def check_command(turn: Turn, *, prefer_local: bool) -> None:
    """With "prefer handling commands locally", HA's own intents must have switched the light."""
    if not prefer_local or turn.kind != "command":
        return
    if not turn.answered_locally:
        raise DemoError(
            "Home Assistant's intents",
            f'they did not recognise "{turn.transcript}" as a command; the agent answered',
        )
    if turn.light_after != "on":
        raise DemoError(
            "Home Assistant's intents", f'the light is {turn.light_after} after "{turn.reply}"'
        )


async def run_turns(ctx: TurnContext, requests: tuple[Request, ...]) -> AsyncIterator[Turn]:
    """Each request in order; a follow-up continues the previous request's conversation."""
    previous: str | None = None
    for number, request in enumerate(requests, 1):
        turn = await run_turn(ctx, number, request, previous if request.continues else None)
        previous = turn.conversation_id
        yield turn


async def _state_of(ha: HomeAssistantClient, entity_id: str) -> str:
    state = await ha.request("GET", f"/api/states/{entity_id}")
    return str(state.get("state"))


async def _light_after(ctx: TurnContext, expect_on: bool) -> str:
    """The light's state once HA has applied the command (a template light follows its helper)."""
    deadline = time.monotonic() + (LIGHT_WAIT_S if expect_on else 0)
    while (state := await _state_of(ctx.ha, ctx.setup.light_entity)) != "on":
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.2)
    return state


async def _speak(
    ctx: TurnContext, number: int, request: Request, pcm: bytes, conversation_id: str | None
) -> AssistRun:
    log(f'{number}. speaking "{request.text}" into the pipeline (real time, 20 ms chunks)')
    try:
        run = await run_utterance(
            ctx.ha, ctx.setup.pipeline_id, pcm, conversation_id=conversation_id
        )
    except AssistError as err:
        raise DemoError(service_for(err.code), str(err)) from err
    if run.reply_type == "error":  # the agent answered with its error sentence
        raise DemoError(AGENT_SERVICE, run.reply)
    return run


async def _agent_figures(
    ctx: TurnContext, began: datetime
) -> tuple[observe.AgentTimings | None, int | None]:
    agent = await observe.agent_timings(
        ctx.ha, ctx.setup.voice_stack_entry, ctx.setup.agent.subentry_id
    )
    if agent is not None and agent.received_at < began:
        agent = None  # the previous reply's
    slots = await observe.llama_slots(ctx.llama_url, ctx.llama_key)
    return agent, observe.last_used_slot(slots)


async def clear_tts_cache(ha: HomeAssistantClient) -> None:
    """Empty HA's TTS cache (its `tts.clear_cache` action): HA serves a reply it has spoken
    before from memory, which would time the cache instead of the TTS server (and a second
    demo run, speaking the same replies, would synthesize nothing)."""
    await ha.request("POST", "/api/services/tts/clear_cache", json={})


async def run_turn(
    ctx: TurnContext, number: int, request: Request, conversation_id: str | None
) -> Turn:
    """Synthesize, speak, then read back the light, the agent's timings and the reply audio."""
    pcm = await audio.synthesize_request(ctx.speech_url, request.text, ctx.speech_log)
    audio.write_wav(ctx.output / f"request-{number}.wav", pcm)
    await clear_tts_cache(ctx.ha)  # what a user gets: the gateway's TTS, not HA's memory
    is_command = request.kind == "command"
    light_before = await _state_of(ctx.ha, ctx.setup.light_entity) if is_command else None
    began = datetime.now(UTC)
    run = await _speak(ctx, number, request, pcm, conversation_id)
    local = bool(run.processed_locally)
    agent, slot_used = (None, None) if local else await _agent_figures(ctx, began)
    expect_on = local or ctx.agent_controls_devices
    light_after = await _light_after(ctx, expect_on) if is_command else None
    wav = ctx.output / f"reply-{number}.wav"
    reply_s = await audio.to_wav(ctx.ffmpeg, run.audio, wav) if run.audio else 0.0
    return Turn(
        number=number,
        kind=request.kind,
        text=request.text,
        speech_s=len(pcm) / 2 / audio.RATE,
        transcript=run.transcript,
        reply=" ".join(run.reply.split()),
        answered_locally=local,
        engine=run.engine,
        conversation_id=run.conversation_id,
        slot_used=slot_used,
        agent=agent,
        timings=run.timings,
        light_before=light_before,
        light_after=light_after,
        reply_wav=str(wav) if run.audio else "",
        reply_audio_s=reply_s,
    )
