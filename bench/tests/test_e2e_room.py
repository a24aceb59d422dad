"""voice_e2e.py --room: the assist runner streams exactly the audio `Pacing.room` gives, and marks
the end of speech at the dry speech's end; without a room it streams what it always did."""

from __future__ import annotations

import array
import asyncio
import time

from voice_stack_bench.e2e.room import RoomUtterance
from voice_stack_bench.e2e.turns import HOLDS, PACING, Utterance
from voice_stack_dev.assist import Pacing, _Run
from voice_stack_dev.assist_timings import Json
from voice_stack_dev.ha_client import Subscription

CHUNK = 640  # 20 ms of 16 kHz 16-bit mono


def _speech(n_samples: int) -> bytes:
    return array.array("h", [3000 if i % 2 else -3000 for i in range(n_samples)]).tobytes()


class _Room:
    """A room that hears every sample as 7, one more ms than asked for; records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, int, int]] = []

    def __call__(self, speech: bytes, lead_ms: int, total_ms: int) -> bytes:
        self.calls.append((speech, lead_ms, total_ms))
        return array.array("h", [7] * ((total_ms + 1) * 16)).tobytes()


class _Ha:
    """HA's websocket: records each binary frame and when it was sent; run-end after the end of
    the audio (the handler id alone)."""

    def __init__(self, events: asyncio.Queue[Json]) -> None:
        self.sent: list[tuple[float, bytes]] = []
        self._events = events

    async def send_binary(self, data: bytes) -> None:
        self.sent.append((time.monotonic(), data))
        if len(data) == 1:
            self._events.put_nowait({"type": "event", "event": {"type": "run-end", "data": {}}})


async def _stream(speech: bytes, pacing: Pacing) -> tuple[_Ha, _Run]:
    events: asyncio.Queue[Json] = asyncio.Queue()
    ha = _Ha(events)
    run = _Run(ha, speech, pacing)  # type: ignore[arg-type]
    start = {"runner_data": {"stt_binary_handler_id": 7}}
    events.put_nowait({"type": "event", "event": {"type": "run-start", "data": start}})
    await run.collect(Subscription("assist_pipeline/run", 1, events), time.monotonic() + 30)
    await run.finish()
    return ha, run


async def test_a_room_is_streamed_as_given_and_the_speech_ends_where_the_dry_one_does() -> None:
    room = _Room()
    speech = _speech(2 * 320 + 8)  # 40.5 ms: the speech ends inside the third frame
    pacing = Pacing(lead_silence_s=0.04, trail_silence_s=0.06, room=room)
    ha, run = await _stream(speech, pacing)
    lead, total = 1280, 1280 + len(speech) + 1920
    assert room.calls == [(speech, 40, -(-total // 32))]
    sent = b"".join(data[1:] for _at, data in ha.sent)
    assert sent == room(speech, 40, 200)[:total]  # what the room gave, cut to the silent length
    assert [data[:1] for _at, data in ha.sent] == [b"\x07"] * len(ha.sent)
    assert ha.sent[-1][1] == b"\x07"  # then the end of the audio
    # the end of speech: once the frame holding the dry speech's last sample is sent
    last = (lead + len(speech) - 1) // CHUNK
    assert run.streamer.speech_end is not None
    assert ha.sent[last][0] <= run.streamer.speech_end < ha.sent[last + 1][0]


def test_without_a_room_the_speech_is_streamed_between_silences_as_before() -> None:
    speech = _speech(1000)
    for pacing in (Pacing(), PACING, *HOLDS.values()):
        lead = bytes(int(16000 * pacing.lead_silence_s) * 2)
        trail = bytes(int(16000 * pacing.trail_silence_s) * 2)
        assert pacing.audio(speech) == (lead + speech + trail, len(lead) + len(speech))
    assert Pacing().room is None
    assert Utterance("t", speech).as_sent == Pacing().audio(speech)[0]


def test_the_floor_uploads_the_rooms_audio_as_ha_sent_it() -> None:
    room, speech = _Room(), _speech(1000)
    sent = Pacing(room=room)
    utterance = RoomUtterance("t", speech, sent)
    assert utterance.as_sent == sent.audio(speech)[0]
    assert len(utterance.as_sent) == len(Utterance("t", speech).as_sent)
    assert set(utterance.as_sent) == {7, 0}  # the room's audio, not silence
