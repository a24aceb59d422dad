"""connection.py: one client's events routed to their handlers; mistakes get an error event and
the connection goes on; unknown events are ignored."""

from __future__ import annotations

from wyoming.event import Event
from wyoming.info import Describe, SelectProgram
from wyoming.ping import Ping

from voice_stack_dev.fake_speech import FakeSpeech
from voice_stack_gateway.metrics import Kind

from .conftest import Clients, GatewayFactory, first_error


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
        (Event(type="audio-start", data={"rate": 16000}), "bad-audio-format", Kind.STT),
    ]
    async with client(gw) as c:
        for event, code, kind in cases:
            await c.send(event)
            err = first_error(await c.read_until("error"))
            assert err.data["code"] == code, event
            assert gw.metrics.errors[(kind, code)] >= 1
        await c.send(Describe().event())
        assert (await c.read_until("info"))[-1].type == "info"
