"""Synthetic OpenAI-compatible speech backend for bench/gateway_bench.py.

TTS: first byte after 150 ms, then audio produced at 0.1x real time (1 s of audio takes 100 ms),
0.35 s of audio per word, 24 kHz s16le (raw PCM, or a streamed WAV when asked for wav).
ASR: answers 100 ms after the upload arrived. Texts containing "[500]" get an HTTP 500 at once;
"[hang]" never answers; "[22k]" is answered as a 22.05 kHz WAV whatever was asked (like a Piper
voice behind a mixed server). A word "[id:NAME]" (not spoken, not counted) makes the backend
record how long it held that request itself, from its handler starting to the first audio written
to the socket; GET /bench/held returns and clears those records, so a benchmark can tell time
spent in the backend from time spent on the way to and from it.
Run: python bench/synthetic_backend.py PORT
"""

from __future__ import annotations

import asyncio
import re
import struct
import sys
import time

from aiohttp import web

RATE = 24000
FIRST_BYTE_S = 0.150
RTF = 0.1
SECONDS_PER_WORD = 0.35
ASR_S = 0.100
CHUNK_S = 0.05  # audio per written chunk
TAG = re.compile(r"\[id:([\w-]+)\]")
HELD_MS: dict[str, float] = {}  # request tag -> ms from handler start to first audio written


def wav_stream_header(rate: int) -> bytes:
    return (
        b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data" + struct.pack("<I", 0xFFFFFFFF)
    )  # fmt: skip


async def speech(request: web.Request) -> web.StreamResponse:
    entered = time.perf_counter()
    body = await request.json()
    given = str(body.get("input", ""))
    tag = TAG.search(given)
    text = TAG.sub("", given)
    if "[500]" in text:
        return web.json_response({"error": {"message": "synthetic failure"}}, status=500)
    if "[hang]" in text:
        while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return web.Response(status=499)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.sleep(FIRST_BYTE_S)
    rate = 22050 if "[22k]" in text else RATE
    wav = body.get("response_format") == "wav" or rate != RATE
    resp = web.StreamResponse(headers={"Content-Type": "audio/wav" if wav else "audio/pcm"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    total = max(1, len(text.split())) * SECONDS_PER_WORD
    chunk = b"\x01\x00" * int(rate * CHUNK_S)
    sent = 0.0
    if wav:
        await resp.write(wav_stream_header(rate) + chunk)
    else:
        await resp.write(chunk)
    if tag:
        HELD_MS[tag.group(1)] = (time.perf_counter() - entered) * 1000
    sent += CHUNK_S
    while sent < total:
        # pace: audio up to `sent` seconds is ready at start + 150 ms + sent * RTF
        delay = start + FIRST_BYTE_S + sent * RTF - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await resp.write(chunk)
        sent += CHUNK_S
    await resp.write_eof()
    return resp


async def transcriptions(request: web.Request) -> web.Response:
    form = await request.post()
    upload = form.get("file")
    size = len(upload.file.read()) if isinstance(upload, web.FileField) else 0
    await asyncio.sleep(ASR_S)
    return web.json_response({"text": f"synthetic transcript of {size} bytes"})


async def held(_request: web.Request) -> web.Response:
    records = dict(HELD_MS)
    HELD_MS.clear()
    return web.json_response(records)


async def health(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def models(_request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "whisper-1"}, {"id": "tts-1"}]})


async def voices(_request: web.Request) -> web.Response:
    return web.json_response({"voices": ["alloy"]})


def main() -> None:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/audio/speech", speech)
    app.router.add_post("/v1/audio/transcriptions", transcriptions)
    app.router.add_get("/bench/held", held)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/audio/voices", voices)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)


if __name__ == "__main__":
    main()
