"""connection.py: one client's events routed to their handlers; mistakes get an error event and
the connection goes on; unknown events are ignored."""

from __future__ import annotations

import asyncio
import logging

import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event, async_read_event
from wyoming.info import Describe, SelectProgram
from wyoming.ping import Ping
from wyoming.tts import Synthesize

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_gateway.catalog import Catalog
from voice_stack_gateway.metrics import Kind

from .conftest import Clients, GatewayFactory, first_error

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
