"""Bad client input gets a clear error event (or is ignored, for unknown events), and the
gateway keeps serving other clients throughout."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.info import Describe, SelectProgram
from wyoming.ping import Ping
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStop

from voice_stack_gateway.gateway import Gateway

from .conftest import Client, GatewayFactory, first_error
from .fake_backend import FakeBackend

Clients = Callable[[Gateway], Client]


async def raw_exchange(port: int, data: bytes) -> list[dict[str, object]]:
    """Send raw bytes, return the event headers received until the gateway closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    writer.write_eof()  # half-close: the gateway sees the end inside any unfinished event
    received = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    headers = []
    for line in received.split(b"\n"):
        if line.startswith(b"{"):
            headers.append(json.loads(line))
    return headers


async def still_serving(c: Client) -> None:
    await c.send(Describe().event())
    assert (await c.read_until("info"))[-1].type == "info"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"this is not json\n", "protocol-error"),
        (b"[1, 2, 3]\n", "protocol-error"),
        (b'{"type": 5}\n', "protocol-error"),
        (b'{"type": "audio-chunk", "data": [1]}\n', "protocol-error"),
        (b'{"type": "audio-chunk", "payload_length": -1}\n', "protocol-error"),
        (b'{"type": "audio-chunk", "payload_length": "big"}\n', "protocol-error"),
        (b'{"type": "audio-chunk", "payload_length": 999999999}\n', "payload-too-large"),
        (b'{"type": "x", "data_length": 99999999}\n', "payload-too-large"),
        (b'{"type": "x", "data_length": 4}\n[1] ', "protocol-error"),
        (b'{"type": "x", "data_length": 40}\n{}', "protocol-error"),
        (b'{"type": "' + b"a" * 70000 + b'"}\n', "payload-too-large"),
        (b'{"type": "x"', "protocol-error"),
    ],
)
async def test_malformed_frames_close_with_error(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients, raw: bytes, code: str
) -> None:
    gw = await make_gateway(fake_backend.url)
    async with client(gw) as other:  # a client connected before and after the bad one
        headers = await raw_exchange(gw.port, raw)
        await still_serving(other)
    errors = [h for h in headers if h.get("type") == "error"]
    assert len(errors) == 1
    assert gw.metrics.errors[("protocol", code)] == 1


async def test_event_level_mistakes(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url, stt_max_seconds=0.5)
    cases: list[tuple[list[Event], str]] = [
        ([AudioChunk(16000, 2, 1, b"\0\0" * 100).event()], "bad-request"),
        ([AudioStop().event()], "bad-request"),
        ([AudioStart(0, 2, 1).event()], "bad-audio-format"),
        ([AudioStart(16000, 7, 1).event()], "bad-audio-format"),
        ([AudioStart(16000, 2, 6).event()], "bad-audio-format"),
        (
            [AudioStart(16000, 2, 1).event(), AudioChunk(16000, 2, 1, b"\0\0" * 9000).event()],
            "audio-too-long",
        ),
        ([Synthesize(text="  ").event()], "bad-request"),
        ([SynthesizeChunk(text="hi").event()], "bad-request"),
        ([SynthesizeStop().event()], "bad-request"),
        ([SelectProgram(name="nope").event()], "unknown-program"),
        ([Event(type="synthesize", data={})], "bad-request"),
        ([Event(type="synthesize", data={"text": "hi", "voice": 5})], "bad-request"),
    ]
    for events, code in cases:
        async with client(gw) as c:
            await c.send(*events)
            assert first_error(await c.read_until("error")).data["code"] == code, events
            await still_serving(c)  # same connection goes on


async def test_unknown_events_ignored_and_ping(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url)
    async with client(gw) as c:
        await c.send(Event(type="made-up", data={"x": 1}, payload=b"abc"), Ping(text="hi").event())
        pong = await c.read_until("pong")
        assert [e.type for e in pong] == ["pong"]


async def test_stt_any_input_format_and_limits(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url, stt_models=("whisper-fake",))
    cases = [(48000, 4, 2), (22050, 2, 2), (8000, 1, 1), (44100, 3, 1), (16000, 2, 1)]
    for rate, width, channels in cases:
        async with client(gw) as c:
            second = b"\x10" * (rate * width * channels)
            await c.send(
                Transcribe(name="whisper-fake", language="en").event(),
                AudioStart(rate, width, channels).event(),
            )
            for i in range(0, len(second), 3000):  # chunks that split samples
                await c.send(AudioChunk(rate, width, channels, second[i : i + 3000]).event())
            await c.send(AudioStop().event())
            transcript = (await c.read_until("transcript"))[-1]
        assert transcript.type == "transcript"
        uploaded = fake_backend.requests[-1]
        assert uploaded["model"] == "whisper-fake"
        assert uploaded["language"] == "en"
        # one second at 16 kHz mono 16-bit (+44 header), within resampler rounding
        assert abs(int(uploaded["bytes"]) - 44 - 32000) <= 8, (rate, width, channels)
    # a chunk may declare a different format than audio-start
    async with client(gw) as c:
        await c.send(
            AudioStart(16000, 2, 1).event(),
            AudioChunk(8000, 2, 1, b"\0\0" * 8000).event(),
            AudioStop().event(),
        )
        assert (await c.read_until("transcript"))[-1].type == "transcript"
    assert abs(int(fake_backend.requests[-1]["bytes"]) - 44 - 32000) <= 8


async def test_connection_limit(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url, max_connections=1)
    async with client(gw) as first:
        await still_serving(first)
        async with client(gw) as second:
            assert first_error(await second.read_until("error")).data["code"] == "busy"
        await still_serving(first)


async def test_select_program_pins_model(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url)
    assert gw.catalog.current.tts_models == ["tts-fake", "kokoro"]
    async with client(gw) as c:
        await c.send(
            SelectProgram(name="voice-stack-tts").event(),
            SelectProgram(name="kokoro").event(),
            Synthesize(text="Pinned model.").event(),
        )
        assert (await c.read_until("audio-stop"))[-1].type == "audio-stop"
    assert fake_backend.requests[-1]["model"] == "kokoro"
    assert fake_backend.requests[-1]["voice"] == "af_heart"  # the first voice, now on kokoro
    async with client(gw) as c:
        await c.send(
            SelectProgram(name="whisper-fake").event(),
            AudioStart(16000, 2, 1).event(),
            AudioChunk(16000, 2, 1, b"\0\0" * 160).event(),
            AudioStop().event(),
        )
        assert (await c.read_until("transcript"))[-1].type == "transcript"
    assert fake_backend.requests[-1]["model"] == "whisper-fake"
