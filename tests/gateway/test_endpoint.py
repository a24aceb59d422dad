"""endpoint.py: the gateway ends a turn itself when an early transcript reads complete after a
long enough pause. First the decision alone (frames scripted, requests stood in for), then the
protocol behind a gateway: the fake speech server answers with the words a test chooses, and
holds its answers until the test releases them, so every test is driven by ordering (a ping is
answered only after every audio chunk before it was fed), never by the wall clock."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import cast

import pytest
import pytest_asyncio
from aiohttp import web
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.ping import Ping

from voice_stack_dev.fakes.speech import FakeSpeech
from voice_stack_dev.procs import Service
from voice_stack_gateway.early import EarlyTranscription, PauseDetector
from voice_stack_gateway.endpoint import TurnEnd
from voice_stack_gateway.gateway import Gateway
from voice_stack_gateway.metrics import EndedBy, Kind, Metrics
from voice_stack_gateway.own_vad import Without
from voice_stack_gateway.transcription import Transcription
from voice_stack_gateway.vad import FRAME_BYTES

from .conftest import Client, Clients, GatewayFactory, silence, speech_pcm, wait_for
from .test_early import Scripted

LOUD, QUIET = b"\xff\x7f" * (FRAME_BYTES // 2), bytes(FRAME_BYTES)


class Request:
    """Stands in for an early backend request: done when the test says, with a text."""

    def __init__(self) -> None:
        self.done = False
        self.text: str | None = None
        self.cancelled = False
        self._finished = asyncio.Event()

    def answer(self, text: str | None) -> None:
        self.done, self.text = True, text
        self._finished.set()

    async def finished(self) -> None:
        await self._finished.wait()

    def cancel(self) -> None:
        self.cancelled = True

    async def close(self) -> None:
        self.cancelled = True


class Turn:
    """An EarlyTranscription on scripted frames, and a TurnEnd over it."""

    def __init__(
        self,
        endpoint_ms: int = 400,
        pause_ms: int = 300,
        accept: bool = True,
        hold_ms: int | None = None,
        weak_ms: int = 0,
    ) -> None:
        self.metrics = Metrics("http://a/v1", "http://b/v1")
        self.requests: list[Request] = []
        self.accept = accept
        self.ended: list[Request | Without] = []
        start = cast(Callable[[], Transcription], self._start)
        self.early = EarlyTranscription(self.metrics, start, pause_ms, 3)
        self.early._detector = PauseDetector(pause_ms, Scripted())
        self.turn = TurnEnd(
            self.metrics, self.early, endpoint_ms, "en", self._end, weak_ms=weak_ms, hold_ms=hold_ms
        )

    def _start(self) -> Request:
        self.requests.append(Request())
        return self.requests[-1]

    def _end(self, answer: Transcription | Without) -> bool:
        if self.accept:
            self.ended.append(answer if isinstance(answer, Without) else cast(Request, answer))
        return self.accept

    def feed(self, frame: bytes, count: int) -> None:
        self.early.feed(frame * count)
        self.turn.check()

    async def answered_at_the_cut(self, text: str | None) -> None:
        """A second of speech, the 300 ms pause that cuts it, and the early request's answer."""
        self.feed(LOUD, 20)
        self.feed(QUIET, 15)  # the cut: 300 ms
        self.requests[0].answer(text)
        await settle()

    def counts(self) -> dict[str, int]:
        return counted(self.metrics)


def counted(metrics: Metrics) -> dict[str, int]:
    """The turn ends counted: `gateway` and `client` always, the own VAD's labels when not 0."""
    ends = metrics.turn_end.items()
    return {str(k): v for k, v in ends if v or k in (EndedBy.GATEWAY, EndedBy.CLIENT)}


