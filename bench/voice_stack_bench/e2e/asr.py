"""The speech server's ASR mode as the benchmark drives it (see speech_asr): `real` is the CPU
whisper; `fast` is modelled, whisper's own transcript of the same speech after a fixed delay.
Both stacks use the one speech server, so they always run in the same mode."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import aiohttp

from voice_stack_dev.demo.services import DemoError
from voice_stack_dev.speech_asr import HOW, speech_key

from .floor import TIMEOUT, asr_ms

SPEECH = "speech server"


async def asr_state(speech_url: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.get(f"{speech_url}/dev/asr") as resp,
    ):
        if resp.status != 200:
            raise DemoError(SPEECH, f"GET /dev/asr answered {resp.status}")
        state: dict[str, Any] = await resp.json()
        return state


async def set_asr_mode(speech_url: str, mode: str, delay_ms: float) -> dict[str, Any]:
    """Switch the speech server's ASR; its state after the switch."""
    body = {"mode": mode, "delay_ms": delay_ms}
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.put(f"{speech_url}/dev/asr", json=body) as resp,
    ):
        if resp.status != 200:
            raise DemoError(SPEECH, f"PUT /dev/asr {body}: {resp.status} {await resp.text()}")
        state: dict[str, Any] = await resp.json()
        return state


async def prime(speech_url: str, utterances: Iterable[bytes]) -> int:
    """Whisper transcribes each utterance once as the stack will send it (16 kHz PCM; the
    speech server in real mode): fast mode answers with these transcripts. An utterance whose
    speech (exact zeros trimmed, the memo's key) was sent before is skipped, since the memo keeps
    the first transcript of a key; how many were transcribed."""
    sent: set[str] = set()
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        for pcm in utterances:
            key = speech_key(memoryview(pcm[: len(pcm) // 2 * 2]).cast("h"), None)
            if key not in sent:
                sent.add(key)
                await asr_ms(session, speech_url, pcm)
    return len(sent)


def mode_facts(
    mode: str, delay_ms: float, before: dict[str, Any], after: dict[str, Any]
) -> dict[str, Any]:
    """The JSON's statement of the mode: modelled or not, the delay, how the transcript is got,
    and how many uploads fast mode answered from whisper's earlier transcript."""
    if mode == "real":
        asr = "faster-whisper tiny.en int8 on this CPU, every upload transcribed"
        return {"mode": "real", "modelled": False, "asr": asr}
    return {
        "mode": "fast",
        "modelled": True,
        "delay_ms": delay_ms,
        "transcript": HOW,
        "answered_from_whisper_transcript": after["hits"] - before["hits"],
        "misses_transcribed_by_whisper": after["misses"] - before["misses"],
    }
