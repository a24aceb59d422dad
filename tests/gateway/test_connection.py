"""connection.py: one client's events routed to their handlers; mistakes get an error event and
the connection goes on; unknown events are ignored."""

from __future__ import annotations

import logging

import pytest
from wyoming.audio import AudioStart
from wyoming.event import Event
from wyoming.info import Describe, SelectProgram
from wyoming.ping import Ping
from wyoming.tts import Synthesize

from voice_stack_dev.fake_speech import FakeSpeech
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

