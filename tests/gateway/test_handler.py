"""stt/handler.py: the handler acts on each turn's decisions (the decisions themselves are
test_turn.py's): a complete request answered before audio-stop, the others left to the client,
through a gateway. The fake speech server answers with the words a test chooses, and holds its
answers until the test releases them, so every test is driven by ordering (a ping is answered
only after every audio chunk before it was fed), never by the wall clock."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.ping import Ping

from voice_stack_bench.room.scene import in_room
from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_dev.procs import Service
from voice_stack_gateway.gateway import Gateway
from voice_stack_gateway.metrics import EndedBy, Kind, Metrics

from .conftest import Client, Clients, GatewayFactory, silence, speech_pcm, wait_for


def counted(metrics: Metrics) -> dict[str, int]:
    """The turn ends counted: `gateway` and `client` always, the own VAD's labels when not 0."""
    ends = metrics.turn_end.items()
    return {str(k): v for k, v in ends if v or k in (EndedBy.GATEWAY, EndedBy.CLIENT)}


# --- behind the gateway ------------------------------------------------------------------------


class Worded(FakeSpeech):
    """The fake speech server answering transcriptions with `texts` (one per request, then "heard
    N bytes"), each once `release` is set (set by default)."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []
        self.release = asyncio.Event()
        self.release.set()

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form.get("file")
        audio = upload.file.read() if isinstance(upload, web.FileField) else b""
        self.requests.append({k: v for k, v in form.items() if k != "file"} | {"bytes": len(audio)})
        await self.release.wait()
        text = self.texts.pop(0) if self.texts else f"heard {len(audio)} bytes"
        return self.transcript(f" {text} ", form.get("response_format") == "verbose_json")


@pytest_asyncio.fixture
async def worded() -> AsyncIterator[Worded]:
    fake = Worded()
    await fake.start()
    yield fake
    fake.release.set()
    await fake.stop()


@pytest.fixture(scope="module")
def phrases(speech_server: Service) -> dict[str, bytes]:
    async def make() -> dict[str, bytes]:
        texts = {"light": "Turn on the kitchen light.", "blinds": "And close the blinds."}
        return {k: await speech_pcm(speech_server.url, t) for k, t in texts.items()}

    return asyncio.run(make())


def turn_end(gw: Gateway) -> dict[str, int]:
    return counted(gw.metrics)


def early(gw: Gateway) -> dict[str, int]:
    return {str(k): v for k, v in gw.metrics.early.items()}


async def start(c: Client, pcm: bytes, language: str = "en") -> None:
    """The audio of an utterance, as fast as the socket takes it (no audio-stop)."""
    await c.send(Transcribe(language=language).event(), AudioStart(16000, 2, 1).event())
    for at in range(0, len(pcm), 2048):
        await c.send(AudioChunk(16000, 2, 1, pcm[at : at + 2048]).event())


async def fed(c: Client) -> None:
    """Every event sent before this one has been handled (the gateway answers pings in order)."""
    await c.send(Ping(text="fed").event())
    event = await c.read()
    assert event is not None
    assert (event.type, event.data.get("text")) == ("pong", "fed")


def texts(events: list[Event]) -> list[str]:
    return [f"{e.type}:{e.data.get('text', '')}" for e in events]


async def test_a_complete_request_is_answered_before_audio_stop(
    phrases: dict[str, bytes],
    worded: Worded,
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "voice_stack_gateway")
    gw = await make_gateway(worded.url)
    worded.texts = ["Turn on the kitchen light."]
    async with client(gw) as c:
        await start(c, phrases["light"] + silence(1.0))  # no audio-stop
        assert texts(await c.read_until("transcript")) == ["transcript:Turn on the kitchen light."]
        # what the client still sends for that utterance is ignored, quietly
        await c.send(AudioChunk(16000, 2, 1, phrases["blinds"]).event(), AudioStop().event())
        await fed(c)  # the next event after the transcript is this pong: nothing else came
        # and the connection goes on: the next utterance is answered as usual
        worded.texts = ["And close the blinds."]
        await start(c, phrases["blinds"] + silence(1.0))
        assert texts(await c.read_until("transcript")) == ["transcript:And close the blinds."]
    assert len(worded.requests) == 2  # one early request per utterance, no whole-audio one
    assert turn_end(gw) == {"gateway": 2, "client": 0}
    assert early(gw) == {"hit": 2, "miss": 0, "wasted": 0}
    assert gw.metrics.requests[Kind.STT] == 2
    # no audio-stop to time from: not in `stt` (audio-stop to transcript, the integration's
    # Transcription time), but timed from the end of speech, which lies >= the endpoint before
    turns, stopped = gw.metrics.latency[Kind.STT_TURN], gw.metrics.latency[Kind.STT]
    assert (turns.n, stopped.n) == (2, 0)
    assert turns.total / turns.n >= 400
    assert gw.metrics.errors == {}
    assert "Turn ended by the gateway before audio-stop: a " in caplog.text
    assert "'Turn on the kitchen light.': ends on 'light' (terminal punctuation)" in caplog.text
    assert "audio-stop after the turn ended;" in caplog.text
    metrics = gw.metrics.prometheus()
    assert 'gateway_stt_turn_end_total{by="gateway"} 2' in metrics


@pytest.mark.parametrize(
    ("text", "language", "why"),
    [
        ("Turn on the", "en", "ends on 'the', which a request cannot end on"),
        ("Turn on the kitchen light, um", "en", "ends on the filler 'um'"),
        ("Turn on the kitchen,", "en", "the transcript ends with ','"),
        ("Turn on the kitchen light.", "de", "no word table for language 'de'"),
    ],
)
async def test_an_incomplete_request_is_left_to_the_client(
    phrases: dict[str, bytes],
    worded: Worded,
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
    *,
    text: str,
    language: str,
    why: str,
) -> None:
    """HA's own hold is the fallback: the early transcript answers at audio-stop."""
    caplog.set_level(logging.DEBUG, "voice_stack_gateway")
    gw = await make_gateway(worded.url)
    worded.texts = [text]
    async with client(gw) as c:
        await start(c, phrases["light"] + silence(1.0), language)
        await wait_for(lambda: why in caplog.text)  # the early transcript was back and judged
        await fed(c)  # every chunk fed, and no transcript before the pong
        await c.send(AudioStop().event())
        assert texts(await c.read_until("transcript")) == [f"transcript:{text}"]
    assert turn_end(gw) == {"gateway": 0, "client": 1}
    assert early(gw) == {"hit": 1, "miss": 0, "wasted": 0}
    assert f"Turn left to the client's audio-stop: {text!r} does not read complete" in caplog.text


