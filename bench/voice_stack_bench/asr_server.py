"""Where a bench's transcripts come from: an OpenAI-compatible `/v1/audio/transcriptions`, the
speech server's by default, or your own (`room_bench.py --asr-server`: a GPU box's ASR, with its
model and bearer key)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import aiohttp

from voice_stack_dev.speech_server import STT_MODEL
from voice_stack_dev.wavs import wav

KEY_ENV = "STT_OPENAI_KEY"  # the gateway's and wyoming-openai's own name for the key


@dataclass(frozen=True)
class AsrServer:
    """An ASR server: its base URL (ending in /v1), the model asked for, its bearer key."""

    v1: str
    model: str = STT_MODEL
    key: str | None = field(default=None, repr=False)  # never printed

    @classmethod
    def speech_server(cls, speech_url: str) -> AsrServer:
        """The dev speech server at `speech_url` (no key)."""
        return cls(f"{speech_url}/v1")

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}


def asr_env(asr: AsrServer) -> dict[str, str]:
    """The environment that hands a gateway or wyoming-openai the server's key (not argv, which
    any local user can read)."""
    return {KEY_ENV: asr.key} if asr.key else {}


async def transcribe(
    session: aiohttp.ClientSession, asr: AsrServer, pcm: bytes
) -> tuple[str, float]:
    """The server's transcript of 16 kHz PCM (uploaded as WAV) and its time in ms."""
    form = aiohttp.FormData()
    form.add_field("file", wav(pcm, 16000), filename="audio.wav", content_type="audio/wav")
    form.add_field("model", asr.model)
    form.add_field("language", "en")
    started = time.monotonic()
    url = f"{asr.v1}/audio/transcriptions"
    async with session.post(url, data=form, headers=asr.headers()) as resp:
        resp.raise_for_status()
        text = str((await resp.json())["text"])
    return text, (time.monotonic() - started) * 1000
