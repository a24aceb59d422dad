"""The benchmark's phases, on running servers and a set-up Home Assistant.

Phase 1: each question's conversation (the question, then its follow-up) on both stacks in
turn, three browser-like clients chatting before every request; then the floor of every request.
Phase 2: two satellites speaking at once, on our agent with one slot, then with a pool of two
(the proxy reserving both), and on stock.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from voice_stack_dev.assist import Pacing
from voice_stack_dev.demo.services import Role
from voice_stack_dev.demo.turns import synthesize_request
from voice_stack_dev.ha_client import HomeAssistantClient

from ..browser_chats import Result, browser_round
from . import floor
from .pairs import pairs_summary, two_satellites_goal
from .probes import LlamaProbe
from .satellites import run_pair
from .servers import Servers
from .stacks import MAX_TOKENS, PLAN, Pipeline, Stacks, give_pool
from .summary import FLOOR, Sample, floor_total
from .turns import PACING, Turn, Utterance, measure_turn

type Texts = Sequence[tuple[str, str]]

# Smaller than slots_bench's (1,500 and 470 tokens): the slots are still taken by other
# prompts, and the run stays within 15 minutes on two cores.
BROWSER_PARAGRAPHS = 8  # a ~250-token chat prompt
BROWSER_TITLE_WORDS = 10  # a ~110-token title prompt
FLOOR_SLOT = 3  # idle while the floor is measured; no agent's slot
POOL = (0, 1)


@dataclass
class Bench:
    """The running benchmark: HA, the stacks, llama-server's view, the browser load."""

    ha: HomeAssistantClient
    servers: Servers
    stacks: Stacks
    probe: LlamaProbe
    pacing: Pacing = PACING  # how the silence after each request's speech ends (turns.HOLDS)
    browser_turns: int = 0
    browser_chats: list[Result] = field(default_factory=list)
    browser_s: float = 0.0  # wall time the browser rounds took, between the measured requests

    async def browsers(self) -> None:
        """The three browser-like clients' chat turns (each with its title request)."""
        url = self.servers.url(Role.PROXY)
        headers = {"Authorization": f"Bearer {self.servers.state.proxy_key}"}
        began = time.monotonic()
        chats = await asyncio.to_thread(
            browser_round, url, headers, self.browser_turns, paragraphs=BROWSER_PARAGRAPHS,
            title_words=BROWSER_TITLE_WORDS, timeout=120.0,
        )  # fmt: skip
        self.browser_s += time.monotonic() - began
        self.browser_turns += 1
        self.browser_chats += chats

    def browser_figures(self) -> dict[str, Any]:
        chats = self.browser_chats
        if not chats:
            return {"chat_turns": 0}
        return {
            "rounds": self.browser_turns,
            "rounds_s": round(self.browser_s, 1),
            "chat_turns": len(chats),
            "chat_prompt_tokens_median": statistics.median(c.cache_n + c.prompt_n for c in chats),
            "chat_cache_reuse_pct_median": round(statistics.median(c.reuse for c in chats), 1),
            "chat_ttft_ms_median": round(statistics.median(c.ttft_ms for c in chats), 1),
        }


def log(message: str) -> None:
    print(f"[voice_e2e] {message}", file=sys.stderr, flush=True)


async def utterances(servers: Servers, texts: set[str]) -> dict[str, Utterance]:
    """Each request's speech, from the speech server's piper (as the demo makes it)."""
    speech, speech_log = servers.url(Role.SPEECH), str(servers.stack.log(Role.SPEECH))
    return {t: Utterance(t, await synthesize_request(speech, t, speech_log)) for t in sorted(texts)}


async def conversation(
    bench: Bench, pipeline: Pipeline, pair: tuple[str, str], speech: dict[str, Utterance]
) -> list[Turn]:
    """A question as a new conversation, then its follow-up in it; browsers chat before each."""
    turns: list[Turn] = []
    for kind, text in zip(("new", "follow_up"), pair, strict=True):
        await bench.browsers()
        turn = await measure_turn(
            bench.ha, bench.probe, pipeline, speech[text], kind=kind,
            conversation_id=turns[-1].run.conversation_id if turns else None, pacing=bench.pacing,
        )  # fmt: skip
        _log_turn(turn)
        turns.append(turn)
    return turns