@pytest.mark.parametrize("limit", [-0.6, None])
async def test_an_unsure_transcript_needs_the_weak_endpoint(
    phrases: dict[str, bytes],
    worded: Worded,
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
    limit: float | None,
) -> None:
    """In room noise whisper makes a sentence of a cut head ("Lock the" -> "Longbow."), and is
    less sure of it than of what it heard well: below --stt-unsure-logprob the verdict is weak,
    so a pause of about 0.8 s (past the 0.7 s endpoint, short of the 1 s weak one) does not end the
    turn. Off, the same answer ends it (the test can fail)."""
    caplog.set_level(logging.DEBUG, "voice_stack_gateway")
    gw = await make_gateway(worded.url, stt_unsure_logprob=limit)
    worded.texts, worded.logprob = ["Longbow."], -0.9
    async with client(gw) as c:
        await start(c, phrases["light"] + silence(0.75))
        if limit is None:
            assert texts(await c.read_until("transcript")) == ["transcript:Longbow."]
        else:
            await wait_for(lambda: "the ASR was unsure (avg_logprob -0.90 < -0.6)" in caplog.text)
            await fed(c)  # every chunk fed, and no transcript before the pong
            await c.send(AudioStop().event())
            assert texts(await c.read_until("transcript")) == ["transcript:Longbow."]
    ended = {"gateway": 1, "client": 0} if limit is None else {"gateway": 0, "client": 1}
    assert turn_end(gw) == ended
    assert [r["response_format"] for r in worded.requests] == [
        "json" if limit is None else "verbose_json"
    ]


async def test_a_server_without_verbose_json_still_ends_turns(
    phrases: dict[str, bytes],
    fake_speech: FakeSpeech,
    make_gateway: GatewayFactory,
    client: Clients,
) -> None:
    """A server that refuses verbose_json (HTTP 400) is asked the same audio as plain json at
    once, and never asked verbose_json again for that model: the turn still ends early."""
    gw = await make_gateway(fake_speech.url)
    fake_speech.mode = "no_verbose"
    async with client(gw) as c:
        for _ in range(2):
            await start(c, phrases["light"] + silence(1.0))
            (event,) = await c.read_until("transcript")
            assert event.data["text"].startswith("heard ")
    assert [r["response_format"] for r in fake_speech.requests] == [
        "verbose_json", "json", "json"
    ]  # fmt: skip
    assert turn_end(gw) == {"gateway": 2, "client": 0}
    assert gw.ctx.verbose_refused == {fake_speech.requests[0]["model"]}
    assert gw.metrics.errors == {}


