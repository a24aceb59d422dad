"""Two satellites speaking at once into the same stack (two pipeline runs on one websocket,
each with its own audio handler, as two devices of one pipeline), with llama-server's
`/slots` polled meanwhile to see which slot took each request and when."""

from __future__ import annotations

import asyncio
from typing import Any

from voice_stack_dev.assist import AssistRun, Pacing
from voice_stack_dev.assist_timings import first_event, first_token_at
from voice_stack_dev.demo.turns import clear_tts_cache
from voice_stack_dev.ha_client import HomeAssistantClient

from .pairs import Satellite, pair_outcome
from .probes import LlamaProbe
from .slot_tasks import max_task, task_spans
from .stacks import MAX_TOKENS, Pipeline
from .turns import Utterance, speak


def _round(ms: float | None) -> float | None:
    return None if ms is None else round(ms, 1)


def satellite(run: AssistRun) -> Satellite:
    events = run.events
    start = first_event(events, "intent-start")
    end = first_event(events, "intent-end")
    return Satellite(
        intent_start=start.at if start else None,
        first_token=first_token_at(events),
        reply_end=end.at if end else None,
        ttft_ms=_round(run.timings.agent_first_token_ms),
        to_first_audio_ms=_round(run.timings.to_first_audio_ms),
        stt_wait_ms=_round(run.timings.stt_wait_ms),
        tts_first_byte_ms=_round(run.timings.tts_first_byte_ms),
    )


async def run_pair(
    ha: HomeAssistantClient,
    probe: LlamaProbe,
    pipeline: Pipeline,
    pair: tuple[Utterance, Utterance],
    pacing: Pacing,
) -> dict[str, Any]:
    """Both requests started together, each a new conversation; the pair's outcome."""
    await clear_tts_cache(ha)
    before = await probe.sample()
    try:
        async with probe.polling() as samples, asyncio.TaskGroup() as group:
            tasks = [group.create_task(speak(ha, pipeline, u.pcm, None, pacing)) for u in pair]
    except ExceptionGroup as errors:  # the first failure, as a plain error (the other is cancelled)
        raise errors.exceptions[0] from errors
    runs = [task.result() for task in tasks]
    spans = task_spans(samples, max_task(before.slots), MAX_TOKENS)
    outcome = pair_outcome([satellite(run) for run in runs], spans)
    outcome["heard"] = [run.transcript for run in runs]
    return outcome