async def settle() -> None:
    """Let the watcher of a request just answered run (it is one task hop away)."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_the_transcript_back_before_the_pause_is_long_enough() -> None:
    t = Turn()
    t.feed(LOUD, 20)
    t.feed(QUIET, 15)  # the cut: 300 ms
    assert len(t.requests) == 1
    t.requests[0].answer("Turn on the kitchen light.")
    await settle()
    assert not t.ended
    assert "the pause was 300 ms" in t.turn.why
    t.feed(QUIET, 4)  # 380 ms
    assert not t.ended
    t.feed(QUIET, 1)  # 400 ms
    assert t.ended == [t.requests[0]]
    assert t.early.current is None  # taken: the utterance no longer drops it
    assert t.counts() == {"gateway": 1, "client": 0}
    t.turn.left()  # audio-stop after the gateway's answer: nothing more is counted
    assert t.counts() == {"gateway": 1, "client": 0}
    await t.turn.close()


async def test_the_pause_long_enough_before_the_transcript_is_back() -> None:
    t = Turn()
    t.feed(LOUD, 20)
    t.feed(QUIET, 40)
    assert not t.ended
    assert "was not back yet" in t.turn.why
    t.requests[0].answer("Turn on the kitchen light.")
    await settle()  # the watcher ends the turn
    assert t.ended == [t.requests[0]]
    await t.turn.close()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("Turn on the", "'Turn on the' does not read complete: ends on 'the'"),
        (None, "early transcription 1 failed"),
    ],
)
async def test_no_end_without_a_complete_transcript(text: str | None, why: str) -> None:
    t = Turn()
    t.feed(LOUD, 20)
    t.feed(QUIET, 40)
    t.requests[0].answer(text)
    await settle()
    t.feed(QUIET, 40)
    assert not t.ended
    assert why in t.turn.why
    t.turn.left()
    assert t.counts() == {"gateway": 0, "client": 1}
    await t.turn.close()


async def test_speech_after_the_cut_blocks_the_end() -> None:
    """Speech too short to drop the early request (under 100 ms) still means it misses words."""
    t = Turn(endpoint_ms=100)  # shorter than the cut's pause, so only that rule stops it
    t.feed(LOUD, 20)
    t.feed(QUIET, 15)
    t.requests[0].answer("Turn on the kitchen light.")
    t.feed(LOUD, 3)
    t.feed(QUIET, 6)  # 120 ms of pause after the 60 ms of speech: no new cut yet
    await settle()
    assert not t.ended
    assert t.turn.why == "speech after the last cut"
    t.feed(QUIET, 9)  # a new cut: a new request, not back yet
    assert len(t.requests) == 2
    assert t.requests[0].cancelled
    await settle()
    assert not t.ended
    t.requests[1].answer("Turn on the kitchen light, and the hall.")
    await settle()
    assert t.ended == [t.requests[1]]
    await t.turn.close()


async def test_an_answer_still_being_sent_defers_the_end() -> None:
    t = Turn(accept=False)
    t.feed(LOUD, 20)
    t.feed(QUIET, 40)
    t.requests[0].answer("Turn on the kitchen light.")
    await settle()
    assert "still being sent" in t.turn.why
    t.accept = True
    t.feed(QUIET, 1)  # the next chunk tries again
    assert t.ended == [t.requests[0]]
    await t.turn.close()


async def test_a_weakly_complete_transcript_waits_for_the_weak_endpoint() -> None:
    """What tiny.en heard for a cut "Dim the lights in the", "Dim the lights in there.", ends
    the turn only after the longer weak endpoint; a strong verdict at the short one."""
    t = Turn(weak_ms=700)
    await t.answered_at_the_cut("Dim the lights in there.")
    t.feed(QUIET, 19)  # 680 ms
    assert not t.ended
    assert "reads complete only weakly" in t.turn.why
    assert "the pause was 680 ms (< the weak endpoint's 700 ms)" in t.turn.why
    t.feed(QUIET, 1)  # 700 ms
    assert t.ended == [t.requests[0]]
    assert t.counts() == {"gateway": 1, "client": 0}
    await t.turn.close()

    strong = Turn(weak_ms=700)
    await strong.answered_at_the_cut("Dim the lights in the dining room.")
    strong.feed(QUIET, 5)  # 400 ms
    assert strong.ended == [strong.requests[0]]
    await strong.turn.close()


@pytest.mark.parametrize("weak_ms", [0, 300, 400])
async def test_a_weak_endpoint_no_longer_than_the_endpoint_is_one_tier(weak_ms: int) -> None:
    t = Turn(weak_ms=weak_ms)
    await t.answered_at_the_cut("Remind me too.")
    t.feed(QUIET, 4)  # 380 ms
    assert not t.ended
    assert t.turn.why == "'Remind me too.' reads complete, but the pause was 380 ms"
    t.feed(QUIET, 1)  # 400 ms
    assert t.ended == [t.requests[0]]
    await t.turn.close()


async def test_no_cut_no_request() -> None:
    t = Turn()
    t.feed(LOUD, 20)
    t.feed(QUIET, 10)
    assert t.turn.why == "no pause after speech"
    t.turn.left()
    assert t.counts() == {"gateway": 0, "client": 1}
    await t.turn.close()


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
        return web.json_response({"text": f" {text} "})


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
    assert gw.metrics.latency[Kind.STT].n == 2
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
        utterance = conn.stt.utterance
        assert utterance is not None
        assert utterance.turn is None  # nothing watches for the end of the turn
        assert utterance.early is not None
        current = utterance.early.current
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
