"""A fake OpenAI-compatible speech server for faults the real engines cannot produce.

`mode` picks the behaviour of the next requests: ok, status500, hang, slow_first_byte, cut,
garbage_wav, wrong_type, float_wav, wav22k, bad_json, no_text, sse_garbage, sse.
"""

from __future__ import annotations

import asyncio
import json
import math
import struct
from typing import Any

from aiohttp import web

from voice_stack_dev.procs import free_port

RATE = 24000


def tone(seconds: float, rate: int = RATE) -> bytes:
    n = int(seconds * rate)
    return struct.pack(f"<{n}h", *(int(8000 * math.sin(i / 8)) for i in range(n)))


def wav_header(rate: int, bits: int, tag: int, size: int) -> bytes:
    align = bits // 8
    return (
        b"RIFF"
        + struct.pack("<I", 36 + size)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, tag, 1, rate, rate * align, align, bits)
        + b"data"
        + struct.pack("<I", size)
    )


class FakeBackend:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.mode = "ok"
        self.requests: list[dict[str, Any]] = []
        self.cancelled = 0
        self.auth: list[str] = []
        self.delay = 0.0  # seconds before the first byte
        self.healthy = True
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/audio/voices", self._voices)
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, _r: web.Request) -> web.Response:
        return web.json_response({"status": "ok"}, status=200 if self.healthy else 503)

    async def _models(self, _r: web.Request) -> web.Response:
        return web.json_response(
            {
                "data": [
                    {"id": "whisper-fake"},
                    {"id": "tts-fake"},
                    {"id": "kokoro"},
                    {"id": "other-thing"},
                ]
            }
        )

    async def _voices(self, _r: web.Request) -> web.Response:
        return web.json_response({"voices": ["af_heart", "en_GB-alan-medium", {"id": "v3"}]})

    async def _hang(self, request: web.Request) -> web.Response:
        """Never answer; count the request as cancelled when the client hangs up."""
        try:
            while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        finally:  # aiohttp may cancel the handler itself when the peer goes away
            self.cancelled += 1
        return web.Response(status=499)

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.auth.append(request.headers.get("Authorization", ""))
        return await self._speech_reply(request, self.mode, body)

    async def _speech_reply(
        self, request: web.Request, mode: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        if mode == "status500":
            return web.json_response({"error": {"message": "engine exploded"}}, status=500)
        if mode == "status404":
            return web.json_response({"detail": "voice not found"}, status=404)
        if mode == "hang":
            return await self._hang(request)
        await asyncio.sleep(self.delay)
        if mode == "wrong_type":
            return web.Response(text="<html>oops</html>", content_type="text/html")
        content_type = (
            "audio/wav" if mode in ("garbage_wav", "float_wav", "wav22k") else "audio/pcm"
        )
        resp = web.StreamResponse(headers={"Content-Type": content_type})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if mode == "garbage_wav":
            await resp.write(b"\x13\x37" * 200)
        elif mode == "float_wav":
            samples = [0.5, -0.5, 2.0] * 1000
            data = struct.pack(f"<{len(samples)}f", *samples)
            await resp.write(
                wav_header(RATE, 32, 3, len(data)) + data + b"LIST\x04\x00\x00\x00junk"
            )
        elif mode == "wav22k":
            data = tone(0.2, 22050)
            await resp.write(wav_header(22050, 16, 1, len(data)))
            await resp.write(data)
        else:
            words = max(1, len(str(body.get("input", "")).split()))
            await resp.write(tone(0.05 * words)[:4801])  # odd length: a split sample
            await asyncio.sleep(0.01)
            if mode == "cut":
                assert request.transport is not None
                request.transport.close()
                return resp
            if mode == "stall":
                await asyncio.sleep(3600)
            await resp.write(tone(0.05 * words)[1:])
        await resp.write_eof()
        return resp

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form["file"]
        assert isinstance(upload, web.FileField)
        audio = upload.file.read()
        self.requests.append({k: v for k, v in form.items() if k != "file"} | {"bytes": len(audio)})
        mode = self.mode
        if mode == "status500":
            return web.Response(text="Internal Server Error", status=500)
        if mode == "hang":
            return await self._hang(request)
        await asyncio.sleep(self.delay)
        if mode == "bad_json":
            return web.Response(text="this is not json", content_type="application/json")
        if mode == "no_text":
            return web.json_response({"segments": []})
        if form.get("stream") == "true":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            if mode == "sse_garbage":
                await resp.write(b"data: {not json\n\n")
            else:
                for word in ("hello", " world"):
                    event = {"type": "transcript.text.delta", "delta": word}
                    await resp.write(f"data: {json.dumps(event)}\n\n".encode())
                if mode != "sse_no_done":
                    done = {"type": "transcript.text.done", "text": ""}
                    await resp.write(f"event: x\ndata: {json.dumps(done)}\n\n".encode())
            await resp.write_eof()
            return resp
        return web.json_response({"text": f" heard {len(audio)} bytes "})
