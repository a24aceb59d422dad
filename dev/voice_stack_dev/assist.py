"""One spoken request through a Home Assistant Assist pipeline, streamed as a satellite does.

`run_utterance` opens `assist_pipeline/run` (stt -> tts) over HA's websocket and streams the
speech in real time, in 20 ms chunks (binary frames: the handler id byte, then 16 kHz 16-bit
mono PCM) after a short lead-in and followed by real silence (0.7 s by default, `Pacing`),
stopping early when HA's own VAD ends the utterance (`stt-vad-end`) or the transcript is in
(`stt-end`: the STT no longer reads the stream), as a satellite stops streaming. A benchmark
may put the speech in a room instead (`Pacing.room`: noise throughout, the echo after the words).
It fetches the reply audio the moment the run starts (HA's TTS view answers once the first chunk
exists), so the first chunk's arrival is what a satellite would play first. Any pipeline works:
ours, or HA core's llama_cpp agent with another STT/TTS, for a side-by-side benchmark.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .assist_timings import AssistTimings, Json, Marks, PipelineEvent, extract_timings
from .ha_client import HomeAssistantApiError, HomeAssistantClient, Subscription

SAMPLE_RATE = 16000
SAMPLE_BYTES = 2
RUN_TIMEOUT = 180.0
AUDIO_GRACE = 60.0  # after run-end, the rest of the reply audio may still be streaming
QUIET_RMS = 300  # int16 RMS below this is silence (about -40 dBFS)


class AssistError(Exception):
    """The pipeline reported an error (`code` as HA names it, e.g. stt-stream-failed)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# (speech, lead_ms, total_ms) -> what a microphone in a room records: `lead_ms` before the speech,
# the speech where the dry speech is, and at least `total_ms` in all (noise throughout, the echo
# after the words). A benchmark gives it (dev/ imports nothing of bench/).
type Room = Callable[[bytes, int, int], bytes]


