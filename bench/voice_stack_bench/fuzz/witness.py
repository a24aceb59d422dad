"""The well-behaved client beside the attack: Home Assistant's own requests (one utterance
transcribed, one sentence synthesized, each on a new connection, as HA's Wyoming integration
makes them) in a loop, and a ping every 20 ms on a connection of its own, whose slowest answer
is the worst event-loop stall a client saw."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.ping import Ping
from wyoming.tts import Synthesize

PING_EVERY_S = 0.02
REQUEST_LIMIT_S = 30.0
AUDIO = bytes(3200) + b"\x00\x10" * 16000 + bytes(3200)  # a second of sound between quiet


@dataclass
class Seen:
    stt_ms: list[float] = field(default_factory=list)  # audio-stop to the transcript
    tts_ms: list[float] = field(default_factory=list)  # synthesize to the first audio
    ping_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


async def witness(port: int, stop: asyncio.Event, seen: Seen) -> None:
    await asyncio.gather(_requests(port, stop, seen), _pings(port, stop, seen))


async def _requests(port: int, stop: asyncio.Event, seen: Seen) -> None:
    while not stop.is_set():
        for name, request, into in (("stt", _stt, seen.stt_ms), ("tts", _tts, seen.tts_ms)):
            try:
                async with asyncio.timeout(REQUEST_LIMIT_S):
                    into.append(await request(port))
            except Exception as exc:
                seen.failures.append(f"{name}: {type(exc).__name__}: {exc}")


async def _read_until(client: AsyncTcpClient, kind: str) -> Event:
    while (event := await client.read_event()) is not None:
        if event.type == "error":
            raise RuntimeError(f"error event: {event.data}")
        if event.type == kind:
            return event
    raise ConnectionError("the gateway closed the connection")


async def _stt(port: int) -> float:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Event(type="transcribe", data={"language": "en"}))
        await client.write_event(AudioStart(16000, 2, 1).event())
        for at in range(0, len(AUDIO), 3200):
            await client.write_event(AudioChunk(16000, 2, 1, AUDIO[at : at + 3200]).event())
        stopped = time.perf_counter()
        await client.write_event(AudioStop().event())
        await _read_until(client, "transcript")
        return (time.perf_counter() - stopped) * 1000


async def _tts(port: int) -> float:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        asked = time.perf_counter()
        await client.write_event(Synthesize(text="The kitchen light is on.").event())
        await _read_until(client, "audio-chunk")
        first = (time.perf_counter() - asked) * 1000
        await _read_until(client, "audio-stop")
        return first


async def _pings(port: int, stop: asyncio.Event, seen: Seen) -> None:
    """On one connection (it is never idle long enough to be dropped)."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        while not stop.is_set():
            sent = time.perf_counter()
            await client.write_event(Ping(text="witness").event())
            try:
                async with asyncio.timeout(REQUEST_LIMIT_S):
                    await _read_until(client, "pong")
            except Exception as exc:
                never = " (never answered: the server may not implement ping)"
                seen.failures.append(f"ping: {type(exc).__name__}{'' if seen.ping_ms else never}")
                return
            seen.ping_ms.append((time.perf_counter() - sent) * 1000)
            await asyncio.sleep(PING_EVERY_S)
