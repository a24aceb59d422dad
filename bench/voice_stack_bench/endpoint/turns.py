"""One turn through a gateway as Home Assistant's Wyoming STT streams it (real time, 20 ms
chunks, HA's own segmenter deciding when audio-stop is sent), and how it is scored against its
utterance: shared by bench/endpoint_bench.py (the cut-off corpus) and bench/room_bench.py."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient

from ..asr_server import AsrServer, transcribe
from .corpus import BYTES_PER_MS, RATE, Spoken, normalize, word_error_rate
from .ha_hold import HaHold

LEAD_MS, CAP_MS, CHUNK_MS = 300, 15000, 20
CHUNK_BYTES = CHUNK_MS * BYTES_PER_MS
# what one turn can fail with (the gateway's error event, a closed connection, a timeout, the
# speech server's HTTP error): recorded for that utterance and setting, and the run goes on
TURN_ERRORS = (RuntimeError, OSError, aiohttp.ClientError)


@dataclass(frozen=True)
class Outcome:
    """One turn, in ms of audio from the stream's start."""

    ended_at: float  # when HA stopped listening
    transcript_at: float  # when the transcript was there
    by: str  # gateway | ha_hold | ha_timeout | cap
    text: str
    lag_ms: float = 0.0  # the stream's lag, taken out of both times (`Pacing`); 0: not streamed


class Pacing:
    """How far behind the microphone's clock the bench sent its last chunk. One event loop runs
    every lane's turns and HA segmenters, so on a busy machine it falls a few ms behind; a
    satellite's chunks are not late for that reason, so the lag is taken out of the times."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0  # the stream's start on the loop's clock
        self.lag_ms = 0.0

    def sent(self, audio_ms: float, now: float) -> None:
        """A chunk ending `audio_ms` into the stream was written at `now` (the loop's clock)."""
        self.lag_ms = max(0.0, (now - self.t0) * 1000 - audio_ms)

    def since_start(self, now: float) -> float:
        """ms from the stream's start to `now`, less the lag: on the microphone's clock."""
        return (now - self.t0) * 1000 - self.lag_ms


async def _receive(client: AsyncTcpClient, pacing: Pacing) -> tuple[str, float, float]:
    """The transcript, when it came on the microphone's clock, and the lag taken out then."""
    loop = asyncio.get_running_loop()
    while True:
        event = await client.read_event()
        if event is None:
            raise RuntimeError("the gateway closed the connection without a transcript")
        if event.type == "error":
            raise RuntimeError(f"the gateway answered an error: {event.data}")
        if Transcript.is_type(event.type):
            text = Transcript.from_event(event).text
            return text, pacing.since_start(loop.time()), pacing.lag_ms


async def _upload(
    client: AsyncTcpClient, audio: bytes, hold: HaHold | None, pacing: Pacing
) -> tuple[float, str]:
    """The audio in real time until HA's hold ends it (or the cap); (its end in ms, why)."""
    loop = asyncio.get_running_loop()
    for i, at in enumerate(range(0, len(audio), CHUNK_BYTES)):
        # a microphone sends a chunk once it has been recorded: at the end of its 20 ms
        await asyncio.sleep(max(0.0, pacing.t0 + (i + 1) * CHUNK_MS / 1000 - loop.time()))
        chunk = audio[at : at + CHUNK_BYTES]
        n = hold.feed(chunk) if hold is not None else len(chunk)
        if n:
            await client.write_event(AudioChunk(RATE, 2, 1, chunk[:n]).event())
        if hold is not None and hold.ended:
            await client.write_event(AudioStop().event())
            pacing.sent((i + 1) * CHUNK_MS, loop.time())
            return hold.passed_ms, "ha_timeout" if hold.timed_out else "ha_hold"
        pacing.sent((i + 1) * CHUNK_MS, loop.time())
    await client.write_event(AudioStop().event())
    return len(audio) / BYTES_PER_MS, "cap"


async def stream_turn(port: int, audio: bytes, hold: HaHold | None) -> Outcome:
    """One utterance through the gateway as HA's Wyoming STT sends it; `hold` (a fresh one per
    turn) decides audio-stop, None: no audio-stop before the audio's end. Times are on the
    microphone's clock: the bench's own lag in sending the audio is taken out (`Pacing`)."""
    loop = asyncio.get_running_loop()
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Transcribe(language="en").event())
        await client.write_event(AudioStart(RATE, 2, 1).event())
        pacing = Pacing(loop.time())
        upload = asyncio.create_task(_upload(client, audio, hold, pacing))
        receive = asyncio.create_task(_receive(client, pacing))
        try:
            done, _ = await asyncio.wait((upload, receive), return_when=asyncio.FIRST_COMPLETED)
            if receive in done:
                text, at, lag = receive.result()
                return Outcome(at, at, "gateway", text, lag)
            stopped, why = upload.result()
            text, at, lag = await asyncio.wait_for(receive, 60)
            return Outcome(stopped, at, why, text, lag)
        finally:
            for task in (upload, receive):
                task.cancel()
            await asyncio.gather(upload, receive, return_exceptions=True)


