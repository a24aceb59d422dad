"""connection.py: one client's events routed to their handlers; mistakes get an error event and
the connection goes on; unknown events are ignored."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event, async_read_event
from wyoming.info import Describe, SelectProgram
from wyoming.ping import Ping
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_gateway.catalog import Catalog
from voice_stack_gateway.connection import AHEAD_BYTES, AHEAD_EVENTS
from voice_stack_gateway.metrics import Kind
from voice_stack_gateway.protocol import encode_event

from .conftest import Clients, GatewayFactory, first_error, wait_for

BAD = "bad-request"


async def test_unknown_events_ignored_and_ping(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    async with client(gw) as c:
        await c.send(Event(type="made-up", data={"x": 1}, payload=b"abc"), Ping(text="hi").event())
        pong = await c.read_until("pong")
    assert [(e.type, e.data) for e in pong] == [("pong", {"text": "hi"})]


async def test_mistakes_get_an_error_and_the_connection_goes_on(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    cases = [
        (SelectProgram(name="nope").event(), "unknown-program", Kind.PROGRAM),
        (Event(type="synthesize", data={}), "bad-request", Kind.TTS),
        (Event(type="synthesize", data={"text": "hi", "voice": 5}), "bad-request", Kind.TTS),
        (Event(type="synthesize", data={"text": 5}), "bad-request", Kind.TTS),
        (Event(type="synthesize", data={"text": "hi", "voice": {"name": 5}}), BAD, Kind.TTS),
        (Event(type="synthesize-start", data={"voice": "af_heart"}), BAD, Kind.TTS_STREAM),
        (Event(type="audio-start", data={"rate": 16000}), "bad-audio-format", Kind.STT),
        (
            Event(type="audio-start", data={"rate": 16000, "width": 2.0, "channels": 1}),
            "bad-audio-format",
            Kind.STT,
        ),
    ]
    async with client(gw) as c:
        for event, code, kind in cases:
            await c.send(event)
            err = first_error(await c.read_until("error"))
            assert err.data["code"] == code, event
            assert gw.metrics.errors[(kind, code)] >= 1
        await c.send(Describe().event())
        assert (await c.read_until("info"))[-1].type == "info"


@pytest.mark.parametrize(
    ("event", "method", "bug"),
    [
        (Synthesize(text="Hello.").event(), "voice", TypeError),
        (AudioStart(16000, 2, 1).event(), "stt_model", AttributeError),
    ],
)
async def test_our_own_bugs_are_logged_with_a_traceback_and_answered(
    fake_speech: FakeSpeech,
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    *,
    event: Event,
    method: str,
    bug: type[Exception],
) -> None:
    """A TypeError or AttributeError of the gateway's own (here injected into the catalog) is
    not the client's mistake: an error with a traceback in the log, an internal-error event to
    the client (never "Malformed"), and the connection goes on."""
    gw = await make_gateway(fake_speech.url)

    def broken(*_args: object) -> None:
        raise bug("a bug of ours")

    monkeypatch.setattr(Catalog, method, broken)
    async with client(gw) as c:
        await c.send(event)
        err = first_error(await c.read_until("error"))
        await c.send(Describe().event())
        assert (await c.read_until("info"))[-1].type == "info"
    assert err.data["code"] == "internal-error"
    assert "Malformed" not in err.data["text"]
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.exc_info is not None
    assert record.exc_info[0] is bug


def kinds(events: list[Event]) -> list[str]:
    """Event types, with runs of audio chunks folded into one (their count varies)."""
    out: list[str] = []
    for e in events:
        if not (e.type == "audio-chunk" and out and out[-1] == "audio-chunk"):
            out.append(e.type)
    return out


async def test_a_request_waits_for_the_one_before_while_the_connection_reads_on(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    fake_speech.delay = 0.3
    async with client(gw) as c:
        await c.send(Synthesize(text="One.").event(), Synthesize(text="Two words.").event())
        events = await c.read_until("audio-stop")
        events += await c.read_until("audio-stop")
        await c.send(Ping(text="after").event())
        events += await c.read_until("pong")
    assert kinds(events) == ["audio-start", "audio-chunk", "audio-stop"] * 2 + ["pong"]
    assert [r["input"] for r in fake_speech.requests] == ["One.", "Two words."]


async def test_events_read_while_a_request_waits_are_answered_after_it_in_order(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    """A second synthesis waits for the first; what the client sends meanwhile is read (so a
    client that leaves is seen) but answered only after, in order: 12 pings (more than the
    connection holds ahead), then an utterance whose audio chunks exceed what it holds."""
    gw = await make_gateway(fake_speech.url)
    fake_speech.delay = 0.5  # the first answer takes a while: the rest arrives meanwhile
    pcm = b"\x01\x00" * 400_000  # 0.8 MB per chunk
    async with client(gw) as c:
        await c.send(Synthesize(text="One.").event(), Synthesize(text="Two.").event())
        await c.send(*(Ping(text=str(n)).event() for n in range(12)))
        await c.send(AudioStart(16000, 2, 1).event())
        await c.send(*(AudioChunk(16000, 2, 1, pcm).event() for _ in range(2)))
        await c.send(AudioStop().event())
        events = await c.read_until("transcript")
    got = kinds(events)
    first_stop = got.index("audio-stop")
    pongs = [i for i, kind in enumerate(got) if kind == "pong"]
    assert len(pongs) == 12
    assert min(pongs) > first_stop  # nothing jumped ahead of the first answer
    assert [e.data["text"] for e in events if e.type == "pong"] == [str(n) for n in range(12)]
    assert got[-1] == "transcript"
    assert events[-1].data["text"] == f"heard {2 * len(pcm) + 44} bytes"


async def test_a_protocol_error_read_while_a_request_waits_ends_the_connection_after_it(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    gw = await make_gateway(fake_speech.url)
    fake_speech.delay = 0.5
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    for text in ("One.", "Two."):
        writer.write(b'{"type": "synthesize", "data": {"text": "%s"}}\n' % text.encode())
    writer.write(b"this is not an event\n")
    await writer.drain()
    events: list[Event] = []
    async with asyncio.timeout(20):
        while (event := await async_read_event(reader)) is not None:  # until the gateway closes
            events.append(event)
    writer.close()
    got = kinds(events)
    assert got[-1] == "error"
    assert events[-1].data["code"] == "protocol-error"
    assert got.index("audio-stop") < got.index("error")  # the first answer came first


async def read_all(reader: asyncio.StreamReader, limit: float = 20.0) -> list[Event]:
    """Every event until the gateway closes the connection."""
    events: list[Event] = []
    async with asyncio.timeout(limit):
        while (event := await async_read_event(reader)) is not None:
            events.append(event)
    return events


async def test_a_silent_or_crawling_client_is_told_and_dropped(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    """64 silent sockets used to hold every connection for ever: now each gets idle-timeout."""
    gw = await make_gateway(fake_speech.url, idle_timeout=0.3)
    silent = await asyncio.open_connection("127.0.0.1", gw.port)
    crawling = await asyncio.open_connection("127.0.0.1", gw.port)
    for byte in b'{"ty':  # a byte at a time, too slow to finish a header within the limit
        crawling[1].write(bytes([byte]))  # (all sent well before it: none is written after)
        await asyncio.sleep(0.02)
    for reader, writer in (silent, crawling):
        (event,) = await read_all(reader)
        writer.close()
        assert (event.type, event.data["code"]) == ("error", "idle-timeout")
        assert event.data["text"] == "No event for 0.3 s; connection closed"
    await wait_for(lambda: not gw.connections)
    assert gw.metrics.errors[(Kind.PROTOCOL, "idle-timeout")] == 2


async def test_a_client_owed_an_answer_may_wait_in_silence(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url, idle_timeout=0.3)
    fake_speech.delay = 1.0  # the answer takes longer than the idle limit
    async with client(gw) as c:
        await c.send(Synthesize(text="Take your time.").event())
        assert kinds(await c.read_until("audio-stop")) == [
            "audio-start",
            "audio-chunk",
            "audio-stop",
        ]
        await c.send(SynthesizeStart().event(), SynthesizeChunk(text="One sentence. ").event())
        assert (await c.read_until("audio-chunk"))[-1].type == "audio-chunk"
        await c.send(SynthesizeStop().event())
        assert (await c.read_until("synthesize-stopped"))[-1].type == "synthesize-stopped"
    assert not gw.metrics.errors


async def test_a_client_that_reads_nothing_is_dropped(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    """A long reply to a client that never reads used to block its writer (and its slot) for
    ever once the socket buffers were full."""
    gw = await make_gateway(fake_speech.url, idle_timeout=0.5)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gw.port))
    sock.sendall(encode_event(Synthesize(text="word " * 4000).event()))  # about 10 MB of audio
    await wait_for(lambda: bool(gw.connections))
    (conn,) = gw.connections
    await wait_for(lambda: conn.closed, limit=30)
    sock.settimeout(10)
    with pytest.raises(ConnectionResetError):  # reset: what the kernel held for it is gone too
        read_to_the_end(sock)
    sock.close()


def read_to_the_end(sock: socket.socket) -> None:
    while sock.recv(1 << 20):
        pass


async def test_read_ahead_counts_event_data_not_just_audio(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    """While a request waits, what is read ahead is bounded by its bytes as sent: events of
    300 KB of JSON data each used to be held 8 at a time (about 9 MB once parsed)."""
    gw = await make_gateway(fake_speech.url, first_byte_timeout=60)
    fake_speech.tts_modes = ["hang"]  # the first answer never comes: the second waits
    _, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    writer.write(encode_event(Synthesize(text="One.").event()))
    writer.write(encode_event(Synthesize(text="Two.").event()))
    big = Event(type="made-up", data={"blob": "x" * 300_000})
    sender = asyncio.create_task(write_all(writer, [encode_event(big)] * 12))
    await wait_for(lambda: bool(gw.connections))
    (conn,) = gw.connections
    await wait_for(lambda: len(conn._ahead) >= AHEAD_EVENTS or conn._ahead_bytes >= AHEAD_BYTES)
    assert len(conn._ahead) == -(-AHEAD_BYTES // 300_000)  # 4 events, not 8
    sender.cancel()
    writer.close()


async def write_all(writer: asyncio.StreamWriter, chunks: list[bytes]) -> None:
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
