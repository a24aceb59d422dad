"""transcription.py: a backend request in the background, replayed to whoever answers."""

from __future__ import annotations

import asyncio

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_gateway.audio import PcmFormat
from voice_stack_gateway.errors import GatewayError
from voice_stack_gateway.metrics import BackendState
from voice_stack_gateway.stt.transcription import Transcription
from voice_stack_gateway.stt.upload import WavUpload
from voice_stack_gateway.upstream import Backend, Timeouts

from .conftest import wait_for


def request(fake: FakeSpeech, stream: bool) -> tuple[Backend, bytes, str]:
    backend = Backend("ASR", fake.url, "", Timeouts(1, 1, 5), BackendState(fake.url))
    upload = WavUpload(PcmFormat(16000, 2, 1))
    upload.append(b"\0\0" * 1600)
    fields = {"model": "m", "response_format": "json"} | ({"stream": "true"} if stream else {})
    return backend, upload.snapshot(fields), upload.content_type


async def items(t: Transcription) -> list[tuple[str, str]]:
    return [item async for item in t.results()]


async def test_results_are_replayed_to_every_reader(fake_speech: FakeSpeech) -> None:
    backend, body, content_type = request(fake_speech, stream=True)
    t = Transcription(backend, body, content_type, True, "stt test")
    first, second = await asyncio.gather(items(t), items(t))  # one while it runs, one after
    assert first == second == [("delta", "hello"), ("delta", " world"), ("done", "hello world")]
    assert await t.succeeded()
    assert await items(t) == first
    await backend.close()


async def test_failure_and_cancellation(fake_speech: FakeSpeech) -> None:
    backend, body, content_type = request(fake_speech, stream=False)
    fake_speech.mode = "status500"
    t = Transcription(backend, body, content_type, False, "stt test")
    assert not await t.succeeded()
    assert isinstance(t.error, GatewayError)
    assert t.error.code == "backend-error"
    fake_speech.mode = "hang"
    t = Transcription(backend, body, content_type, False, "stt test")
    await wait_for(lambda: bool(fake_speech.requests[1:]))
    await t.close()
    assert t.done
    await wait_for(lambda: fake_speech.cancelled == 1)
    await backend.close()
