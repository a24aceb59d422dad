"""STT wait after audio-stop: voice-stack-gateway (early transcription) vs wyoming-openai 0.8.0,
same backend, same audio, paced like a satellite, side by side in one run.

    bench/setup-anchors            # once: wyoming-openai 0.8.0 in .cache/venv/bench-wyoming-openai
    PYTHONPATH=dev .cache/venv/gw/bin/python bench/stt_wait_bench.py [--rounds 2] > result.json

Audio: piper (the speech server's joe voice) saying 8 commands, 16 kHz, each with 0.3 s of
silence before and 0.7 s after (Home Assistant sends audio-stop after about 0.7 s of silence),
sent in 20 ms chunks in real time. Measured: the time from audio-stop written to the transcript
received. Backends: the paced fake (STT answers 100 ms after the upload, like a GPU server) and
the real speech server (faster-whisper tiny.en on this CPU). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient

from voice_stack_bench.e2e.probes import early_counts
from voice_stack_bench.stats import median_p90
from voice_stack_dev.fakes.speech import start_fake_speech
from voice_stack_dev.gateway import start_gateway, start_wyoming_openai
from voice_stack_dev.procs import Service, free_port
from voice_stack_dev.speech_server import STT_MODEL, start_speech_server

PHRASES = (
    "Turn on the kitchen light.",
    "What is the weather like tomorrow?",
    "Set a timer for ten minutes.",
    "Play some music in the living room.",
    "Turn off all the lights in the house.",
    "Add milk to my shopping list.",
    "How long does it take to drive to the airport?",
    "Open the garage door.",
)
RATE, CHUNK_S = 16000, 0.020
LEAD_S, TRAIL_S = 0.3, 0.7


async def speech(url: str, text: str) -> bytes:
    body = {"input": text, "response_format": "pcm", "sample_rate": RATE}
    endpoint = f"{url}/v1/audio/speech"
    async with aiohttp.ClientSession() as session, session.post(endpoint, json=body) as resp:
        resp.raise_for_status()
        return await resp.read()


def utterance(pcm: bytes) -> bytes:
    return bytes(int(LEAD_S * RATE) * 2) + pcm + bytes(int(TRAIL_S * RATE) * 2)


async def paced(port: int, pcm: bytes) -> tuple[float, str]:
    """One utterance in real time; (ms from audio-stop to the transcript, its text)."""
    loop = asyncio.get_running_loop()
    step = int(CHUNK_S * RATE) * 2
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Transcribe(language="en").event())
        await client.write_event(AudioStart(RATE, 2, 1).event())
        t0 = loop.time()
        for i, at in enumerate(range(0, len(pcm), step)):
            await asyncio.sleep(max(0.0, t0 + i * CHUNK_S - loop.time()))
            await client.write_event(AudioChunk(RATE, 2, 1, pcm[at : at + step]).event())
        await asyncio.sleep(max(0.0, t0 + len(pcm) / 2 / RATE - loop.time()))
        stopped = time.perf_counter()
        await client.write_event(AudioStop().event())
        while True:
            event = await asyncio.wait_for(client.read_event(), 60)
            if event is None or event.type == "error":
                raise RuntimeError(f"no transcript: {event.data if event else 'closed'}")
            if event.type == "transcript":
                return (time.perf_counter() - stopped) * 1000, str(event.data.get("text", ""))


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z ]", " ", text.lower()).split()


async def measure(
    gateways: dict[str, int], audio: list[bytes], rounds: int, *, check_words: bool
) -> dict[str, Any]:
    """Each utterance through each gateway in turn (who goes first alternates)."""
    waits: dict[str, list[float]] = {name: [] for name in gateways}
    heard: dict[str, list[bool]] = {name: [] for name in gateways}
    order = list(gateways.items())
    for r in range(rounds):
        for i, pcm in enumerate(audio):
            for name, port in order if (r + i) % 2 else order[::-1]:
                ms, text = await paced(port, utterance(pcm))
                waits[name].append(ms)
                heard[name].append(set(words(PHRASES[i])) <= set(words(text)))
    ours, anchor = (median_p90(waits[n]) for n in gateways)
    return {
        "stt_wait_after_audio_stop_ms": {n: median_p90(v) for n, v in waits.items()},
        "ratio_ours_vs_wyoming_openai": {
            "median": round(ours["median"] / anchor["median"], 3),
            "p90": round(ours["p90"] / anchor["p90"], 3),
        },
        # every word of the phrase in the transcript (a fake backend hears no words)
        "every_word_heard": {n: f"{sum(v)}/{len(v)}" for n, v in heard.items()}
        if check_words
        else None,
    }


async def run(
    backends: dict[str, tuple[Service, Service, int]], audio: list[bytes], rounds: int
) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, (ours, anchor, ours_port) in backends.items():
        gateways = {"voice_stack_gateway": ours_port, "wyoming_openai": anchor.port}
        for pcm in audio[:2]:  # warm-up: models, pools, first connections
            for port in gateways.values():
                await paced(port, utterance(pcm))
        gateway_url = f"http://127.0.0.1:{ours.port}"
        before = await early_counts(gateway_url)
        result[name] = await measure(gateways, audio, rounds, check_words=name != "fake_100ms")
        after = await early_counts(gateway_url)
        result[name]["ours_early_transcription"] = {k: after[k] - before.get(k, 0) for k in after}
    return result


def start_backends(
    log_dir: Path, speech: Service
) -> tuple[list[Service], dict[str, tuple[Service, Service, int]]]:
    fake = start_fake_speech(log_dir / "fake.log")
    started: list[Service] = [fake]
    backends: dict[str, tuple[Service, Service, int]] = {}
    for name, base, model in (
        ("fake_100ms", fake.url, "whisper-1"),
        ("faster_whisper_tiny_cpu", speech.url, STT_MODEL),
    ):
        port = free_port()
        extra = ["--stt-models", model, "--log-level", "WARNING"]
        ours = start_gateway(base, log_dir / f"ours-{name}.log", port=port, extra_args=extra)
        anchor = start_wyoming_openai(
            f"{base}/v1", f"{base}/v1", log_dir / f"anchor-{name}.log", stt_model=model
        )
        started += [ours, anchor]
        backends[name] = (ours, anchor, port)
    return started, backends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=2, help="passes over the 8 phrases")
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="stt-wait-bench-"))
    speech_server = start_speech_server(log_dir)
    started: list[Service] = [speech_server]
    try:
        audio = asyncio.run(_audio(speech_server.url))
        more, backends = start_backends(log_dir, speech_server)
        started += more
        result = asyncio.run(run(backends, audio, args.rounds))
        result["setup"] = {
            "audio": f"{len(PHRASES)} piper phrases, {LEAD_S} s silence before, {TRAIL_S} s after,"
            f" {CHUNK_S * 1000:.0f} ms chunks in real time, {args.rounds} rounds",
            "ours": "voice-stack-gateway, early transcription as by default (300 ms pause, 3 max)",
            "anchor": "wyoming-openai 0.8.0",
            "logs": str(log_dir),
        }
        print(json.dumps(result, indent=2))
    finally:
        for service in reversed(started):
            service.stop()


async def _audio(url: str) -> list[bytes]:
    return [await speech(url, text) for text in PHRASES]


if __name__ == "__main__":
    main()
