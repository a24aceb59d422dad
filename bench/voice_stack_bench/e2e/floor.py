"""The floor: the backends' own times for the work of one spoken request, measured straight
against the servers while nothing else runs (no queueing, no Home Assistant, no gateway).

    floor = HA's end of speech -> audio-stop of that request (the ~0.7 s of silence HA's VAD
            waits for; no stack can shorten it)
          + the speech server transcribing the utterance as HA sent it (lead-in, speech, the
            silence before audio-stop), from the upload to the transcript
          + llama-server from the request to the end of the first sentence it streams, on an
            idle slot that already holds everything of the prompt but the new part
          + the speech server's first audio byte for the reply's first sentence

The prompt is the request's own chat log as HA kept it. Its new part is what no cache can hold:
the new user message and the current-time line HA writes into the system text on every turn;
so the floor's prompt carries that line at the front of the new message (the least a warm slot
must process), and the slot is primed with the rest (a request with max_tokens 0).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from voice_stack_dev.speech_server import TTS_MODEL, VOICE

from ..asr_server import AsrServer, transcribe

TIMEOUT = aiohttp.ClientTimeout(total=120, connect=5)
TIME_LINE = "Current time is "
# A sentence ends at . ! or ? followed by a space, or ending the text so far unless after a
# digit (a streamed "3." may go on as 3.5).
_SENTENCE_END = re.compile(r"[.!?](?=\s)|(?<!\d)[.!?]$")

type Messages = list[dict[str, str]]


def split_new_part(chat: Messages) -> tuple[Messages, Messages]:
    """(what a warm slot holds, the request) for a chat log that ends with the new user text."""
    system, *history = chat
    lines = system["content"].split("\n")
    volatile = [line for line in lines if line.startswith(TIME_LINE)]
    stable = "\n".join(line for line in lines if not line.startswith(TIME_LINE)).rstrip("\n")
    cached = [{"role": "system", "content": stable}, *history[:-1]]
    last = history[-1]["content"]
    new = "\n".join([*volatile, "", last]) if volatile else last
    return cached, [*cached, {"role": "user", "content": new}]


def first_sentence(text: str) -> str:
    """The text up to the end of its first sentence (all of it when none ends)."""
    match = _SENTENCE_END.search(text)
    return text[: match.end()] if match else text


@dataclass(frozen=True)
class FloorTarget:
    """Where the floor is measured: the servers themselves, and the agents' sampling."""

    speech_url: str
    llama_url: str
    llama_key: str
    slot: int  # an idle slot no agent uses
    temperature: float
    max_tokens: int


async def asr_ms(session: aiohttp.ClientSession, speech_url: str, pcm: bytes) -> float:
    """The speech server's own time to transcribe 16 kHz PCM (uploaded as WAV)."""
    return (await transcribe(session, AsrServer.speech_server(speech_url), pcm))[1]


async def tts_first_byte_ms(
    session: aiohttp.ClientSession, target: FloorTarget, text: str
) -> float:
    """The speech server's own time to the first audio byte of `text`."""
    body = {"model": TTS_MODEL, "voice": VOICE, "input": text, "response_format": "pcm"}
    started = time.monotonic()
    async with session.post(f"{target.speech_url}/v1/audio/speech", json=body) as resp:
        resp.raise_for_status()
        await resp.content.readany()
        first = time.monotonic()
        await resp.read()
    return (first - started) * 1000


async def _chat(
    session: aiohttp.ClientSession, target: FloorTarget, messages: Messages, max_tokens: int
) -> aiohttp.ClientResponse:
    body: dict[str, Any] = {
        "messages": messages,
        "id_slot": target.slot,
        "cache_prompt": True,
        "temperature": target.temperature,
        "max_tokens": max_tokens,
        "stream": max_tokens > 0,
    }
    headers = {"Authorization": f"Bearer {target.llama_key}"}
    resp = await session.post(f"{target.llama_url}/v1/chat/completions", json=body, headers=headers)
    resp.raise_for_status()
    return resp


async def llm_first_sentence_ms(
    session: aiohttp.ClientSession, target: FloorTarget, chat: Messages
) -> tuple[float, str]:
    """llama-server's own time to the first sentence of the reply, on a primed idle slot."""
    cached, request = split_new_part(chat)
    async with await _chat(session, target, cached, 0) as primed:
        await primed.read()
    text = ""
    started = time.monotonic()
    async with await _chat(session, target, request, target.max_tokens) as resp:
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[5:]).get("choices") or []:
                text += (choice.get("delta") or {}).get("content") or ""
            if _SENTENCE_END.search(text):
                return (time.monotonic() - started) * 1000, first_sentence(text).strip()
    return (time.monotonic() - started) * 1000, text.strip()


async def measure(
    target: FloorTarget, utterance: bytes, chat: Messages, reply: str
) -> dict[str, float]:
    """The floor's three server parts for one request (its silence hold is the request's)."""
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        asr = await asr_ms(session, target.speech_url, utterance)
        llm, sentence = await llm_first_sentence_ms(session, target, chat)
        tts = await tts_first_byte_ms(session, target, first_sentence(reply) or sentence)
    return {"asr_ms": round(asr, 1), "llm_first_sentence_ms": round(llm, 1),
            "tts_first_byte_ms": round(tts, 1)}  # fmt: skip
