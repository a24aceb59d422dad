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


EARLY_PAUSE_MS = 300  # the gateway's STT_EARLY_PAUSE_MS: where its first request cuts
FIRST_WORDS_MS = 20  # an upload cut inside the first words: whisper's transcript of none of them


def prime_cuts_ms(spans_ms: Iterable[tuple[float, float]]) -> list[float]:
    """Where speech in a room is primed for fast mode's prefix match (speech_asr), in ms of the
    speech: its first sound + FIRST_WORDS_MS, then each part's end and EARLY_PAUSE_MS after it.
    An upload is answered with the longest of these it reaches: the gateway's early request
    (about 300 ms after the words), HA's audio-stop (about 1 s after)."""
    spans = list(spans_ms)
    ends = [end + pad for _start, end in spans for pad in (0, EARLY_PAUSE_MS)]
    return [spans[0][0] + FIRST_WORDS_MS, *ends]


async def set_asr_mode(speech_url: str, mode: str, delay_ms: float) -> dict[str, Any]:
    """Switch the speech server's ASR; its state after the switch."""
    return await configure_asr(speech_url, {"mode": mode, "delay_ms": delay_ms})


async def match_by_prefix(speech_url: str) -> dict[str, Any]:
    """The speech server's memo answers a fast-mode upload by the primed audio it begins with
    (speech in a room: no upload is ever the exact audio primed)."""
    return await configure_asr(speech_url, {"match": "prefix"})


async def configure_asr(speech_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """PUT /dev/asr: the speech server's state after the change."""
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
