"""What the servers themselves say while the benchmark runs: llama-server's `/slots` (read with
its own key, straight, not through the proxy) and its prompt-token counter in `/metrics`, and
the gateway's early-transcription and end-of-turn counters."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import aiohttp

from voice_stack_dev.demo.observe import llama_slots

from .slot_tasks import SlotSample

TIMEOUT = aiohttp.ClientTimeout(total=10, connect=3)
POLL_S = 0.1
_PROMPT_TOKENS = re.compile(r"^llamacpp:prompt_tokens_total\s+([0-9.e+]+)$", re.MULTILINE)
_EARLY = re.compile(r'^gateway_stt_early_total\{result="(\w+)"\} ([0-9.e+]+)$', re.MULTILINE)
_TURN_END = re.compile(r'^gateway_stt_turn_end_total\{by="(\w+)"\} ([0-9.e+]+)$', re.MULTILINE)


async def _get_text(url: str, headers: dict[str, str] | None = None) -> str | None:
    try:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as session,
            session.get(url, headers=headers) as resp,
        ):
            return await resp.text() if resp.status == 200 else None
    except aiohttp.ClientError, TimeoutError:
        return None


async def early_counts(gateway_http_url: str) -> dict[str, int]:
    """The gateway's early transcriptions so far: hit, miss, wasted (empty if unknown)."""
    text = await _get_text(f"{gateway_http_url}/metrics") or ""
    return {result: int(float(n)) for result, n in _EARLY.findall(text)}


async def turn_end_counts(gateway_http_url: str) -> dict[str, int]:
    """Turns the gateway ended itself ("gateway") and left to HA's audio-stop ("client")."""
    text = await _get_text(f"{gateway_http_url}/metrics") or ""
    return {by: int(float(n)) for by, n in _TURN_END.findall(text)}


class LlamaProbe:
    """llama-server's own view of its slots, on its URL with its key."""

    def __init__(self, url: str, key: str) -> None:
        self.url = url
        self.key = key

    async def sample(self) -> SlotSample:
        return SlotSample(datetime.now(UTC), await llama_slots(self.url, self.key))

    async def prompt_tokens(self) -> float | None:
        """Prompt tokens processed so far (not served from a cache), or None if unknown."""
        text = await _get_text(f"{self.url}/metrics", {"Authorization": f"Bearer {self.key}"})
        match = _PROMPT_TOKENS.search(text or "")
        return float(match.group(1)) if match else None

    @contextlib.asynccontextmanager
    async def polling(self) -> AsyncIterator[list[SlotSample]]:
        """`/slots` every POLL_S while the block runs; the listings gathered."""
        samples: list[SlotSample] = []

        async def poll() -> None:
            while True:
                samples.append(await self.sample())
                await asyncio.sleep(POLL_S)

        task = asyncio.create_task(poll())
        try:
            yield samples
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            samples.append(await self.sample())