def held_audio(audio: bytes, end: float | None) -> tuple[float, bytes]:
    """A hold's end (the whole audio when it did not end) and the audio up to there."""
    ended = end if end is not None else len(audio) / BYTES_PER_MS
    return ended, audio[: int(ended) * BYTES_PER_MS]


def decided_ms(end: float) -> float:
    """When HA can know its hold ended the audio at `end`: once the chunk holding the audio it
    ended on has arrived, at that CHUNK_MS chunk's end (its segmenter judges 10 ms pieces, so
    `end` falls 10 or 20 ms before). A gateway's turn behind the hold starts from there too."""
    return (end // CHUNK_MS + 1) * CHUNK_MS


async def ha_hold_turn(
    session: aiohttp.ClientSession, asr: AsrServer, audio: bytes, end: float | None
) -> Outcome:
    """HA's hold alone: where it ends the audio, then, from when it could know (`decided_ms`),
    the ASR server's transcript of it."""
    ended, held = held_audio(audio, end)
    text, asr_ms = await transcribe(session, asr, held)
    decided = ended if end is None else decided_ms(end)  # None: the stream's last chunk ended
    return Outcome(ended, decided + asr_ms, "ha_hold" if end is not None else "cap", text)


def score(spoken: Spoken, outcome: Outcome) -> dict[str, Any]:
    """One turn against its utterance: times from the last word (and the pause), the words."""
    last = LEAD_MS + spoken.spans_ms[-1][1]
    pause = LEAD_MS + spoken.spans_ms[0][1] if len(spoken.spans_ms) > 1 else None
    return {
        "ended_ms": round(outcome.ended_at - last, 1),
        "after_pause_ms": None if pause is None else round(outcome.ended_at - pause, 1),
        "transcript_ms": round(outcome.transcript_at - last, 1),
        "by": outcome.by,
        "cut_short": outcome.ended_at < last,
        "transcript": outcome.text,
        "exact": normalize(outcome.text) == normalize(spoken.entry.text),
        "wer": round(word_error_rate(spoken.entry.text, outcome.text), 3),
        "stream_lag_ms": round(outcome.lag_ms, 1),
    }


def failed(err: BaseException) -> dict[str, Any]:
    """A turn that failed: its row is the error alone (report.py leaves it out of the figures
    and lists it)."""
    return {"error": f"{type(err).__name__}: {err}"}


_TURN = re.compile(r"Turn (?:ended by|left to) .*$|STT answered by .*$")
# a quoted transcript: its apostrophes inside words ("What's") are its own, "client's" is not one
_QUOTED = re.compile(r"(?<!\w)'(?:[^']|'(?=\w))*'(?!\w)|\"[^\"]*\"")


def turn_reasons(log_path: Path, start: int = 0) -> dict[str, int]:
    """Why the gateway ended or left each turn, and what answered it (an early transcription,
    counted from 1, or the whole audio after audio-stop): its debug log from byte `start`,
    warm-up included, counted with the words and figures taken out."""
    reasons: Counter[str] = Counter()
    with log_path.open("rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    for line in text.splitlines():
        if match := _TURN.search(line):
            why = _QUOTED.sub("'...'", match.group(0))
            reasons[re.sub(r"\d+", "N", why)] += 1
    return dict(reasons.most_common())
