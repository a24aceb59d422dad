"""transcription.py: a backend request in the background, replayed to whoever answers."""

from __future__ import annotations

import asyncio

import pytest

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_gateway.audio import PcmFormat
from voice_stack_gateway.errors import GatewayError
from voice_stack_gateway.metrics import BackendState
from voice_stack_gateway.stt.transcription import Request, Transcription
from voice_stack_gateway.stt.upload import WavUpload
from voice_stack_gateway.upstream import Backend, Timeouts

from .conftest import wait_for


def upload() -> WavUpload:
    upload = WavUpload(PcmFormat(16000, 2, 1))
    upload.append(b"\0\0" * 1600)
    return upload


def backend(fake: FakeSpeech) -> Backend:
    return Backend("ASR", fake.url, "", Timeouts(1, 1, 5), BackendState(fake.url))


def request(fake: FakeSpeech, stream: bool) -> tuple[Backend, Request]:
    audio = upload()
    fields = {"model": "m", "response_format": "json"} | ({"stream": "true"} if stream else {})
    return backend(fake), Request(audio.snapshot(fields), audio.content_type, stream)


def verbose(fake: FakeSpeech, refused: list[str]) -> tuple[Backend, Request]:
    """An early request: verbose_json, the same audio as plain json if that is refused."""
    audio = upload()
    asked, plain = (
        audio.snapshot({"model": "m", "response_format": f}) for f in ("verbose_json", "json")
    )
    return backend(fake), Request(
        asked, audio.content_type, False, plain, lambda: refused.append("m")
    )


async def items(t: Transcription) -> list[tuple[str, str]]:
    return [item async for item in t.results()]


async def test_results_are_replayed_to_every_reader(fake_speech: FakeSpeech) -> None:
    backend, req = request(fake_speech, stream=True)
    t = Transcription(backend, req, "stt test")
    first, second = await asyncio.gather(items(t), items(t))  # one while it runs, one after
    assert first == second == [("delta", "hello"), ("delta", " world"), ("done", "hello world")]
    assert await t.succeeded()
    assert await items(t) == first
    await backend.close()


async def test_failure_and_cancellation(fake_speech: FakeSpeech) -> None:
    backend, req = request(fake_speech, stream=False)
    fake_speech.mode = "status500"
    t = Transcription(backend, req, "stt test")
    assert not await t.succeeded()
    assert isinstance(t.error, GatewayError)
    assert t.error.code == "backend-error"
    fake_speech.mode = "hang"
    t = Transcription(backend, req, "stt test")
    await wait_for(lambda: bool(fake_speech.requests[1:]))
    await t.close()
    assert t.done
    await wait_for(lambda: fake_speech.cancelled == 1)
    await backend.close()


async def test_verbose_json_gives_the_confidence(fake_speech: FakeSpeech) -> None:
    refused: list[str] = []
    backend, req = verbose(fake_speech, refused)
    fake_speech.logprob = -0.75
    t = Transcription(backend, req, "stt test")
    assert await t.succeeded()
    assert (t.text, t.confidence, refused) == (" heard 3244 bytes ", -0.75, [])
    assert [r["response_format"] for r in fake_speech.requests] == ["verbose_json"]
    await backend.close()


async def test_a_refused_format_is_asked_again_as_plain_json(fake_speech: FakeSpeech) -> None:
    refused: list[str] = []
    backend, req = verbose(fake_speech, refused)
    fake_speech.mode = "no_verbose"
    t = Transcription(backend, req, "stt test")
    assert await t.succeeded()
    assert (t.text, t.confidence, refused) == (" heard 3244 bytes ", None, ["m"])
    assert [r["response_format"] for r in fake_speech.requests] == ["verbose_json", "json"]
    await backend.close()


@pytest.mark.parametrize(("modes", "asked"), [(["status500"], 1), (["status404", "status404"], 2)])
async def test_only_a_refusal_is_asked_again(
    fake_speech: FakeSpeech, modes: list[str], asked: int
) -> None:
    """A 5xx may have run upstream: no second request. A 4xx did not: the plain one is asked,
    and when that is refused too its error is the answer and nothing is learned."""
    refused: list[str] = []
    backend, req = verbose(fake_speech, refused)
    fake_speech.stt_modes = modes
    t = Transcription(backend, req, "stt test")
    assert not await t.succeeded()
    assert isinstance(t.error, GatewayError)
    assert (len(fake_speech.requests), refused) == (asked, [])
    await backend.close()
