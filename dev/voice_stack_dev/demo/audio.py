"""The requests' speech (synthesized by the local speech server) and the WAV files people hear."""

from __future__ import annotations

import asyncio
import wave
from pathlib import Path

import aiohttp

from ..assist import trim_silence
from .errors import DemoError

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
