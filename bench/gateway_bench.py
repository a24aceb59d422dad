"""voice-stack-gateway vs wyoming-openai 0.8.0, side by side, same synthetic backend, one run.

    bench/setup-anchors            # once: wyoming-openai 0.8.0 in .cache/venv/bench-wyoming-openai
    PYTHONPATH=dev .cache/venv/gw/bin/python bench/gateway_bench.py [--rounds 30] > result.json

Backend (voice_stack_dev.fakes.speech, paced): TTS first byte after 150 ms, audio at 0.1x real
time; STT answers 100 ms after the upload. "Overhead" is a gateway's latency minus the same request
made directly to the backend in the same run (interleaved), so both gateways are measured
against one baseline. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from voice_stack_bench.stats import overhead, summary, summary_with_blocks
from voice_stack_dev.fakes.speech import held_ms, start_fake_speech, tag_text
from voice_stack_dev.gateway import start_wyoming_openai
from voice_stack_dev.paths import venv_bin
from voice_stack_dev.procs import Service, free_port, rss_mb
from voice_stack_dev.wavs import wav

TEXT = "Turn on the kitchen light please."
REPLY = (
    "Sure, I turned on the kitchen light for you. The living room lamp is already on."
    " It is twenty one degrees inside right now. Let me know if you need anything else."
)
WORDS_PER_DELTA, DELTA_S = 3, 0.050
HUNG_LIMIT_S = 20.0
# Pause before each burst of 8 sessions: the previous burst's server may still be closing
# connections or collecting garbage (wyoming-openai's GC passes take up to 50 ms), and on a
# 2-core machine that would be charged to whoever goes next.
SETTLE_S = 0.25


# --- clients -------------------------------------------------------------------------------------


async def read_until(client: AsyncTcpClient, *types: str, limit: float = 30.0) -> Event:
    while True:
        event = await asyncio.wait_for(client.read_event(), limit)
        if event is None:
            raise ConnectionError("gateway closed the connection")
        if event.type in types or event.type == "error":
            return event


async def wyoming_tts(
    port: int, text: str, barrier: asyncio.Barrier | None = None
) -> tuple[float, Event]:
    """ms to the first audio-chunk; then read to the end of the envelope. With a barrier, the
    rest is read only once every concurrent session has its first audio, so this client's own
    parsing of one session's audio does not delay the timestamps of the others."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        start = time.perf_counter()
        await client.write_event(Synthesize(text=text).event())
        first = await read_until(client, "audio-chunk")
        elapsed = (time.perf_counter() - start) * 1000
        if barrier is not None:
            await barrier.wait()
        if first.type == "audio-chunk":
            await read_until(client, "audio-stop")
        return elapsed, first


async def direct_tts(
    session: aiohttp.ClientSession,
    url: str,
    text: str,
    fmt: str,
    barrier: asyncio.Barrier | None = None,
) -> float:
    start = time.perf_counter()
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": fmt}
    async with session.post(f"{url}/audio/speech", json=body) as resp:
        await resp.content.readany()
        elapsed = (time.perf_counter() - start) * 1000
        if barrier is not None:
            await barrier.wait()
        await resp.read()
    return elapsed


async def direct_tts_total(session: aiohttp.ClientSession, url: str, text: str) -> float:
    start = time.perf_counter()
    body = {"model": "tts-1", "voice": "alloy", "input": text, "response_format": "pcm"}
    async with session.post(f"{url}/audio/speech", json=body) as resp:
        await resp.read()
    return (time.perf_counter() - start) * 1000


PCM_3S = b"\x01\x00" * 16000 * 3


