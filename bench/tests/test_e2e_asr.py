"""The modelled fast ASR (voice_stack_dev.speech_asr) on the speech server's own app with a
stand-in for whisper, and what the benchmark reports of it (e2e.asr, e2e.modes)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from voice_stack_bench.e2e.asr import mode_facts
from voice_stack_bench.e2e.modes import GOALS_VS_STOCK, goal
from voice_stack_dev.speech_asr import (
    MEMO_LIMIT,
    PREFIX_SAMPLES,
    AsrMemo,
    Transcriber,
    Transcript,
    speech_key,
)
from voice_stack_dev.speech_server import build_app, transcript_of
from voice_stack_dev.wavs import wav

SPEECH = struct.pack("<6h", 0, 1200, -800, 0, 300, -5)  # zeros inside the speech stay in it


def _padded(lead: int, trail: int) -> bytes:
    return bytes(2 * lead) + SPEECH + bytes(2 * trail)


def _samples(pcm: bytes) -> Any:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


def _t(*words: str, logprob: float | None = None) -> Transcript:
    return Transcript(words, logprob)


def _logprob(call: int) -> float:
    """The fake whisper's confidence on its `call`th transcription: each call's is its own."""
    return -0.125 * call


class FakeEngines:
    """Whisper and piper stand-ins: each transcription is counted and names its call."""

    def __init__(self) -> None:
        self.calls = 0

    def transcribe(self, _audio: Any, _language: str | None) -> Transcript:
        self.calls += 1
        return _t("Call", f" {self.calls}.", logprob=_logprob(self.calls))

    def sentences(self, _text: str, _speed: float) -> Iterator[Any]:
        yield np.zeros(10, dtype=np.int16)


def test_the_key_ignores_the_silence_around_the_speech_but_not_the_speech() -> None:
    # HA's audio at audio-stop and a gateway's cut at the pause: the same speech, other padding
    key = speech_key(_samples(_padded(4800, 11200)), "en")
    assert speech_key(_samples(_padded(4800, 4800)), "en") == key
    assert speech_key(_samples(_padded(0, 0)), None) == key
    changed = SPEECH[:-2] + struct.pack("<h", -6)
    assert speech_key(_samples(bytes(100) + changed), "en") != key
    assert speech_key(_samples(_padded(4800, 4800)), "de") != key


def test_configure_rejects_a_wrong_mode_or_delay_and_changes_nothing() -> None:
    memo = AsrMemo()
    assert memo.configure("gpu", 80) is not None
    for delay in (-1, 20_000, "80", True):
        assert memo.configure("fast", delay) is not None
    assert (memo.mode, memo.delay_ms) == ("real", 80.0)
    assert memo.configure("fast", 25) is None
    assert (memo.mode, memo.delay_ms) == ("fast", 25.0)
    assert memo.configure(None, None) is None
    assert (memo.mode, memo.delay_ms) == ("fast", 25.0)


def test_fast_mode_answers_from_the_first_transcript_and_counts_misses() -> None:
    memo = AsrMemo()
    memo.remember("k", _t("one", logprob=-0.3))
    memo.remember("k", _t("two", logprob=-0.9))  # the first transcript of a key stays
    assert memo.fast_answer("k") is None  # real mode: always whisper, nothing counted
    memo.configure("fast", 0)
    assert memo.fast_answer("k") == _t("one", logprob=-0.3)  # with its own confidence
    assert memo.fast_answer("other") is None
    assert (memo.hits, memo.misses) == (1, 1)


def test_the_memo_keeps_at_most_its_limit_dropping_the_oldest() -> None:
    memo = AsrMemo(mode="fast")
    for i in range(MEMO_LIMIT + 2):
        memo.remember(str(i), _t(str(i)))
    memo.remember("2", _t("again"))  # a kept key is not refreshed
    assert len(memo.transcripts) == MEMO_LIMIT
    assert memo.fast_answer("0") is None
    assert memo.fast_answer("1") is None
    assert memo.fast_answer("2") == _t("2")
    assert memo.fast_answer(str(MEMO_LIMIT + 1)) == _t(str(MEMO_LIMIT + 1))


async def test_transcriber_runs_whisper_in_real_mode_and_on_a_fast_miss_only() -> None:
    engines, memo = FakeEngines(), AsrMemo(delay_ms=0)
    transcribe = Transcriber(engines.transcribe, memo)
    audio = _samples(_padded(10, 10))
    assert await transcribe(audio, "en") == _t("Call", " 1.", logprob=_logprob(1))
    assert (await transcribe(audio, "en")).text == "Call 2."  # real: whisper every time
    memo.configure("fast", 0)
    # the first transcript of the speech, with its confidence, not the second's
    assert await transcribe(_samples(_padded(3, 0)), "en") == _t("Call", " 1.", logprob=_logprob(1))
    assert engines.calls == 2
    assert (await transcribe(_samples(SPEECH[:-2]), "en")).text == "Call 3."  # a miss
    assert (memo.state()["hits"], memo.state()["misses"]) == (1, 1)


def _segment(text: str, avg_logprob: float) -> Any:
    return SimpleNamespace(text=text, avg_logprob=avg_logprob)


def test_whispers_confidence_is_its_lowest_segments() -> None:
    segments = [_segment(" Turn off the", -0.2), _segment(" kitchen light.", -0.7)]
    heard = transcript_of(segments)
    assert (heard.text, heard.avg_logprob) == ("Turn off the kitchen light.", -0.7)
    assert heard.words[:3] == ("Turn", " off", " the")  # the SSE deltas, as before
    assert transcript_of([]) == _t()  # no speech heard: no confidence either


async def _transcribe(
    client: TestClient[Any, Any], pcm: bytes, **fields: str
) -> aiohttp.ClientResponse:
    """The response (body read) to an upload of `pcm` with these form fields."""
    form = aiohttp.FormData()
    form.add_field("file", wav(pcm, 16000), filename="a.wav", content_type="audio/wav")
    form.add_field("language", "en")
    for name, value in fields.items():
        form.add_field(name, value)
    async with client.post("/v1/audio/transcriptions", data=form) as resp:
        await resp.read()
        return resp


async def _post(client: TestClient[Any, Any], pcm: bytes) -> str:
    resp = await _transcribe(client, pcm)
    assert resp.status == 200
    text: str = (await resp.json())["text"]
    return text


async def _verbose(client: TestClient[Any, Any], pcm: bytes) -> dict[str, Any]:
    resp = await _transcribe(client, pcm, response_format="verbose_json")
    assert resp.status == 200
    body: dict[str, Any] = await resp.json()
    return body


@pytest.fixture
async def speech_client() -> Any:
    engines = FakeEngines()
    app = build_app(engines, AsrMemo())  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as client:
        yield client, engines


async def test_the_speech_server_switches_mode_and_answers_the_gateways_cut(
    speech_client: Any,
) -> None:
    client, engines = speech_client
    assert await _post(client, _padded(4800, 11200)) == "Call 1."  # primed, as HA sends it
    async with client.put("/dev/asr", json={"mode": "fast", "delay_ms": 0}) as resp:
        assert resp.status == 200
        assert (await resp.json())["mode"] == "fast"
    assert await _post(client, _padded(4800, 4800)) == "Call 1."  # the early cut: no whisper
    assert engines.calls == 1
    async with client.get("/dev/asr") as resp:
        state = await resp.json()
    assert (state["hits"], state["misses"], state["cached"]) == (1, 0, 1)
    async with client.put("/dev/asr", json={"mode": "gpu"}) as resp:
        assert resp.status == 400
    async with client.put("/dev/asr", data=b"[1]") as resp:
        assert resp.status == 400


async def test_verbose_json_carries_whispers_confidence(speech_client: Any) -> None:
    client, _engines = speech_client
    pcm = _padded(4800, 11200)
    duration = len(pcm) / 2 / 16000
    assert await _verbose(client, pcm) == {
        "task": "transcribe", "language": "en", "duration": duration, "text": "Call 1.",
        "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": duration, "text": "Call 1.",
                      "avg_logprob": _logprob(1)}],
    }  # fmt: skip


async def test_fast_mode_answers_verbose_json_with_the_primed_confidence(
    speech_client: Any,
) -> None:
    client, engines = speech_client
    rng = np.random.default_rng(7)
    room = rng.integers(-3000, 3000, 3 * PREFIX_SAMPLES, dtype=np.int16).tobytes()
    await _post(client, _padded(4800, 11200))  # call 1: primed at HA's audio-stop
    await _post(client, room[: 2 * PREFIX_SAMPLES * 2])  # call 2: a room's first part, primed
    fast = {"mode": "fast", "delay_ms": 0, "match": "prefix"}
    async with client.put("/dev/asr", json=fast) as resp:
        assert resp.status == 200
    exact = await _verbose(client, _padded(4800, 4800))  # the gateway's cut: the same speech
    assert (exact["text"], exact["segments"][0]["avg_logprob"]) == ("Call 1.", _logprob(1))
    later = await _verbose(client, room)  # runs on past the primed part: a prefix hit
    assert (later["text"], later["segments"][0]["avg_logprob"]) == ("Call 2.", _logprob(2))
    assert later["duration"] == later["segments"][0]["end"] == 3 * PREFIX_SAMPLES / 16000
    assert engines.calls == 2
    async with client.get("/dev/asr") as resp:
        state = await resp.json()
    assert (state["hits"], state["prefix_hits"], state["misses"]) == (2, 1, 0)


async def test_text_format_is_the_plain_transcript(speech_client: Any) -> None:
    client, _engines = speech_client
    resp = await _transcribe(client, _padded(0, 0), response_format="text")
    assert (resp.status, resp.content_type, await resp.text()) == (200, "text/plain", "Call 1.")


async def test_an_unknown_format_is_refused_before_whisper_runs(speech_client: Any) -> None:
    client, engines = speech_client
    resp = await _transcribe(client, _padded(0, 0), response_format="srt")
    assert resp.status == 400
    assert (await resp.json())["error"]["message"] == (
        "response_format 'srt' not supported (json, verbose_json, text)"
    )
    assert engines.calls == 0


async def test_streaming_is_sse_whatever_the_format(speech_client: Any) -> None:
    client, _engines = speech_client
    resp = await _transcribe(client, _padded(0, 0), stream="true", response_format="verbose_json")
    assert (resp.status, resp.content_type) == (200, "text/event-stream")
    events = [json.loads(line[6:]) for line in (await resp.text()).splitlines() if line]
    assert [e.get("delta") for e in events[:-1]] == ["Call", " 1."]
    assert events[-1] == {"type": "transcript.text.done", "text": "Call 1."}


def test_the_report_says_fast_mode_is_modelled_with_its_delay_and_counts() -> None:
    before = {"hits": 3, "misses": 1}
    facts = mode_facts("fast", 80.0, before, {"hits": 51, "misses": 1})
    assert (facts["modelled"], facts["delay_ms"]) == (True, 80.0)
    assert "whisper" in facts["transcript"]
    assert (facts["answered_from_whisper_transcript"], facts["misses_transcribed_by_whisper"]) == (
        48,
        0,
    )
    assert mode_facts("real", 80.0, before, before)["modelled"] is False


def _single(ratio: float | None) -> dict[str, Any]:
    total = {"end_of_speech_to_first_audio_ms": {"median": ratio, "p90": None}}
    return {"voice_stack_vs_stock": {"all": total}}


def test_each_mode_has_its_own_goal_against_stock() -> None:
    assert GOALS_VS_STOCK == {"fast": 0.6, "real": 0.82}
    assert goal("fast", _single(0.6))["first_audio_vs_stock"]["met"] is True
    assert goal("fast", _single(0.61))["first_audio_vs_stock"]["met"] is False
    assert goal("real", _single(0.8))["first_audio_vs_stock"]["met"] is True
    assert goal("real", _single(None))["first_audio_vs_stock"]["met"] is False


def test_prefix_matching_answers_with_the_longest_primed_audio_within_the_upload() -> None:
    """The room bench: noise from the first sample means no upload is ever the primed audio."""
    memo = AsrMemo(mode="fast")
    memo.remember("part1", _t("Set a timer", logprob=-0.6), "scene", 16000)
    memo.remember("whole", _t("Set a timer for five minutes", logprob=-0.2), "scene", 48000)
    assert memo.fast_answer("cut-late", "scene", 20000) is None  # exact matching by default
    assert memo.configure(None, None, "nearest") is not None
    assert memo.configure(None, None, "prefix") is None
    assert memo.fast_answer("cut-late", "scene", 20000) == _t("Set a timer", logprob=-0.6)
    whole = _t("Set a timer for five minutes", logprob=-0.2)
    assert memo.fast_answer("at-stop", "scene", 50000) == whole
    assert memo.fast_answer("too-soon", "scene", 8000) is None  # whisper runs
    assert memo.fast_answer("other", "another scene", 50000) is None
    assert (memo.hits, memo.prefix_hits, memo.misses) == (2, 2, 3)
    assert memo.state()["match"] == "prefix"
