"""One measured spoken request through one stack's pipeline (the demo's assist runner: 20 ms
chunks in real time, then silence as `HOLDS` says), with what llama-server saw (the slot,
the prompt tokens it had to process) and Home Assistant's chat log (the floor replays it)."""

from __future__ import annotations

from dataclasses import dataclass

from voice_stack_dev.assist import AssistError, AssistRun, Pacing, run_utterance
from voice_stack_dev.assist_timings import AssistTimings
from voice_stack_dev.demo.services import DemoError
from voice_stack_dev.demo.turns import clear_tts_cache
from voice_stack_dev.ha_client import HomeAssistantApiError, HomeAssistantClient

from .probes import LlamaProbe
from .slot_tasks import max_task, task_spans
from .stacks import MAX_TOKENS, Pipeline
from .summary import SPEECH_TO_TRANSCRIPT, TOTAL, Figures

PACING = Pacing()
# How the silence after the speech ends (`--hold`). "ha": as a satellite streams, until HA's
# own VAD ends the utterance (stt-vad-end) or the transcript is in (stt-end); HA's 0.7 s setting
# ends about 1.0-1.35 s after the last word (microVAD's score lags), so 3 s is never reached.
# "fixed": 0.7 s of silence, then the end of the audio (the bench's model until 2026-12-02).
HOLDS = {"ha": Pacing(trail_silence_s=3.0), "fixed": PACING}
# Spoken questions for the agent, each with a follow-up in the same conversation.
QUESTIONS = (
    ("What is the capital of France?", "And what is the capital of Germany?"),
    ("How many legs does a spider have?", "And how many legs does an ant have?"),
    ("Who wrote Romeo and Juliet?", "And who wrote Hamlet?"),
    ("What is the largest planet in the solar system?", "And what is the smallest planet?"),
    ("What color is the sky on a clear day?", "And what color is grass?"),
    ("How many days are there in a week?", "And how many months are there in a year?"),
    ("What is the boiling point of water?", "And what is its freezing point?"),
    ("Who painted the Mona Lisa?", "And who painted the Starry Night?"),
    ("What is the tallest mountain in the world?", "And what is the longest river?"),
    ("How many continents are there?", "And how many oceans are there?"),
    ("What language is spoken in Brazil?", "And what language is spoken in Mexico?"),
    ("What is the chemical symbol for gold?", "And what is the symbol for silver?"),
)

SAMPLE_BYTES_PER_S = 16000 * 2

type Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Utterance:
    """A spoken request: its text and its speech (16 kHz 16-bit mono, speech only)."""

    text: str
    pcm: bytes

    @property
    def as_sent(self) -> bytes:
        """The audio HA passes to STT: the runner's lead-in, the speech, the trailing silence."""
        lead = bytes(int(PACING.lead_silence_s * SAMPLE_BYTES_PER_S) // 2 * 2)
        trail = bytes(int(PACING.trail_silence_s * SAMPLE_BYTES_PER_S) // 2 * 2)
        return lead + self.pcm + trail


@dataclass(frozen=True)
class Turn:
    """What one request got, and what its floor needs."""

    stack: str
    kind: str  # "new" | "follow_up"
    utterance: Utterance
    run: AssistRun
    slot: int | None  # llama-server's /slots: the slot of the agent's task
    prompt_tokens: float | None  # prompt tokens llama-server processed (none came from a cache)
    chat: Messages  # HA's chat log up to the new user text (the reply left out)

    @property
    def timings(self) -> AssistTimings:
        return self.run.timings

    @property
    def ended_by_gateway(self) -> bool:
        """The transcript came before audio-stop: the gateway ended the turn at the pause."""
        return self.timings.audio_stop_by == "transcript"

    def parts(self) -> Figures:
        """The parts, adding up to the total. A turn the gateway ended has no audio-stop to
        wait for: its hold is end of speech -> transcript and its STT wait 0 (assist_timings)."""
        t = self.timings
        hold, wait = t.silence_hold_ms, t.stt_wait_ms
        figures = {
            TOTAL: t.to_first_audio_ms,
            "silence_hold_ms": hold,
            "stt_wait_ms": wait,
            "agent_first_token_ms": t.agent_first_token_ms,
            "first_sentence_ms": t.first_sentence_ms,
            "tts_first_byte_ms": t.tts_first_byte_ms,
            SPEECH_TO_TRANSCRIPT: None if hold is None or wait is None else hold + wait,
        }
        return {k: None if v is None else round(v, 1) for k, v in figures.items()}


async def speak(
    ha: HomeAssistantClient,
    pipeline: Pipeline,
    pcm: bytes,
    conversation_id: str | None,
    pacing: Pacing = PACING,
) -> AssistRun:
    """One run, or a DemoError naming the stack and HA's error code."""
    try:
        run = await run_utterance(
            ha, pipeline.pipeline_id, pcm, conversation_id=conversation_id, pacing=pacing
        )
    except AssistError as err:
        raise DemoError(f"{pipeline.name} pipeline", str(err)) from err
    if run.reply_type == "error":  # the agent answered with its error sentence
        raise DemoError(f"{pipeline.name} agent ({pipeline.agent})", run.reply)
    if run.timings.to_first_audio_ms is None:
        raise DemoError(f"{pipeline.name} pipeline", "no reply audio arrived")
    return run


async def chat_log(ha: HomeAssistantClient, conversation_id: str) -> Messages:
    """The conversation's chat log as HA keeps it (the frontend's debug view reads it).

    HA ends the subscription itself when it drops the chat log (5 minutes after its last use).
    """
    async with ha.subscribe(
        "conversation/chat_log/subscribe", conversation_id=conversation_id
    ) as sub:
        ack = await sub.next(30)
        if not ack.get("success", False):
            raise HomeAssistantApiError("conversation/chat_log/subscribe", str(ack.get("error")))
        event = await sub.next(30)
    content = (event.get("event") or {}).get("data", {}).get("content") or []
    return [
        {"role": str(c["role"]), "content": str(c.get("content") or "")}
        for c in content
        if c.get("role") in ("system", "user", "assistant")
    ]


async def measure_turn(
    ha: HomeAssistantClient,
    probe: LlamaProbe,
    pipeline: Pipeline,
    utterance: Utterance,
    *,
    kind: str = "new",
    conversation_id: str | None = None,
    pacing: Pacing = PACING,
) -> Turn:
    """Speak, then read the slot, the processed prompt tokens and the chat log."""
    await clear_tts_cache(ha)
    before = await probe.sample()
    tokens_before = await probe.prompt_tokens()
    run = await speak(ha, pipeline, utterance.pcm, conversation_id, pacing)
    after = await probe.sample()
    tokens_after = await probe.prompt_tokens()
    spans = task_spans([after], max_task(before.slots), MAX_TOKENS)
    processed = (
        tokens_after - tokens_before
        if tokens_after is not None and tokens_before is not None
        else None
    )
    if run.conversation_id is None:
        raise DemoError(f"{pipeline.name} pipeline", "the reply named no conversation")
    chat = await chat_log(ha, run.conversation_id)
    if chat and chat[-1]["role"] == "assistant":
        chat = chat[:-1]
    return Turn(
        stack=pipeline.name,
        kind=kind,
        utterance=utterance,
        run=run,
        slot=spans[-1].slot if spans else None,
        prompt_tokens=processed,
        chat=chat,
    )
