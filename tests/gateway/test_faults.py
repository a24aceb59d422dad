"""Injected backend faults: each becomes a prompt Wyoming error event; others keep being served."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.info import Describe
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from voice_stack_dev.procs import free_port
from voice_stack_gateway.gateway import Gateway

from .conftest import Client, GatewayFactory, audio_of, first_error
from .fake_backend import FakeBackend

Clients = Callable[[Gateway], Client]


async def tts_events(c: Client, text: str = "Hello there.") -> list[Event]:
    await c.send(Synthesize(text=text).event())
    return await c.read_until("audio-stop")


async def stt_events(c: Client, rate: int = 16000) -> list[Event]:
    pcm = b"\x01\x00" * rate  # one second
    await c.send(
        AudioStart(rate, 2, 1).event(), AudioChunk(rate, 2, 1, pcm).event(), AudioStop().event()
    )
    return await c.read_until("transcript-stop", "transcript")


@pytest.mark.parametrize(
    ("mode", "code", "fragment"),
    [
        ("status500", "backend-error", "HTTP 500 engine exploded"),
        ("hang", "backend-timeout", "timed out"),
        ("cut", "backend-bad-response", "cut the synthesis short"),
        ("garbage_wav", "backend-bad-response", "not WAV"),
        ("wrong_type", "backend-bad-response", "text/html"),
    ],
)
async def test_tts_faults(
    fake_backend: FakeBackend,
    make_gateway: GatewayFactory,
    client: Clients,
    *,
    mode: str,
    code: str,
    fragment: str,
) -> None:
    gw = await make_gateway(fake_backend.url, first_byte_timeout=0.3, total_timeout=2.0)
    fake_backend.mode = mode
    async with client(gw) as c:
        err = first_error(await tts_events(c))
    assert err.data["code"] == code
    assert fragment in err.data["text"]
    fake_backend.mode = "ok"  # the gateway keeps serving
    async with client(gw) as c:
        assert audio_of(await tts_events(c))
    assert gw.metrics.errors[("tts", code)] == 1


async def test_connection_refused_and_health(make_gateway: GatewayFactory, client: Clients) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    gw = await make_gateway(url, tts_voices=("alloy",), stt_models=("whisper-1",))
    async with client(gw) as c:  # describe works although both backends are down
        await c.send(Describe().event())
        info = (await c.read_until("info"))[-1]
    assert info.data["tts"][0]["voices"][0]["name"] == "alloy"
    async with client(gw) as c:
        err = first_error(await tts_events(c))
    assert err.data["code"] == "backend-unreachable"
    async with client(gw) as c:
        err = first_error(await stt_events(c))
    assert err.data["code"] == "backend-unreachable"
    await asyncio.wait_for(gw.catalog.refreshed.wait(), 10)
    health = gw.health()
    assert health["status"] == "degraded"
    backends = health["backends"]
    assert isinstance(backends, dict)
    assert backends["tts"]["status"] == "down"
    assert "unreachable" in backends["tts"]["last_error"]


async def test_backend_url_credentials_never_shown(
    make_gateway: GatewayFactory, client: Clients
) -> None:
    """user:password@ and query strings stay out of Wyoming info, error texts and /health."""
    port = free_port()
    url = f"http://user:pw-sekrit@127.0.0.1:{port}/v1?api_key=q-sekrit"
    shown = f"http://127.0.0.1:{port}/v1"
    gw = await make_gateway(url, tts_voices=("alloy",), stt_models=("whisper-1",))
    async with client(gw) as c:
        await c.send(Describe().event())
        info = (await c.read_until("info"))[-1]
        err = first_error(await tts_events(c))
    assert info.data["asr"][0]["models"][0]["attribution"]["url"] == shown
    assert info.data["tts"][0]["voices"][0]["attribution"]["url"] == shown
    assert err.data["text"].startswith(f"TTS backend {shown} is unreachable: ")
    await asyncio.wait_for(gw.catalog.refreshed.wait(), 10)
    health = gw.health()
    backends = health["backends"]
    assert isinstance(backends, dict)
    assert backends["asr"]["url"] == shown
    for text in (str(info.data), str(err.data), str(health)):
        assert "sekrit" not in text
        assert "user" not in text


async def test_stall_mid_stream_times_out(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url, first_byte_timeout=0.3)
    fake_backend.mode = "stall"
    async with client(gw) as c:
        events = await tts_events(c)
    assert audio_of(events)  # audio came before the stall
    assert first_error(events).data["code"] == "backend-timeout"


@pytest.mark.parametrize(
    ("mode", "code"),
    [
        ("status500", "backend-error"),
        ("hang", "backend-timeout"),
        ("bad_json", "backend-bad-response"),
        ("no_text", "backend-bad-response"),
    ],
)
async def test_stt_faults(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients, mode: str, code: str
) -> None:
    gw = await make_gateway(fake_backend.url, first_byte_timeout=0.3, total_timeout=2.0)
    fake_backend.mode = mode
    async with client(gw) as c:
        assert first_error(await stt_events(c)).data["code"] == code


@pytest.mark.parametrize("mode", ["sse_garbage", "sse", "sse_no_done"])
async def test_stt_streaming_replies(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients, mode: str
) -> None:
    gw = await make_gateway(
        fake_backend.url, stt_models=("whisper-fake",), stt_streaming_models=("whisper-fake",)
    )
    fake_backend.mode = mode
    async with client(gw) as c:
        events = await stt_events(c)
        if mode == "sse_garbage":
            assert first_error(events).data["code"] == "backend-bad-response"
            return
        events += await c.read_until("transcript-stop")
    types = [e.type for e in events]
    assert types == [
        "transcript-start",
        "transcript-chunk",
        "transcript-chunk",
        "transcript",
        "transcript-stop",
    ]
    assert events[3].data["text"] == "hello world"


async def test_wav_bodies_are_decoded_and_resampled(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url)
    for mode in ("float_wav", "wav22k"):
        fake_backend.mode = mode
        async with client(gw) as c:
            events = await tts_events(c)
        rates = {e.data["rate"] for e in events if e.type in ("audio-start", "audio-chunk")}
        assert rates == {24000}
        pcm = audio_of(events)
        assert pcm
        assert len(pcm) % 2 == 0
    # float32 3000 samples -> int16; the trailing LIST chunk is not played
    fake_backend.mode = "float_wav"
    async with client(gw) as c:
        assert len(audio_of(await tts_events(c))) == 6000


async def test_streaming_failure_and_cancel_on_disconnect(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url)
    fake_backend.mode = "status500"
    async with client(gw) as c:
        await c.send(SynthesizeStart().event(), SynthesizeChunk(text="One. Two. ").event())
        assert first_error(await c.read_until("error")).data["code"] == "backend-error"
        sent = len(fake_backend.requests)
        # HA keeps writing: more text, the compatibility synthesize, the stop; none of it may
        # start new synthesis or produce a second error
        await c.send(
            SynthesizeChunk(text="Three. ").event(),
            Synthesize(text="One. Two. Three. ").event(),
            SynthesizeStop().event(),
            Describe().event(),
        )
        assert [e.type for e in await c.read_until("info")] == ["info"]
    assert len(fake_backend.requests) == sent

    fake_backend.mode = "hang"
    async with client(gw) as c:
        await c.send(
            SynthesizeStart().event(),
            SynthesizeChunk(
                text="Alpha one. Beta two. Gamma three. Delta four. Epsilon five. "
            ).event(),
        )
        for _ in range(100):
            if len(fake_backend.requests) >= sent + 4:
                break
            await asyncio.sleep(0.02)
    # disconnect: the four look-ahead requests in flight (default) are cancelled upstream
    for _ in range(100):
        if fake_backend.cancelled >= 4:
            break
        await asyncio.sleep(0.02)
    assert gw.metrics.active_sessions == 0
    assert fake_backend.cancelled == 4
    assert len(fake_backend.requests) == sent + 4  # the look-ahead of 4, not all five


async def test_keys_sent_but_never_logged_or_reported(
    fake_backend: FakeBackend,
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    key = "sk-very-secret-123"
    gw = await make_gateway(fake_backend.url, tts_key=key, stt_key=key)
    for mode in ("ok", "status500"):
        fake_backend.mode = mode
        async with client(gw) as c:
            await tts_events(c)
    assert fake_backend.auth[-1] == f"Bearer {key}"
    assert key not in caplog.text
    assert key not in str(gw.health())
    assert key not in gw.metrics.prometheus()


async def test_refused_request_does_not_mark_backend_down(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url)
    fake_backend.mode = "status404"
    async with client(gw) as c:
        err = first_error(await tts_events(c))
    assert err.data["code"] == "backend-error"
    assert "HTTP 404 voice not found" in err.data["text"]
    tts = gw.metrics.backends["tts"]
    assert tts.status == "ok"
    assert tts.last_error is not None


async def test_client_leaves_mid_audio(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    fake_backend.delay = 0.05
    gw = await make_gateway(fake_backend.url)
    for start in (
        [Synthesize(text="A long plain answer with many words in it.").event()],
        [SynthesizeStart().event(), SynthesizeChunk(text="One more. Two more. Three. ").event()],
    ):
        async with client(gw) as c:
            await c.send(*start)
            await c.read_until("audio-chunk")
        # the gateway notices, cancels, and goes on serving
        for _ in range(100):
            if gw.metrics.active_sessions == 0:
                break
            await asyncio.sleep(0.02)
        assert gw.metrics.active_sessions == 0
    fake_backend.delay = 0.0
    async with client(gw) as c:
        assert audio_of(await tts_events(c))


async def test_shutdown_tells_clients_mid_request(
    fake_backend: FakeBackend, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(fake_backend.url)
    fake_backend.mode = "hang"
    async with client(gw) as idle, client(gw) as c:
        await c.send(Synthesize(text="Never finishes.").event())
        for _ in range(100):
            if fake_backend.requests:
                break
            await asyncio.sleep(0.02)
        await gw.stop()
        err = first_error(await c.read_until("error"))
        assert err.data["code"] == "shutting-down"
        assert await idle.read() is None  # an idle connection just closes
