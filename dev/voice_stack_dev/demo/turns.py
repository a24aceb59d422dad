"""The spoken requests: a command HA's own intents handle, a question for our agent, and a
follow-up in the same conversation, where the slot's prompt cache shows; their speech
(synthesized by the local speech server) and the WAV files people hear.
"""

from __future__ import annotations

import asyncio
import time
import wave
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from ..assist import AssistError, AssistRun, run_utterance, trim_silence
from ..assist_timings import AssistTimings
from ..ha_client import HomeAssistantClient
from . import observe
from .provision import Setup
from .services import DemoError, log

# The requests' speech (synthesized by the local speech server) and the WAV files people hear.
RATE = 16000
TIMEOUT = aiohttp.ClientTimeout(total=60, connect=5)


async def synthesize_request(speech_url: str, text: str, log_path: str) -> bytes:
    """16 kHz 16-bit mono PCM of `text`, from the speech server's OpenAI /v1/audio/speech;
    speech only (the assist runner adds the silence a person leaves around it)."""
    body = {"model": "piper-joe", "voice": "joe", "input": text,
            "response_format": "pcm", "sample_rate": RATE}  # fmt: skip
    try:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as session,
            session.post(f"{speech_url}/v1/audio/speech", json=body) as resp,
        ):
            if resp.status != 200:
                detail = (await resp.text())[:200]
                raise DemoError(
                    "speech server", f"synthesis HTTP {resp.status}: {detail}", log_path
                )
            pcm = await resp.read()
    except (aiohttp.ClientError, TimeoutError) as err:
        raise DemoError("speech server", f"synthesis failed: {err!r}", log_path) from err
    return trim_silence(pcm)


def write_wav(path: Path, pcm: bytes, rate: int = RATE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm)


async def to_wav(ffmpeg: str, audio: bytes, path: Path) -> float:
    """Decode HA's reply audio (mp3 by default) into a WAV file; returns its duration in s."""
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-i", "pipe:0",
        "-ac", "1", "-f", "wav", str(path),
        stdin=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        _out, err = await asyncio.wait_for(proc.communicate(audio), 60)
    except TimeoutError as exc:
        proc.kill()
        raise DemoError("ffmpeg", "decoding the reply audio took over 60 s") from exc
    if proc.returncode != 0:
        raise DemoError("ffmpeg", f"could not decode the reply audio: {err.decode()[:200]}")
    with wave.open(str(path), "rb") as wav:
        return wav.getnframes() / float(wav.getframerate())


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
    pcm = await synthesize_request(ctx.speech_url, request.text, ctx.speech_log)
    write_wav(ctx.output / f"request-{number}.wav", pcm)
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
    reply_s = await to_wav(ctx.ffmpeg, run.audio, wav) if run.audio else 0.0
    return Turn(
        number=number,
        kind=request.kind,
        text=request.text,
        speech_s=len(pcm) / 2 / RATE,
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