async def wyoming_stt(port: int) -> float:
    """ms from audio-stop written to transcript received (3 s of 16 kHz audio)."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(AudioStart(16000, 2, 1).event())
        for i in range(0, len(PCM_3S), 2048):
            await client.write_event(AudioChunk(16000, 2, 1, PCM_3S[i : i + 2048]).event())
        start = time.perf_counter()
        await client.write_event(AudioStop().event())
        event = await read_until(client, "transcript")
        if event.type != "transcript":
            raise RuntimeError(f"stt failed: {event.data}")
        return (time.perf_counter() - start) * 1000


async def direct_stt(session: aiohttp.ClientSession, url: str, wav: bytes) -> float:
    start = time.perf_counter()
    form = aiohttp.FormData()
    form.add_field("file", wav, filename="a.wav", content_type="audio/wav")
    form.add_field("model", "whisper-1")
    form.add_field("response_format", "json")
    async with session.post(f"{url}/audio/transcriptions", data=form) as resp:
        await resp.json()
    return (time.perf_counter() - start) * 1000


def reply_deltas() -> list[str]:
    words = REPLY.split(" ")
    return [
        ("" if i == 0 else " ") + " ".join(words[i : i + WORDS_PER_DELTA])
        for i in range(0, len(words), WORDS_PER_DELTA)
    ]


async def wyoming_stream(port: int) -> dict[str, float]:
    """Streaming TTS as HA's pipeline drives it: deltas every 50 ms, compat synthesize, stop."""
    deltas = reply_deltas()
    async with AsyncTcpClient("127.0.0.1", port) as client:
        first_audio: float | None = None
        done = asyncio.Event()
        end = 0.0
        t0 = 0.0

        async def reader() -> None:
            nonlocal first_audio, end
            while True:
                event = await read_until(client, "audio-chunk", "synthesize-stopped")
                if event.type == "error":
                    raise RuntimeError(event.data)
                if event.type == "audio-chunk" and first_audio is None:
                    first_audio = (time.perf_counter() - t0) * 1000
                if event.type == "synthesize-stopped":
                    end = (time.perf_counter() - t0) * 1000
                    done.set()
                    return

        await client.write_event(SynthesizeStart().event())
        task = asyncio.create_task(reader())
        t0 = time.perf_counter()
        for i, delta in enumerate(deltas):
            await client.write_event(SynthesizeChunk(text=delta).event())
            if i < len(deltas) - 1:
                await asyncio.sleep(t0 + (i + 1) * DELTA_S - time.perf_counter())
        await client.write_event(Synthesize(text=REPLY).event())
        await client.write_event(SynthesizeStop().event())
        await asyncio.wait_for(task, 30)
        assert first_audio is not None
        return {"first_audio_ms": first_audio, "end_ms": end}


def sentence_completion_times() -> list[tuple[str, float]]:
    """Each sentence and the time (s after the first delta) its last word is sent."""
    sentences = [x + ("" if x.endswith(".") else ".") for x in REPLY.split(". ")]
    ends, pos = [], 0
    for sentence in sentences:
        pos = REPLY.index(sentence, pos) + len(sentence)
        ends.append(pos)
    out: list[tuple[str, float]] = []
    sent = 0
    for i, delta in enumerate(reply_deltas()):
        sent += len(delta)
        while len(out) < len(sentences) and ends[len(out)] <= sent:
            out.append((sentences[len(out)], i * DELTA_S))
    return out


async def stream_rates(port: int) -> dict[str, Any]:
    """A streamed reply whose second sentence the backend answers at 22.05 kHz: which rates
    does the client see declared (HA builds its WAV header from the first audio-start)?"""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(SynthesizeStart().event())
        for text in ("The first sentence is here. ", "[22k] The second one differs. "):
            await client.write_event(SynthesizeChunk(text=text).event())
        await client.write_event(SynthesizeStop().event())
        starts: set[int] = set()
        chunks: set[int] = set()
        while True:
            event = await read_until(client, "audio-start", "audio-chunk", "synthesize-stopped")
            if event.type == "audio-start":
                starts.add(event.data["rate"])
            elif event.type == "audio-chunk":
                chunks.add(event.data["rate"])
            else:
                break
    return {
        "audio_start_rates": sorted(starts),
        "audio_chunk_rates": sorted(chunks),
        "one_format": len(starts | chunks) == 1,
    }