async def phase_one(
    bench: Bench, speech: dict[str, Utterance], questions: Texts, rounds: int
) -> list[Turn]:
    """Each question's conversation on both stacks in turn (who goes first alternates).

    Conversation by conversation, not request by request: in between, the other stack's
    request would take the slot and the follow-up would not find its own turn there."""
    stacks, turns = bench.stacks, []
    for round_ in range(rounds):
        for i, pair in enumerate(questions):
            order = [stacks.voice_stack, stacks.stock]
            for pipeline in order if (round_ + i) % 2 == 0 else order[::-1]:
                turns += await conversation(bench, pipeline, pair, speech)
    return turns


def _log_turn(turn: Turn) -> None:
    log(
        f"{turn.stack:11} {turn.kind:9} {turn.run.transcript!r} -> {turn.run.reply[:40]!r} "
        f"slot {turn.slot}: {turn.timings.to_first_audio_ms:.0f} ms"
    )


async def floors(bench: Bench, turns: list[Turn]) -> list[Sample]:
    """Every request's floor, straight against the idle servers."""
    target = floor.FloorTarget(
        speech_url=bench.servers.url(Role.SPEECH),
        llama_url=bench.servers.url(Role.LLAMA),
        llama_key=bench.servers.state.llama_key,
        slot=FLOOR_SLOT,
        temperature=float(PLAN.agent_options()["temperature"]),
        max_tokens=MAX_TOKENS,
    )
    samples = []
    for turn in turns:
        # the serial floor keeps HA's own hold: audio-stop, even where the gateway ended earlier
        parts: dict[str, float | None] = {
            "silence_hold_ms": turn.timings.silence_hold_ms,
            **await floor.measure(target, turn.utterance.as_sent, turn.chat, turn.run.reply),
        }
        parts[FLOOR] = floor_total(parts)
        extra = {"slot": turn.slot, "prompt_tokens": turn.prompt_tokens,
                 "ended_by_gateway": float(turn.ended_by_gateway)}  # fmt: skip
        samples.append(Sample(turn.stack, turn.kind, turn.parts(), parts, extra))
    return samples


async def _pair(
    bench: Bench, pipeline: Pipeline, speech: dict[str, Utterance], texts: tuple[str, str]
) -> dict[str, Any]:
    await bench.browsers()
    pair = (speech[texts[0]], speech[texts[1]])
    outcome = await run_pair(bench.ha, bench.probe, pipeline, pair, bench.pacing)
    log(f"{pipeline.name} pair: {json.dumps([outcome['first'], outcome['second']])}")
    return outcome


async def phase_two(
    bench: Bench, speech: dict[str, Utterance], texts: Texts, n: int
) -> dict[str, Any]:
    """Two satellites at once: our agent on one slot, then on a pool of two; and stock."""
    ours, stock = bench.stacks.voice_stack, bench.stacks.stock
    one_slot = [await _pair(bench, ours, speech, texts[k % len(texts)]) for k in range(n)]
    log(f"giving our agent slots {POOL} (the proxy reserves them)")
    await asyncio.to_thread(bench.servers.reserve, POOL)
    await give_pool(bench.ha, bench.stacks, POOL)
    await _pair(bench, ours, speech, texts[-1])  # warm-up: both pool slots primed and used
    pool: list[dict[str, Any]] = []
    stock_runs: list[dict[str, Any]] = []
    for k in range(n):
        for pipeline in (ours, stock) if k % 2 == 0 else (stock, ours):
            runs = pool if pipeline is ours else stock_runs
            runs.append(await _pair(bench, pipeline, speech, texts[k % len(texts)]))
    pooled = pairs_summary(pool)
    return {
        "voice_stack_one_slot": pairs_summary(one_slot),
        "voice_stack_pool_0_1": pooled,
        "stock": pairs_summary(stock_runs),
        "goal": two_satellites_goal(pooled),
    }
