"""The assist runner's audio framing (its runs against a real HA are in test_demo.py)."""

from __future__ import annotations

import array
import asyncio
import time

import pytest

from voice_stack_dev.assist import Pacing, _Run, trim_silence
from voice_stack_dev.assist_timings import Json
from voice_stack_dev.ha_client import Subscription


def _pcm(*samples: int, repeat: int = 320) -> bytes:
    return array.array("h", [s for s in samples for _ in range(repeat)]).tobytes()


def test_trim_silence_keeps_speech_between_quiet_frames() -> None:
    quiet, loud = _pcm(0, 10, 0), _pcm(3000, -3000)
    assert trim_silence(quiet + loud + quiet) == loud
    assert trim_silence(quiet) == quiet  # nothing loud: nothing to trim to


def test_pacing_is_a_satellites_20_ms_of_16_khz_audio() -> None:
    assert Pacing().chunk_bytes == 640
    assert (Pacing().lead_silence_s, Pacing().trail_silence_s) == (0.3, 0.7)


class _Ha:
    """Stands in for HA's websocket: records the binary frames, and the moment the last speech
    frame is sent queues `stop_on` (HA's VAD ending the utterance, or the transcript)."""

    def __init__(self, events: asyncio.Queue[Json], last_speech: bytes, stop_on: str) -> None:
        self.frames: list[bytes] = []
        self._events = events
        self._last_speech = last_speech
        self._stop_on = stop_on

    async def send_binary(self, data: bytes) -> None:
        self.frames.append(data)
        if data[1:] == self._last_speech:
            self._events.put_nowait(_event(self._stop_on, {}))
            self._events.put_nowait(_event("run-end", {}))


def _event(kind: str, data: Json) -> Json:
    return {"type": "event", "event": {"type": kind, "data": data}}


@pytest.mark.parametrize("stop_on", ["stt-end", "stt-vad-end"])
async def test_streaming_stops_once_the_transcript_or_has_vad_ends_it(stop_on: str) -> None:
    """A satellite stops streaming when HA's VAD ends the utterance or the transcript is in:
    of a 2 s tail of silence nothing after that moment is sent, only the end of the audio.
    (The event is read before the next frame is due: asyncio runs a ready task before a timer.)"""
    pacing = Pacing(lead_silence_s=0.0, trail_silence_s=2.0)
    speech = _pcm(3000, -3000)  # two 20 ms frames
    events: asyncio.Queue[Json] = asyncio.Queue()
    ha = _Ha(events, speech[640:], stop_on)
    run = _Run(ha, speech, pacing)  # type: ignore[arg-type]
    events.put_nowait(_event("run-start", {"runner_data": {"stt_binary_handler_id": 7}}))
    await run.collect(Subscription("assist_pipeline/run", 1, events), time.monotonic() + 30)
    await run.finish()
    assert ha.frames == [b"\x07" + speech[:640], b"\x07" + speech[640:], b"\x07"]
    assert run.streamer.speech_end is not None
    assert run.streamer.audio_end is not None
