"""Where a bench's transcripts come from (voice_stack_bench.asr_server): the request an ASR server
gets, its key only in a header and in a child's environment, never printed."""

from __future__ import annotations

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from voice_stack_bench.asr_server import KEY_ENV, AsrServer, asr_env, transcribe
from voice_stack_dev.speech_server import STT_MODEL

KEY = "sk-room-bench-secret"


async def _server(seen: list[dict[str, str]]) -> TestServer:
    async def transcriptions(request: web.Request) -> web.Response:
        form = await request.post()
        seen.append(
            {
                "path": request.path,
                "model": str(form["model"]),
                "language": str(form["language"]),
                "authorization": request.headers.get("Authorization", ""),
            }
        )
        return web.json_response({"text": "Turn on the kitchen light."})

    app = web.Application()
    app.router.add_post("/api/v1/audio/transcriptions", transcriptions)
    return TestServer(app)


async def test_a_server_of_your_own_gets_its_model_and_key() -> None:
    seen: list[dict[str, str]] = []
    async with await _server(seen) as server, aiohttp.ClientSession() as session:
        asr = AsrServer(str(server.make_url("/api/v1")), "Systran/faster-whisper-large-v3", KEY)
        text, ms = await transcribe(session, asr, bytes(3200))
    assert text == "Turn on the kitchen light."
    assert ms >= 0
    assert seen == [
        {
            "path": "/api/v1/audio/transcriptions",
            "model": "Systran/faster-whisper-large-v3",
            "language": "en",
            "authorization": f"Bearer {KEY}",
        }
    ]


async def test_the_speech_server_is_asked_without_a_key() -> None:
    seen: list[dict[str, str]] = []
    async with await _server(seen) as server, aiohttp.ClientSession() as session:
        asr = AsrServer.speech_server(str(server.make_url("/api")))
        await transcribe(session, asr, bytes(3200))
    assert asr.model == STT_MODEL
    assert seen[0]["model"] == STT_MODEL
    assert seen[0]["authorization"] == ""


def test_the_key_is_never_printed_and_reaches_a_child_by_environment() -> None:
    asr = AsrServer("http://gpu-box:8000/v1", "whisper-1", KEY)
    assert KEY not in repr(asr)
    assert KEY not in str(asr)
    assert asr_env(asr) == {KEY_ENV: KEY}
    assert asr_env(AsrServer("http://gpu-box:8000/v1")) == {}