@dataclass(frozen=True)
class Pacing:
    """How the audio is streamed: a satellite's chunk size and the silence around speech, or the
    room the speech is heard in (`room`, given by a benchmark; None: digital silence)."""

    chunk_ms: int = 20
    lead_silence_s: float = 0.3
    trail_silence_s: float = 0.7  # at most: HA's VAD or the transcript stops it sooner
    room: Room | None = None

    @property
    def chunk_bytes(self) -> int:
        return SAMPLE_RATE * SAMPLE_BYTES * self.chunk_ms // 1000

    def audio(self, speech: bytes) -> tuple[bytes, int]:
        """All the audio streamed for `speech` (the lead-in, the speech, the trail), and where
        the speech ends in it (in bytes). In a room the audio is as long as the silent one's,
        and the speech still ends there: the end of the dry speech, its echo and noise after."""
        lead = b"\0" * int(SAMPLE_RATE * self.lead_silence_s) * SAMPLE_BYTES
        trail = b"\0" * int(SAMPLE_RATE * self.trail_silence_s) * SAMPLE_BYTES
        speech_end = len(lead) + len(speech)
        if self.room is None:
            return lead + speech + trail, speech_end
        per_ms = SAMPLE_RATE * SAMPLE_BYTES // 1000
        if len(lead) % per_ms:
            raise ValueError(f"a room needs a lead-in of whole ms, not {self.lead_silence_s} s")
        total = speech_end + len(trail)
        audio = self.room(speech, len(lead) // per_ms, -(-total // per_ms))
        if len(audio) < total:
            raise ValueError(f"the room gave {len(audio)} bytes of audio, not {total}")
        return audio[:total], speech_end


@dataclass(frozen=True)
class AssistRun:
    """What the pipeline did with one utterance."""

    transcript: str
    reply: str
    reply_type: str
    conversation_id: str | None
    engine: str  # the conversation agent the pipeline ran (intent-start)
    processed_locally: bool | None  # HA's own intents (or a sentence trigger) answered
    audio: bytes
    audio_mime: str | None
    timings: AssistTimings
    events: tuple[PipelineEvent, ...]


def trim_silence(pcm: bytes, chunk_ms: int = 20) -> bytes:
    """Speech without the quiet frames a synthesizer leaves before and after it."""
    size = SAMPLE_RATE * SAMPLE_BYTES * chunk_ms // 1000
    frames = [pcm[i : i + size] for i in range(0, len(pcm) - len(pcm) % SAMPLE_BYTES, size)]
    loud = [i for i, frame in enumerate(frames) if _rms(frame) >= QUIET_RMS]
    if not loud:
        return pcm
    return b"".join(frames[loud[0] : loud[-1] + 1])


def _rms(frame: bytes) -> float:
    samples = memoryview(frame).cast("h")
    if not samples:
        return 0.0
    return float((sum(s * s for s in samples) / len(samples)) ** 0.5)


class _Clock:
    """Monotonic moments turned into wall-clock datetimes, comparable with HA's timestamps."""

    def __init__(self) -> None:
        self._wall = datetime.now(UTC)
        self._mono = time.monotonic()

    def at(self, mono: float | None) -> datetime | None:
        return None if mono is None else self._wall + timedelta(seconds=mono - self._mono)


class _Streamer:
    """Feeds the audio in real time; stops early when told (HA's VAD ended the utterance, or
    the transcript is in)."""

    def __init__(self, ha: HomeAssistantClient, speech: bytes, pacing: Pacing) -> None:
        self._ha = ha
        self._pacing = pacing
        size = pacing.chunk_bytes
        audio, speech_end = pacing.audio(speech)
        self._frames = [audio[i : i + size] for i in range(0, len(audio), size)]
        self._last_speech = -(-speech_end // size) - 1
        self.stop = asyncio.Event()
        self.speech_end: float | None = None
        self.audio_end: float | None = None

    async def run(self, handler: int) -> None:
        prefix = bytes([handler])
        step = self._pacing.chunk_ms / 1000
        began = time.monotonic()
        for index, frame in enumerate(self._frames):
            # A microphone sends a chunk once it has been recorded: at the end of its 20 ms.
            await asyncio.sleep(max(0.0, began + (index + 1) * step - time.monotonic()))
            if self.stop.is_set():
                break
            await self._ha.send_binary(prefix + frame)
            if index == self._last_speech:
                self.speech_end = time.monotonic()
        if self.speech_end is None:  # stopped before the speech ended (HA's VAD cut it short)
            self.speech_end = time.monotonic()
        await self._ha.send_binary(prefix)  # end of audio
        self.audio_end = time.monotonic()


class _Run:
    """The state of one run while its events arrive."""

    def __init__(self, ha: HomeAssistantClient, speech: bytes, pacing: Pacing) -> None:
        self.ha = ha
        self.streamer = _Streamer(ha, speech, pacing)
        self.events: list[PipelineEvent] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.audio: tuple[bytes, float | None] = (b"", None)
        self.audio_task: asyncio.Task[tuple[bytes, float | None]] | None = None
        self.tts_mime: str | None = None

    def on_run_start(self, data: Json) -> None:
        handler = int(data["runner_data"]["stt_binary_handler_id"])
        self.tasks.append(asyncio.create_task(self.streamer.run(handler)))
        tts = data.get("tts_output") or {}
        if url := tts.get("url"):
            self.tts_mime = tts.get("mime_type")
            self.audio_task = asyncio.create_task(self.ha.download(url, limit=RUN_TIMEOUT))

    async def collect(self, messages: Subscription, deadline: float) -> None:
        """Read events until run-end; raise AssistError on the pipeline's error event."""
        while True:
            msg = await messages.next(max(1.0, deadline - time.monotonic()))
            if msg.get("type") != "event":
                continue
            event = PipelineEvent.from_message(msg["event"], datetime.now(UTC))
            self.events.append(event)
            if event.kind == "run-start":
                self.on_run_start(event.data)
            elif event.kind in ("stt-vad-end", "stt-end"):
                self.streamer.stop.set()
            elif event.kind == "error":
                raise AssistError(
                    str(event.data.get("code", "error")), str(event.data.get("message", ""))
                )
            elif event.kind == "run-end":
                return

    async def finish(self) -> None:
        """The streamer's own errors surface here; the reply audio is read to its end."""
        for task in self.tasks:
            await task
        if self.audio_task is not None:
            async with asyncio.timeout(AUDIO_GRACE):
                self.audio = await self.audio_task

    async def cancel(self) -> None:
        """Stop whatever still runs (after an error) and reap it."""
        for task in [*self.tasks, self.audio_task]:
            if task is None:
                continue
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, HomeAssistantApiError):
                await task


async def run_utterance(
    ha: HomeAssistantClient,
    pipeline_id: str,
    speech: bytes,
    *,
    conversation_id: str | None = None,
    pacing: Pacing | None = None,
    limit_s: float = RUN_TIMEOUT,
) -> AssistRun:
    """Speak `speech` (16 kHz 16-bit mono PCM, speech only) into the pipeline and time it.

    `conversation_id` continues a conversation (HA keeps its chat log for 5 minutes);
    `limit_s` bounds the whole run (HA's own pipeline timeout too).
    Raises AssistError when the pipeline fails and HomeAssistantApiError when HA does not answer.
    """
    clock = _Clock()
    run = _Run(ha, speech, pacing or Pacing())
    payload: Json = {
        "start_stage": "stt",
        "end_stage": "tts",
        "pipeline": pipeline_id,
        "input": {"sample_rate": SAMPLE_RATE},
        "timeout": limit_s,
    }
    if conversation_id is not None:
        payload["conversation_id"] = conversation_id
    try:
        async with ha.subscribe("assist_pipeline/run", **payload) as messages:
            ack = await messages.next(30)
            if not ack.get("success", True):
                error = ack.get("error") or {}
                raise AssistError(str(error.get("code")), str(error.get("message")))
            await run.collect(messages, time.monotonic() + limit_s)
        await run.finish()
    except TimeoutError as err:
        raise HomeAssistantApiError(
            "reply audio", f"still streaming {AUDIO_GRACE:.0f} s after the run ended"
        ) from err
    finally:
        await run.cancel()
    return _result(run, clock)


def _result(run: _Run, clock: _Clock) -> AssistRun:
    events = run.events
    marks = Marks(
        speech_end=clock.at(run.streamer.speech_end) or datetime.now(UTC),
        audio_end_sent=clock.at(run.streamer.audio_end),
        first_audio=clock.at(run.audio[1]),
    )
    stt_end = next((e.data for e in events if e.kind == "stt-end"), {})
    intent_start = next((e.data for e in events if e.kind == "intent-start"), {})
    intent_end = next((e.data for e in events if e.kind == "intent-end"), {})
    output = intent_end.get("intent_output") or {}
    response = output.get("response") or {}
    speech = (response.get("speech") or {}).get("plain") or {}
    return AssistRun(
        transcript=str((stt_end.get("stt_output") or {}).get("text", "")),
        reply=str(speech.get("speech", "")),
        reply_type=str(response.get("response_type", "")),
        conversation_id=output.get("conversation_id"),
        engine=str(intent_start.get("engine", "")),
        processed_locally=intent_end.get("processed_locally"),
        audio=run.audio[0],
        audio_mime=run.tts_mime,
        timings=extract_timings(events, marks),
        events=tuple(events),
    )
