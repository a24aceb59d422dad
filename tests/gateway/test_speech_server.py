"""voice_stack_dev.speech_server: the real piper + faster-whisper server the suites run against."""

from __future__ import annotations

import asyncio

import aiohttp

from voice_stack_dev.procs import Service

TEXT = "This is the first sentence. Here is a second one. And a third follows."


async def _speak(session: aiohttp.ClientSession, url: str) -> int:
    body = {"model": "piper-joe", "voice": "joe", "input": TEXT, "response_format": "pcm"}
    async with session.post(f"{url}/v1/audio/speech", json=body) as resp:
        assert resp.status == 200
        return len(await resp.read())


async def test_more_concurrent_syntheses_than_worker_threads_all_finish(
    speech_server: Service,
) -> None:
    # Two gateway sessions fetch four sentences ahead each: eight requests at once, more than
    # the server's six executor threads (which a lock held across sentences once starved).
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        sizes = await asyncio.gather(*(_speak(session, speech_server.url) for _ in range(8)))
    assert len(set(sizes)) == 1  # the same text gives the same audio, whoever waited
    assert sizes[0] > 24000 * 2  # over a second of 24 kHz audio