async def error_time(port: int, text: str, limit: float) -> float | None:
    """ms until an error event, or None if none came within `limit` seconds."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        start = time.perf_counter()
        await client.write_event(Synthesize(text=text).event())
        try:
            async with asyncio.timeout(limit):
                while True:
                    event = await client.read_event()
                    if event is None or event.type == "error":
                        return (time.perf_counter() - start) * 1000 if event else None
        except TimeoutError:
            return None


# --- runs ----------------------------------------------------------------------------------------


async def interleaved(
    rounds: int, targets: dict[str, Callable[[], Awaitable[float]]]
) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {name: [] for name in targets}
    for fn in targets.values():  # warm-up: pools, imports, first connections
        await fn()
    for _ in range(rounds):
        for name, fn in targets.items():
            results[name].append(await fn())
    return results


def tagged(prefix: str) -> list[str]:
    """8 differently tagged copies of TEXT, for one burst of sessions."""
    return [tag_text(TEXT, f"{prefix}-{i}") for i in range(8)]


def _first_audio(port: int) -> Callable[[], Awaitable[float]]:
    async def run() -> float:
        return (await wyoming_tts(port, TEXT))[0]

    return run


def _stt_after_stop(port: int) -> Callable[[], Awaitable[float]]:
    return lambda: wyoming_stt(port)


Gateways = dict[str, int]  # name -> Wyoming port


async def tts_first_audio(
    session: aiohttp.ClientSession, url: str, gateways: Gateways, rounds: int
) -> tuple[dict[str, Any], float]:
    """Plain TTS first audio (wyoming-openai asks for WAV, ours for PCM); also the direct median."""
    tts_ms = await interleaved(rounds, {
        "direct_pcm": lambda: direct_tts(session, url, TEXT, "pcm"),
        "direct_wav": lambda: direct_tts(session, url, TEXT, "wav"),
        **{n: _first_audio(p) for n, p in gateways.items()},
    })  # fmt: skip
    result = {
        "voice_stack_gateway": overhead(tts_ms["voice_stack_gateway"], tts_ms["direct_pcm"]),
        "wyoming_openai": overhead(tts_ms["wyoming_openai"], tts_ms["direct_wav"]),
        "direct_first_byte_ms": summary(tts_ms["direct_pcm"]),
    }
    return result, statistics.median(tts_ms["direct_pcm"])


async def stt_after_stop(
    session: aiohttp.ClientSession, url: str, gateways: Gateways, rounds: int
) -> dict[str, Any]:
    """STT result after audio-stop, for 3 s of quiet (no early transcription can start)."""
    body = wav(PCM_3S, 16000)
    stt = await interleaved(rounds, {
        "direct": lambda: direct_stt(session, url, body),
        **{n: _stt_after_stop(p) for n, p in gateways.items()},
    })  # fmt: skip
    return {n: overhead(stt[n], stt["direct"]) for n in gateways} | {
        "direct_ms": summary(stt["direct"])
    }


class Concurrent:
    """8 concurrent TTS sessions per round. Each round measures the backend directly first and
    counts overhead against that round's own direct median, so a slow backend round (the fake
    backend is a Python process too) is not charged to the gateways. The 8 sessions of a round
    share one fate (a scheduling stall hits them all), so a p95 needs many rounds: 10 rounds put
    it anywhere from 2.6 to 13 ms for the same code. The gateways take turns going first. Round
    0 is a warm-up (it opens 8 backend connections at once), reported as the cold-burst figure."""

    def __init__(self, session: aiohttp.ClientSession, url: str, gateways: Gateways) -> None:
        self.session, self.url, self.gateways = session, url, gateways
        self.overhead: dict[str, list[float]] = {n: [] for n in gateways}
        self.transit: dict[str, list[float]] = {n: [] for n in gateways}
        self.cold: dict[str, list[float]] = {n: [] for n in gateways}
        self.direct: list[float] = []

    async def round(self, index: int) -> None:
        await asyncio.sleep(SETTLE_S)
        barrier = asyncio.Barrier(8)
        texts = tagged(f"direct-{index}")
        direct = await asyncio.gather(
            *(direct_tts(self.session, self.url, t, "pcm", barrier) for t in texts)
        )
        held = await held_ms(self.session, self.url, TEXT)
        base = statistics.median(direct)
        base_transit = statistics.median(d - held[t] for d, t in zip(direct, texts, strict=True))
        order = list(self.gateways.items())
        for name, port in order if index % 2 else order[::-1]:
            await self._gateway_round(index, name, port, base, base_transit)
        if index:
            self.direct += direct

    async def _gateway_round(
        self, index: int, name: str, port: int, base: float, base_transit: float
    ) -> None:
        await asyncio.sleep(SETTLE_S)
        barrier = asyncio.Barrier(8)
        texts = tagged(f"{name}-{index}")
        pairs = await asyncio.gather(*(wyoming_tts(port, t, barrier) for t in texts))
        (self.cold if index == 0 else self.overhead)[name] += [p[0] - base for p in pairs]
        held = await held_ms(self.session, self.url, TEXT)
        if index:
            self.transit[name] += [
                p[0] - held[t] - base_transit for p, t in zip(pairs, texts, strict=True)
            ]

    def result(self) -> dict[str, Any]:
        return {
            "tts_8_concurrent_overhead_ms": {
                n: summary_with_blocks(v) for n, v in self.overhead.items()
            }
            | {"direct_first_byte_ms": summary(self.direct)},
            # the same sessions with the time each request spent inside the backend (its own
            # timer and scheduling, as the backend measured it) taken out on both sides: what
            # remains is the way there and back, through a gateway or direct
            "tts_8_concurrent_overhead_excluding_backend_time_ms": {
                n: summary_with_blocks(v) for n, v in self.transit.items()
            },
            "tts_8_concurrent_cold_first_round_overhead_ms": {
                n: summary(v) for n, v in self.cold.items()
            },
        }


async def streaming_tts(
    session: aiohttp.ClientSession, url: str, gateways: Gateways, rounds: int, ttfb: float
) -> dict[str, Any]:
    """4 sentences, 3 words every 50 ms, against the least possible first audio and end."""
    completions = sentence_completion_times()
    totals = [
        statistics.median([await direct_tts_total(session, url, s) for _ in range(3)])
        for s, _ in completions
    ]
    least_first = completions[0][1] * 1000 + ttfb
    least_end = max(
        t_done * 1000 + total for (_s, t_done), total in zip(completions, totals, strict=True)
    )
    stream: dict[str, Any] = {
        "least_possible_first_audio_ms": round(least_first, 1),
        "least_possible_end_ms": round(least_end, 1),
    }
    for name, port in gateways.items():
        runs = [await wyoming_stream(port) for _ in range(max(3, rounds // 6))]
        first = statistics.median(r["first_audio_ms"] for r in runs)
        end = statistics.median(r["end_ms"] for r in runs)
        stream[name] = {
            "first_audio_ms": round(first, 1),
            "first_audio_vs_least_ms": round(first - least_first, 1),
            "end_ms": round(end, 1),
            "end_vs_least_ms": round(end - least_end, 1),
        }
    return stream


async def errors(gateways: Gateways) -> dict[str, Any]:
    """A backend HTTP 500 and a hung backend: how soon does the client hear?"""
    out: dict[str, Any] = {}
    for name, port in gateways.items():
        fivehundred = [await error_time(port, "Fail now [500]", 10.0) for _ in range(5)]
        hung = await error_time(port, "Never [hang]", HUNG_LIMIT_S)
        answered = [v for v in fivehundred if v is not None]
        out[name] = {
            "http_500_error_ms": summary(answered) if len(answered) == len(fivehundred) else None,
            "hung_backend_error_ms": round(hung, 1) if hung is not None else None,
            "hung_backend_note": None
            if hung is not None
            else f"no error within {HUNG_LIMIT_S:.0f} s",
        }
    return out


async def bench(
    ours: Service, anchor: Service, backend_url: str, rounds: int, concurrent_rounds: int
) -> dict[str, Any]:
    gateways = {"voice_stack_gateway": ours.port, "wyoming_openai": anchor.port}
    result: dict[str, Any] = {}
    async with aiohttp.ClientSession() as session:
        result["tts_first_audio_overhead_ms"], ttfb = await tts_first_audio(
            session, backend_url, gateways, rounds
        )
        result["stt_result_overhead_ms"] = await stt_after_stop(
            session, backend_url, gateways, rounds
        )
        concurrent = Concurrent(session, backend_url, gateways)
        for index in range(concurrent_rounds + 1):
            await concurrent.round(index)
        result |= concurrent.result()
        result["streaming_tts"] = await streaming_tts(session, backend_url, gateways, rounds, ttfb)
        result["mixed_backend_rates"] = {n: await stream_rates(p) for n, p in gateways.items()}
        result["errors"] = await errors(gateways)
    return result


def start_all(log_dir: Path) -> tuple[Service, Service, Service]:
    backend = start_fake_speech(log_dir / "backend.log")
    url = f"{backend.url}/v1"
    port = free_port()
    ours = Service(
        name="voice-stack-gateway", port=port, log_path=log_dir / "ours.log", health_path=None,
        argv=[str(venv_bin("gw", "voice-stack-gateway")), "--uri", f"tcp://127.0.0.1:{port}",
              "--http-uri", f"tcp://127.0.0.1:{free_port()}", "--stt-openai-url", url,
              "--tts-openai-url", url, "--stt-models", "whisper-1", "--tts-models", "tts-1",
              "--tts-voices", "alloy", "--first-byte-timeout", "2", "--total-timeout", "30",
              "--log-level", "WARNING"],
    ).start()  # fmt: skip
    anchor = start_wyoming_openai(url, url, log_dir / "anchor.log")
    return backend, ours, anchor


def _set_priority(nice: int, pid: int = 0) -> int:
    """Set a process's nice value (0 = this process); the value in force is returned."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except PermissionError:
        return os.getpriority(os.PRIO_PROCESS, pid)
    return nice