async def test_speech_after_the_cut_means_the_whole_audio(
    phrases: dict[str, bytes],
    worded: Worded,
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "voice_stack_gateway")
    gw = await make_gateway(worded.url)
    worded.release.clear()  # the early answer ("heard N bytes": complete) comes too late...
    audio = phrases["light"] + silence(0.6) + phrases["blinds"]
    async with client(gw) as c:
        await start(c, audio)
        await fed(c)  # ...after the words that followed the pause
        worded.release.set()
        await c.send(AudioStop().event())
        assert texts(await c.read_until("transcript")) == [
            f"transcript:heard {len(audio) + 44} bytes"
        ]
    assert turn_end(gw) == {"gateway": 0, "client": 1}
    assert early(gw) == {"hit": 0, "miss": 1, "wasted": 1}
    assert "Turn left to the client's audio-stop: speech after the last cut" in caplog.text


async def test_turned_off(
    phrases: dict[str, bytes], worded: Worded, make_gateway: GatewayFactory, client: Clients
) -> None:
    gw = await make_gateway(worded.url, stt_endpoint_ms=0)
    worded.texts = ["Turn on the kitchen light."]
    async with client(gw) as c:
        await start(c, phrases["light"] + silence(1.0))
        await fed(c)
        (conn,) = gw.connections
        turn = conn.stt.turn
        assert turn is not None
        assert turn.rules is None  # nothing decides the end of the turn
        assert turn.early is not None
        current = turn.early.current
        assert current is not None
        await wait_for(lambda: current.done)
        await fed(c)  # the early transcript is back, and nothing was sent
        await c.send(AudioStop().event())
        assert texts(await c.read_until("transcript")) == ["transcript:Turn on the kitchen light."]
    assert turn_end(gw) == {"gateway": 0, "client": 0}
    assert early(gw) == {"hit": 1, "miss": 0, "wasted": 0}


async def test_off_with_early_transcription_off(
    make_gateway: GatewayFactory, worded: Worded
) -> None:
    gw = await make_gateway(worded.url, stt_early_pause_ms=0)
    assert gw.ctx.stt.endpoint_ms == 0


async def test_a_streaming_model_streams_the_early_answer(
    phrases: dict[str, bytes],
    fake_speech: FakeSpeech,
    make_gateway: GatewayFactory,
    client: Clients,
) -> None:
    """The fake streams "hello" and " world" (complete): judged once the stream is done, then
    replayed as transcript-start, chunks, transcript and transcript-stop, before audio-stop."""
    gw = await make_gateway(
        fake_speech.url, stt_models=("whisper-fake",), stt_streaming_models=("whisper-fake",)
    )
    async with client(gw) as c:
        await start(c, phrases["light"] + silence(1.0))
        events = texts(await c.read_until("transcript-stop"))
        await c.send(AudioStop().event())
        await fed(c)
    assert events == [
        "transcript-start:",
        "transcript-chunk:hello",
        "transcript-chunk: world",
        "transcript:hello world",
        "transcript-stop:",
    ]
    assert turn_end(gw) == {"gateway": 1, "client": 0}


async def test_too_noisy_a_room_is_left_to_the_client(
    phrases: dict[str, bytes],
    worded: Worded,
    make_gateway: GatewayFactory,
    client: Clients,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fan as loud as the voice: the words do not end the turn, the client's audio-stop does,
    and the log and /metrics say why. HA's microVAD heard the pause after the words, so the
    transcript was under way before audio-stop (one request, no second one after it)."""
    caplog.set_level(logging.DEBUG, "voice_stack_gateway")
    audio, _last = in_room(
        "Turn on the kitchen light.", phrases["light"], "living/hvac@2", 300, 3000
    )
    gw = await make_gateway(worded.url)
    worded.texts = ["Turn on the kitchen light."]
    async with client(gw) as c:
        await start(c, audio)
        await fed(c)
        await c.send(AudioStop().event())
        assert texts(await c.read_until("transcript")) == ["transcript:Turn on the kitchen light."]
    assert len(worded.requests) == 1  # the early request, at microVAD's pause
    assert turn_end(gw) == {"gateway": 0, "client": 1}
    assert early(gw) == {"hit": 1, "miss": 0, "wasted": 0}
    assert re.search(r"Turn left to the client's audio-stop: too noisy to judge pauses \(speech "
                     r"-?\d+\.\d dB over noise at -\d+\.\d dBFS\)", caplog.text)  # fmt: skip
    assert "gateway_stt_too_noisy_total 1" in gw.metrics.prometheus()
