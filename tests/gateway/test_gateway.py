"""gateway.py: starts without waiting for the backends, limits connections (in all and per
host) and serves only the allowed networks, serves many at once, and tells clients mid-request
when it stops."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_dev.procs import free_port
from voice_stack_gateway.admission import parse_allow
from voice_stack_gateway.gateway import parse_tcp_uri
from voice_stack_gateway.metrics import Kind

from .conftest import Client, Clients, GatewayFactory, audio_of, first_error, stt_events, wait_for


@pytest.mark.parametrize("bad", ["unix:///tmp/x", "tcp://host", "http://h:1"])
def test_tcp_uris(bad: str) -> None:
    assert parse_tcp_uri("tcp://0.0.0.0:10300") == ("0.0.0.0", 10300)
    with pytest.raises(SystemExit, match="expected tcp://HOST:PORT"):
        parse_tcp_uri(bad)


async def test_starts_without_waiting_for_the_backends(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    """Speech servers that are still loading (their /health hangs) do not hold the gateway:
    it listens at once, describes from its configuration, reports the backends as not yet
    known, and a request gets a clear error while a backend is down."""
    fake_speech.health = "hang"
    gw = await make_gateway(
        fake_speech.url, refreshed=False, tts_voices=("af_heart",), stt_models=("whisper-big",),
        first_byte_timeout=0.3,
    )  # fmt: skip
    async with client(gw) as c:
        await c.send(Describe().event())
        info = (await c.read_until("info"))[-1]
    assert not gw.catalog.refreshed.is_set()  # still probing
    assert info.data["asr"][0]["models"][0]["name"] == "whisper-big"
    assert info.data["tts"][0]["voices"][0]["name"] == "af_heart"
    backends = gw.health()["backends"]
    assert isinstance(backends, dict)
    assert {backends["asr"]["status"], backends["tts"]["status"]} == {"unknown"}
    fake_speech.mode = "hang"
    async with client(gw) as c:
        assert first_error(await stt_events(c)).data["code"] == "backend-timeout"
    fake_speech.health, fake_speech.mode = "ok", "ok"
    await wait_for(lambda: gw.metrics.tts_backend.status == "ok", 30)


async def test_down_backend_errors_say_so(make_gateway: GatewayFactory, client: Clients) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    gw = await make_gateway(url, refreshed=False)
    async with client(gw) as c:
        await c.send(Synthesize(text="Hello there.").event())
        err = first_error(await c.read_until("audio-stop"))
    assert err.data["code"] == "backend-unreachable"
    assert err.data["text"].startswith(f"TTS backend {url} is unreachable: ")
    assert err.data["text"].endswith("; it has not answered since the gateway started")
    async with client(gw) as c:
        err = first_error(await stt_events(c))
    assert err.data["code"] == "backend-unreachable"
    assert err.data["text"].startswith(f"ASR backend {url} is unreachable")


async def test_connection_limit(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url, max_connections=1)
    async with client(gw) as first:
        await first.send(Describe().event())
        await first.read_until("info")
        async with client(gw) as second:
            assert first_error(await second.read_until("error")).data["code"] == "busy"
        await first.send(Describe().event())
        assert (await first.read_until("info"))[-1].type == "info"
    assert gw.metrics.errors[(Kind.CONNECTION, "busy")] == 1


async def one_session(c: Client, n: int) -> str:
    kind = n % 3
    if kind == 0:
        await c.send(Synthesize(text=f"Session {n} says hello.").event())
        events = await c.read_until("audio-stop")
        assert audio_of(events)
    elif kind == 1:
        await c.send(SynthesizeStart().event())
        for word in f"Session {n} streams. Two sentences here.".split(" "):
            await c.send(SynthesizeChunk(text=word + " ").event())
        await c.send(SynthesizeStop().event())
        events = await c.read_until("synthesize-stopped")
        assert audio_of(events)
    else:
        await c.send(AudioStart(16000, 2, 1).event())
        for _ in range(10):
            await c.send(AudioChunk(16000, 2, 1, b"\x02\x00" * 1600).event())
        await c.send(AudioStop().event())
        events = await c.read_until("transcript")
    return events[-1].type


async def test_32_concurrent_sessions(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    fake_speech.delay = 0.05
    gw = await make_gateway(fake_speech.url)

    async def run(n: int) -> str:
        async with client(gw) as c:
            return await one_session(c, n)

    results = await asyncio.gather(*(run(n) for n in range(32)))
    assert sorted(set(results)) == ["audio-stop", "synthesize-stopped", "transcript"]
    assert not gw.metrics.errors
    assert sum(gw.metrics.requests.values()) == 32


async def test_shutdown_tells_clients_mid_request(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_speech.url)
    fake_speech.mode = "hang"
    async with client(gw) as idle, client(gw) as c:
        await c.send(Synthesize(text="Never finishes.").event())
        await wait_for(lambda: bool(fake_speech.requests))
        await gw.stop()
        err = first_error(await c.read_until("error"))
        assert err.data["code"] == "shutting-down"
        assert await idle.read() is None  # an idle connection just closes


async def open_from(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection from another loopback address (all of 127/8 is this machine)."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(host, 0))


async def ask_info(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Event:
    """describe, and the first event answered (info, or the refusal)."""
    await async_write_event(Describe().event(), writer)
    event = await asyncio.wait_for(async_read_event(reader), 15)
    assert event is not None
    return event


async def test_one_host_cannot_take_every_connection(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    gw = await make_gateway(fake_speech.url, max_connections=4, max_connections_per_host=2)
    held = [await open_from("127.0.0.1", gw.port) for _ in range(2)]
    for conn in held:
        assert (await ask_info(*conn)).type == "info"
    refused = await ask_info(*await open_from("127.0.0.1", gw.port))
    assert refused.data == {
        "code": "busy", "text": "Too many connections from 127.0.0.1; try again shortly"
    }  # fmt: skip
    assert (await ask_info(*await open_from("127.0.0.2", gw.port))).type == "info"
    assert gw.metrics.refused == {("wyoming", "host_limit"): 1}
    assert 'gateway_refused_total{port="wyoming",reason="host_limit"} 1' in gw.metrics.prometheus()


async def test_only_the_allowed_networks_are_served(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    gw = await make_gateway(fake_speech.url, allow=parse_allow("127.0.0.2"))
    refused = await ask_info(*await open_from("127.0.0.1", gw.port))
    assert refused.data == {
        "code": "not-allowed",
        "text": "This gateway does not accept connections from 127.0.0.1 (--allow)",
    }
    assert (await ask_info(*await open_from("127.0.0.2", gw.port))).type == "info"
    url = f"http://127.0.0.1:{gw.http_port}/health"
    for host, status in (("127.0.0.1", 403), ("127.0.0.2", 200)):
        connector = aiohttp.TCPConnector(local_addr=(host, 0))
        async with aiohttp.ClientSession(connector=connector) as session, session.get(url) as resp:
            assert resp.status == status, host
    assert gw.metrics.refused == {("wyoming", "not_allowed"): 1, ("http", "not_allowed"): 1}


async def test_a_stopped_gateway_leaves_no_filter_on_the_http_log(
    fake_speech: FakeSpeech, make_gateway: GatewayFactory
) -> None:
    """aiohttp's server log goes through the gateway's log budget while it runs, and only then
    (a process that starts many, as this suite does, would pile the filters up)."""
    log = logging.getLogger("voice_stack_gateway.http")
    before = list(log.filters)
    gw = await make_gateway(fake_speech.url)
    assert len(log.filters) == len(before) + 1
    await gw.stop()
    assert log.filters == before
