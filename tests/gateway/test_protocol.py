"""protocol.py: the bounded event reader and the encoders; malformed frames close only their
own connection, with an error."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from wyoming.audio import AudioChunk
from wyoming.event import Event

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_gateway.metrics import Kind
from voice_stack_gateway.protocol import EventReader, encode_audio_chunk, encode_event

from .conftest import Client, Clients, GatewayFactory


async def raw_exchange(port: int, data: bytes) -> list[dict[str, object]]:
    """Send raw bytes, return the event headers received until the gateway closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    writer.write_eof()  # half-close: the gateway sees the end inside any unfinished event
    received = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return [json.loads(line) for line in received.split(b"\n") if line.startswith(b"{")]


async def still_serving(c: Client) -> None:
    await c.send(Event(type="describe"))
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
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients, raw: bytes, code: str
) -> None:
    gw = await make_gateway(fake_speech.url)
    async with client(gw) as other:  # a client connected before and after the bad one
        headers = await raw_exchange(gw.port, raw)
        await still_serving(other)
    errors = [h for h in headers if h.get("type") == "error"]
    assert len(errors) == 1
    assert gw.metrics.errors[(Kind.PROTOCOL, code)] == 1


async def read_back(data: bytes) -> list[Event]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    events = EventReader(reader)
    out = []
    while (event := await events.read()) is not None:
        out.append(event)
    return out


async def test_encoded_events_read_back() -> None:
    chunk = AudioChunk(16000, 2, 1, b"\1\2\3\4").event()
    data = encode_event(chunk) + encode_audio_chunk(16000, 2, 1, b"\5\6") + encode_event(chunk)
    data += encode_event(Event(type="ping", data={"text": "ü"})) + encode_event(Event(type="x"))
    events = await read_back(data)
    assert [(e.type, e.payload) for e in events] == [
        ("audio-chunk", b"\1\2\3\4"), ("audio-chunk", b"\5\6"), ("audio-chunk", b"\1\2\3\4"),
        ("ping", None), ("x", None),
    ]  # fmt: skip
    assert events[0].data == {"rate": 16000, "width": 2, "channels": 1, "timestamp": None}
    assert events[1].data == {"rate": 16000, "width": 2, "channels": 1}
    assert events[3].data == {"text": "ü"}
    # a header carrying its data inline (older writers) is read too
    inline = await read_back(b'{"type": "ping", "data": {"text": "a"}}\n')
    assert inline[0].data == {"text": "a"}


async def test_a_lone_surrogate_is_the_clients_mistake(
    fake_speech: FakeSpeech,
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """'\\ud800' is valid JSON but no text: it used to reach the encoder, which raised (an ERROR
    traceback and internal-error for every such event, a log any host could flood)."""
    gw = await make_gateway(fake_speech.url)
    bad = b'{"type": "ping", "data": {"text": "\\ud800"}}\n'
    inline = b'{"type": "synthesize", "data_length": 22}\n{"text": "a \\udfff b"}'
    async with client(gw) as other:
        for raw in (bad, inline):
            headers = await raw_exchange(gw.port, raw)
            assert [h.get("type") for h in headers if "version" in h] == ["error"]
        await still_serving(other)
    assert gw.metrics.errors == {(Kind.PROTOCOL, "protocol-error"): 2}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    (paired,) = await read_back(b'{"type": "ping", "data": {"text": "\\ud83d\\ude00"}}\n')
    assert paired.data == {"text": "\U0001f600"}  # an escaped pair is text
