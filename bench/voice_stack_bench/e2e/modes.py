"""Phase 1 in one ASR mode: the speech server switched, a warm-up on both stacks, every
conversation on both stacks in turn, the floor of every request, and the mode's figures.

The goals of issue 22, end of speech -> first reply audio against stock (median, one run):
fast ASR (modelled, a GPU-class ASR) at most 0.6x; the real CPU whisper no worse than the two
runs before the gateway ended turns (0.73 and 0.82: the limit is the worse one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from voice_stack_dev.demo.services import Role

from .asr import asr_state, mode_facts, set_asr_mode
from .marks import event_offsets
from .phases import Bench, Texts, floors, log, phase_one
from .probes import early_counts, turn_end_counts
from .summary import TOTAL, Sample, single_requests
from .turns import Turn, Utterance, measure_turn

GOALS_VS_STOCK = {"fast": 0.6, "real": 0.82}


@dataclass(frozen=True)
class ModeRun:
    """What phase 1 runs in a mode."""

    mode: str
    delay_ms: float
    questions: Texts
    rounds: int
    warm_up: Utterance


def goal(mode: str, single: dict[str, Any]) -> dict[str, Any]:
    """Issue 22's goal for the mode, on the medians of all requests."""
    ratio = single["voice_stack_vs_stock"]["all"][TOTAL]["median"]
    limit = GOALS_VS_STOCK[mode]
    return {"first_audio_vs_stock": {"ratio": ratio, "limit": limit,
                                     "met": ratio is not None and ratio <= limit}}  # fmt: skip


def _counts_since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items()}


async def run_mode(bench: Bench, speech: dict[str, Utterance], run: ModeRun) -> dict[str, Any]:
    """Phase 1 and the floors with the speech server in `run.mode`; the mode's report."""
    speech_url, gateway = bench.servers.url(Role.SPEECH), bench.servers.url(Role.GATEWAY)
    log(
        f"ASR mode {run.mode}" + (f" (modelled: {run.delay_ms:g} ms)" if run.mode == "fast" else "")
    )
    state_before = await set_asr_mode(speech_url, run.mode, run.delay_ms)
    for pipeline in (bench.stacks.voice_stack, bench.stacks.stock):  # warm-up, not measured
        await measure_turn(bench.ha, bench.probe, pipeline, run.warm_up, pacing=bench.pacing)
    early_before, ends_before = await early_counts(gateway), await turn_end_counts(gateway)
    turns = await phase_one(bench, speech, run.questions, run.rounds)
    early, ends = await early_counts(gateway), await turn_end_counts(gateway)
    state_after = await asr_state(speech_url)
    log(f"measuring the floor of every request ({run.mode} ASR)")
    samples = await floors(bench, turns)
    single = single_requests(samples)
    return {
        "asr": mode_facts(run.mode, run.delay_ms, state_before, state_after),
        "single_requests": single,
        "goals": {**single.pop("goals"), "issue_22": goal(run.mode, single)},
        "gateway_early_transcription": _counts_since(early_before, early),
        "gateway_turn_end": _counts_since(ends_before, ends),
        "requests": [request_row(t, s) for t, s in zip(turns, samples, strict=True)],
    }


def request_row(turn: Turn, sample: Sample) -> dict[str, Any]:
    return {
        "stack": turn.stack,
        "kind": turn.kind,
        "said": turn.utterance.text,
        "heard": turn.run.transcript,
        "reply": turn.run.reply,
        "slot": turn.slot,
        "prompt_tokens_processed": turn.prompt_tokens,
        "ended_by_gateway": turn.ended_by_gateway,
        "parts": sample.parts,
        "after_transcript_ms": event_offsets(turn.run.events),
        "reply_chars": len(turn.run.reply),
        "floor": sample.floor,
    }
