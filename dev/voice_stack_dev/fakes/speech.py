"""A fault-injecting OpenAI-compatible speech server, for what the real engines cannot be made to
do on demand (errors, hangs, cut streams, odd formats) and for paced benchmark timing.

In process (tests): `FakeSpeech().start()`, then set `mode` for every next request, or queue one
mode per request in `stt_modes` / `tts_modes`. Modes: ok, status500, status404, hang, stall, cut,
garbage_wav, wrong_type, float_wav, wav22k, bad_json, no_text, sse_garbage, sse_no_done,
no_verbose (HTTP 400 to response_format=verbose_json, as a server without it). `health` is "ok",
"down" (HTTP 503) or "hang"; `serial` makes it synthesize one request at a time. A verbose_json
transcription has one segment with `logprob` as its avg_logprob (none when it is None).
Requests, cancellations and keys are recorded.

As a process (benchmarks): `python -m voice_stack_dev.fakes.speech PORT [--paced]`. Text tags pick
a fault per request: "[500]", "[hang]", "[22k]" (a 22.05 kHz WAV whatever was asked). Paced: TTS
first byte after 150 ms, then audio at 0.1x real time, 0.35 s of audio per word; STT answers
100 ms after the upload. A word "[id:NAME]" (neither spoken nor counted) makes the server record
how long it held that request itself, handler start to first audio written; GET /bench/held
returns and clears those records, so a benchmark can tell time in the backend from time on the
way to and from it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, web

from ..procs import Service, free_port
from ..wavs import FLOAT, tone, wav_header

RATE = 24000
TAG = re.compile(r"\[id:([\w-]+)\]")
_WAV_MODES = ("garbage_wav", "float_wav", "wav22k")


@dataclass(frozen=True, slots=True)
class Pacing:
    """A backend with a speed of its own (the benchmark's): none by default."""

    first_byte_s: float = 0.150
    rtf: float = 0.1
    seconds_per_word: float = 0.35
    stt_s: float = 0.100
    chunk_s: float = 0.05  # audio per written chunk


class FakeSpeech:
    def __init__(self, port: int | None = None, pacing: Pacing | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.pacing = pacing
        self.mode = "ok"
        self.stt_modes: list[str] = []  # one mode per next transcription, before `mode`
        self.tts_modes: list[str] = []
        self.health = "ok"
        self.delay = 0.0  # seconds before the first byte
        self.logprob: float | None = -0.2  # a verbose_json answer's avg_logprob
        self.serial = False  # synthesize one request at a time, as a CPU engine does
        self._one_at_a_time = asyncio.Lock()
        self.requests: list[dict[str, Any]] = []
        self.cancelled = 0
        self.auth: list[str] = []
        self.held_ms: dict[str, float] = {}  # request tag -> ms held before the first audio
        self.voices_asked = asyncio.Event()  # set by every /audio/voices request
        self.voices_gate: asyncio.Event | None = None  # when set, /audio/voices waits for it
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/audio/voices", self._voices)
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        app.router.add_get("/bench/held", self._held)
        return app

    async def start(self) -> FakeSpeech:
        self._runner = web.AppRunner(self.app(), shutdown_timeout=0.1, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # --- metadata --------------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        if self.health == "hang":
            return await self._hang(request)
        return web.json_response(
            {"status": self.health}, status=503 if self.health == "down" else 200
        )

    async def _models(self, _r: web.Request) -> web.Response:
        ids = (
            ["whisper-1", "tts-1"]
            if self.pacing
            else ["whisper-fake", "tts-fake", "kokoro", "other-thing"]
        )
        return web.json_response({"object": "list", "data": [{"id": i} for i in ids]})

    async def _voices(self, _r: web.Request) -> web.Response:
        self.voices_asked.set()
        if self.voices_gate is not None:
            await self.voices_gate.wait()
        voices: list[Any] = (
            ["alloy"] if self.pacing else ["af_heart", "en_GB-alan-medium", {"id": "v3"}]
        )
        return web.json_response({"voices": voices})

    async def _held(self, _r: web.Request) -> web.Response:
        records, self.held_ms = self.held_ms, {}
        return web.json_response(records)

    async def _hang(self, request: web.Request) -> web.Response:
        """Never answer; count the request as cancelled when the client hangs up."""
        try:
            while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        finally:  # aiohttp may cancel the handler itself when the peer goes away
            self.cancelled += 1
        return web.Response(status=499)

    # --- TTS -------------------------------------------------------------------------------------

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        entered = time.perf_counter()
        body = await request.json()
        self.requests.append(body)
        self.auth.append(request.headers.get("Authorization", ""))
        text = str(body.get("input", ""))
        tag = TAG.search(text)
        text = TAG.sub("", text)
        mode = self.tts_modes.pop(0) if self.tts_modes else _tagged_mode(text, self.mode)
        if (refused := await self._refusal(request, mode)) is not None:
            return refused
        async with self._one_at_a_time if self.serial else contextlib.nullcontext():
            await asyncio.sleep(self.pacing.first_byte_s if self.pacing else self.delay)
            wav = mode in _WAV_MODES or body.get("response_format") == "wav"
            resp = web.StreamResponse(headers={"Content-Type": "audio/wav" if wav else "audio/pcm"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            words = max(1, len(text.split()))
            if self.pacing is not None:
                await self._paced_audio(
                    resp,
                    words=words,
                    rate=22050 if mode == "wav22k" else RATE,
                    wav=wav,
                    entered=entered,
                    tag=tag,
                )
            else:
                await self._audio(request, resp, mode, words, wav)
            await resp.write_eof()
            return resp

    async def _refusal(self, request: web.Request, mode: str) -> web.StreamResponse | None:
        """The answer of a mode that synthesizes nothing."""
        if mode == "status500":
            return web.json_response({"error": {"message": "engine exploded"}}, status=500)
        if mode == "status404":
            return web.json_response({"detail": "voice not found"}, status=404)
        if mode == "hang":
            return await self._hang(request)
        if mode == "wrong_type":
            return web.Response(text="<html>oops</html>", content_type="text/html")
        return None

    async def _audio(
        self, request: web.Request, resp: web.StreamResponse, mode: str, words: int, wav: bool
    ) -> None:
        if mode == "garbage_wav":
            await resp.write(b"\x13\x37" * 200)
        elif mode == "float_wav":
            samples = [0.5, -0.5, 2.0] * 1000
            data = struct.pack(f"<{len(samples)}f", *samples)
            await resp.write(
                wav_header(RATE, len(data), bits=32, tag=FLOAT) + data + b"LIST\x04\x00\x00\x00junk"
            )
        elif mode == "wav22k":
            data = tone(0.2, 22050)
            await resp.write(wav_header(22050, len(data)) + data)
        else:
            if wav:
                await resp.write(wav_header(RATE))
            await resp.write(tone(0.05 * words, RATE)[:4801])  # odd length: a split sample
            await asyncio.sleep(0.01)
            if mode == "cut":
                assert request.transport is not None
                request.transport.close()
                return
            if mode == "stall":
                await asyncio.sleep(3600)
            await resp.write(tone(0.05 * words, RATE)[1:])

    async def _paced_audio(
        self,
        resp: web.StreamResponse,
        *,
        words: int,
        rate: int,
        wav: bool,
        entered: float,
        tag: re.Match[str] | None,
    ) -> None:
        """Audio up to `sent` seconds is ready at first byte + sent * RTF."""
        pacing = self.pacing
        assert pacing is not None
        start = time.perf_counter() - pacing.first_byte_s
        chunk = b"\x01\x00" * int(rate * pacing.chunk_s)
        await resp.write((wav_header(rate) if wav else b"") + chunk)
        if tag:
            self.held_ms[tag.group(1)] = (time.perf_counter() - entered) * 1000
        sent = pacing.chunk_s
        while sent < words * pacing.seconds_per_word:
            delay = start + pacing.first_byte_s + sent * pacing.rtf - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await resp.write(chunk)
            sent += pacing.chunk_s

    # --- STT -------------------------------------------------------------------------------------

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form.get("file")
        audio = upload.file.read() if isinstance(upload, web.FileField) else b""
        self.requests.append({k: v for k, v in form.items() if k != "file"} | {"bytes": len(audio)})
        mode = self.stt_modes.pop(0) if self.stt_modes else self.mode
        verbose = form.get("response_format") == "verbose_json"
        if (refused := await self._stt_refusal(request, mode, verbose)) is not None:
            return refused
        await asyncio.sleep(self.pacing.stt_s if self.pacing else self.delay)
        if mode == "bad_json":
            return web.Response(text="this is not json", content_type="application/json")
        if mode == "no_text":
            return web.json_response({"segments": []})
        if form.get("stream") == "true":
            return await self._sse(request, mode)
        return self.transcript(f" heard {len(audio)} bytes ", verbose)

    async def _stt_refusal(
        self, request: web.Request, mode: str, verbose: bool
    ) -> web.StreamResponse | None:
        """The answer of a mode that transcribes nothing."""
        if mode == "status500":
            return web.Response(text="Internal Server Error", status=500)
        if mode == "status404":
            return web.json_response({"error": {"message": "no such model"}}, status=404)
        if mode == "hang":
            return await self._hang(request)
        if mode == "no_verbose" and verbose:
            message = "response_format 'verbose_json' is not supported"
            return web.json_response({"error": {"message": message}}, status=400)
        return None

    def transcript(self, text: str, verbose: bool) -> web.Response:
        """A transcription's JSON answer, verbose_json's with one segment of `logprob`."""
        if not verbose:
            return web.json_response({"text": text})
        segments = [] if self.logprob is None else [{"id": 0, "text": text,
                                                     "avg_logprob": self.logprob}]  # fmt: skip
        return web.json_response({"task": "transcribe", "text": text, "segments": segments})

    async def _sse(self, request: web.Request, mode: str) -> web.StreamResponse:
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


def tag_text(text: str, tag: str) -> str:
    """`text` with a tag the server records its own time under (neither spoken nor counted)."""
    return f"{text} [id:{tag}]"


async def held_ms(session: ClientSession, url: str, text: str) -> dict[str, float]:
    """ms each tagged request spent in the server, keyed by its full text (the records are
    cleared); `url` is the server's /v1 URL, `text` the untagged text."""
    async with session.get(f"{url.removesuffix('/v1')}/bench/held") as resp:
        records: dict[str, float] = await resp.json()
    return {tag_text(text, tag): ms for tag, ms in records.items()}


def _tagged_mode(text: str, mode: str) -> str:
    """A fault asked for in the text itself (by a client that cannot set `mode`)."""
    for tag, tagged in (("[500]", "status500"), ("[hang]", "hang"), ("[22k]", "wav22k")):
        if tag in text:
            return tagged
    return mode


def start_fake_speech(log_path: Path, *, paced: bool = True) -> Service:
    """The fake as its own process (this interpreter; PYTHONPATH must reach dev/)."""
    port = free_port()
    argv = [sys.executable, "-m", "voice_stack_dev.fakes.speech", str(port)]
    return Service(
        name="fake speech server", argv=[*argv, "--paced"] if paced else argv, port=port,
        log_path=log_path,
    ).start()  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description="fault-injecting OpenAI-compatible speech server")
    parser.add_argument("port", type=int)
    parser.add_argument("--paced", action="store_true", help="the benchmark's backend speed")
    args = parser.parse_args()
    fake = FakeSpeech(args.port, Pacing() if args.paced else None)
    web.run_app(fake.app(), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