def _pid(service: Service) -> int:
    assert service.proc is not None
    return service.proc.pid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument(
        "--concurrent-rounds",
        type=int,
        default=40,
        help="rounds of 8 concurrent sessions per gateway (a p95 needs many; at least 10)",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=-10,
        help="scheduling priority for this run and every server it starts, the same for both"
        " gateways, to keep other jobs on a shared machine out of the figures (needs root;"
        " ignored otherwise)",
    )
    args = parser.parse_args()
    concurrent_rounds = max(10, args.concurrent_rounds)
    nice = _set_priority(args.nice)  # inherited by every server started below
    log_dir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    backend, ours, anchor = start_all(log_dir)
    try:
        time.sleep(2.5)  # both settle (ours refreshes its catalog in the background)
        pids = {"voice_stack_gateway": _pid(ours), "wyoming_openai": _pid(anchor)}
        idle = {name: rss_mb(pid) for name, pid in pids.items()}
        result = asyncio.run(
            bench(ours, anchor, f"{backend.url}/v1", args.rounds, concurrent_rounds)
        )
        result["idle_rss_mb_at_start"] = idle
        result["rss_mb_after_run"] = {name: rss_mb(pid) for name, pid in pids.items()}
        result["setup"] = {
            "nice": nice,
            "backend": "synthetic: TTS first byte 150 ms, audio at 0.1x real time; ASR 100 ms",
            "rounds": args.rounds, "concurrent_rounds": concurrent_rounds,
            "logs": str(log_dir),
            "anchor": "wyoming-openai 0.8.0 (TTS as WAV, its default; ours asks for PCM)",
        }  # fmt: skip
        print(json.dumps(result, indent=2))
    finally:
        for service in (anchor, ours, backend):
            service.stop()


if __name__ == "__main__":
    main()
