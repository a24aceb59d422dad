"""A connection's speech-to-text requests. Each utterance is a `Turn`: its audio (utterance.py),
its early requests (early.py) and what is known of it. After every chunk and every early
result the handler asks `decide` (turn.py) what to do, and is the only code that acts on the
answer: wait (audio-stop's log line asks it why), or end the turn before audio-stop with the
early transcript, as at audio-stop, or with an empty transcript (answer.py). What the client
still sends for a turn that has ended is ignored."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field, replace

from wyoming.event import Event

from ..errors import BAD_REQUEST, GatewayError
from ..metrics import EarlyResult, EndedBy, Kind
from ..session import Jobs, SessionContext, Sink
from . import answer
from .complete import Verdict, judge, unsure
from .early import EarlyTranscription
from .transcription import Transcription
from .turn import Answer, End, Happening, Heard, Phase, Rules, decide
from .utterance import Utterance
from .vad import SETTLE_MS, SpeechFrames, own_vad_frames

_LOGGER = logging.getLogger(__name__)


@dataclass(eq=False)
class Turn:
    """One utterance and what is known of its turn. `early` is None with early transcription
    off, `rules` with the end of turn off (the client's audio-stop then ends every turn)."""

    utterance: Utterance
    early: EarlyTranscription | None
    rules: Rules | None
    phase: Phase = Phase.LISTENING
    ignored_bytes: int = 0  # audio the client sent after the gateway ended the turn
    watchers: set[asyncio.Task[None]] = field(default_factory=set)
    _watched: Transcription | None = None
    _verdict: tuple[Transcription, Verdict] | None = None

    @property
    def listening(self) -> bool:
        return self.phase in (Phase.LISTENING, Phase.CUT)

    def heard(self, busy: bool) -> Heard:
        early = self.early
        assert early is not None  # rules need early transcription
        current = early.current
        self.phase = Phase.LISTENING if current is None else Phase.CUT
        known = Heard(
            early.audio_ms, early.speech_ms, early.pause_ms, early.hold_pause_ms,
            early.past_ha_hold_ms, early.sounding, early.cuts, early.speech_after_cut,
            busy=busy, noisy=self.noisy(), cut_past_ha_hold=early.cut_past_ha_hold,
        )  # fmt: skip
        if current is None:
            return known
        if current.text is None:
            return replace(known, early="failed" if current.done else "pending")
        words = current.text.strip()
        return replace(known, early="back", words=words, verdict=self._judge(current, words))

    def noisy(self) -> str | None:
        """The room's measure when it is too noisy to judge pauses; None otherwise."""
        if self.early is None or not self.early.noise.too_noisy:
            return None
        noise = self.early.noise
        return f"speech {noise.snr_db or 0:.1f} dB over noise at {noise.noise_dbfs:.1f} dBFS"

    def _judge(self, transcription: Transcription, words: str) -> Verdict:
        """Each early transcript is judged once."""
        if self._verdict is None or self._verdict[0] is not transcription:
            assert self.early is not None
            verdict = judge(words, self.utterance.language)
            limit = self.utterance.ctx.stt.unsure_logprob
            self._verdict = (transcription, unsure(verdict, transcription.confidence, limit))
            _LOGGER.debug("Early transcript %d: %r: %s", self.early.cuts, words, self._verdict[1])
        return self._verdict[1]

    def unwatched(self) -> Transcription | None:
        """The early request of the last cut, the first time it is asked for (to be watched)."""
        current = self.early.current if self.early is not None else None
        if current is None or current is self._watched:
            return None
        self._watched = current
        return current

    async def close(self) -> None:
        """End its requests and let go of its audio at once (no reference cycle is left for the
        cyclic GC: a soak's heap grew while turns waited for it)."""
        watchers, self.watchers = set(self.watchers), set()
        for task in watchers:
            task.cancel()
        for task in watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        early, self.early, self._watched, self._verdict = self.early, None, None, None
        if early is not None:
            await early.close()
        self.utterance.release()


class SttHandler:
    def __init__(self, ctx: SessionContext, sink: Sink, jobs: Jobs) -> None:
        self.ctx = ctx
        self.sink = sink
        self.jobs = jobs
        self.model: str | None = None  # pinned by select-program
        self.turn: Turn | None = None

    @property
    def active(self) -> bool:
        """Audio is coming in (and its turn is not over)."""
        turn = self.turn
        return turn is not None and turn.utterance.started and turn.listening

    def _new(self, name: object = None, language: object = None) -> Turn:
        ctx, opts = self.ctx, self.ctx.stt
        model = ctx.catalog.current.stt_model(name, self.model)
        language = language if isinstance(language, str) else None
        utterance = Utterance(ctx, model, language, listen=bool(opts.early_pause_ms))
        if not opts.early_pause_ms:
            return Turn(utterance, None, None)
        early = EarlyTranscription(
            ctx.metrics,
            utterance.snapshot_request,
            opts.early_pause_ms,
            opts.early_max,
            # own VAD: no HA VAD to leave it to, so the gateway counts HA's hold itself
            own_vad_frames(opts.ha_hold_ms) if opts.own_vad else SpeechFrames(SETTLE_MS),
        )
        hold = opts.incomplete_hold_ms if opts.own_vad else None
        rules = Rules.of(opts.endpoint_ms, opts.endpoint_weak_ms, hold, language)
        return Turn(utterance, early, rules if opts.endpoint_ms else None)

    async def _replace(self, turn: Turn | None) -> None:
        old, self.turn = self.turn, turn
        if old is not None:
            await old.close()

    async def transcribe(self, event: Event) -> None:
        await self.jobs.wait()
        await self._replace(self._new(event.data.get("name"), event.data.get("language")))

    async def audio_start(self, event: Event) -> None:
        await self.jobs.wait()
        current = self.turn
        if current is None or current.utterance.started or current.utterance.failed:
            await self._replace(self._new())
        assert self.turn is not None
        self.turn.utterance.start(event.data)

    def audio_chunk(self, event: Event) -> None:
        if self.turn is None:
            self.turn = self._new()
        turn = self.turn
        if not turn.listening:
            turn.ignored_bytes += len(event.payload or b"")
            return
        pcm = turn.utterance.add(event.data, event.payload)
        if pcm is not None and turn.early is not None:
            turn.early.feed(pcm)
            self._decide(turn, Happening.AUDIO)

    def _decide(self, turn: Turn, happening: Happening) -> None:
        if turn is not self.turn or turn.rules is None or not turn.listening:
            return
        decision = decide(turn.rules, turn.heard(self.jobs.busy), happening)
        if isinstance(decision, End):
            self._end(turn, decision)
            return
        if (request := turn.unwatched()) is not None:
            task = asyncio.create_task(self._watch(turn, request), name="stt turn end")
            turn.watchers.add(task)
            task.add_done_callback(turn.watchers.discard)

    async def _watch(self, turn: Turn, request: Transcription) -> None:
        await request.finished()
        self._decide(turn, Happening.EARLY_RESULT)

    def _end(self, turn: Turn, decision: End) -> None:
        """The gateway ends the turn before audio-stop: its answer starts now."""
        metrics = self.ctx.metrics
        turn.phase = Phase.ENDED
        metrics.requests[Kind.STT] += 1
        metrics.turn_end[decision.by] += 1
        metrics.too_noisy += turn.noisy() is not None
        who = "the gateway" if decision.by is EndedBy.GATEWAY else "the gateway's own VAD"
        _LOGGER.debug("Turn ended by %s before audio-stop: %s", who, decision.why)
        transcription, pause_ms = None, 0
        if decision.answer is Answer.EARLY:
            assert turn.early is not None
            pause_ms = turn.early.pause_ms  # the end of speech, in audio before this decision
            transcription = turn.early.take()  # the answer's now: the turn no longer drops it
            metrics.early[EarlyResult.HIT] += 1
            _LOGGER.debug("STT answered by early transcription %d", turn.early.cuts)
        self.jobs.start(Kind.STT, self._answer(turn, decision.answer, transcription, pause_ms))

    async def _answer(
        self,
        turn: Turn,
        how: Answer,
        transcription: Transcription | None = None,
        pause_ms: int = 0,
    ) -> None:
        """The job that answers a turn, then lets go of it."""
        try:
            if transcription is not None:
                await answer.early(self.ctx, self.sink, turn.utterance, transcription, pause_ms)
            elif how is Answer.SILENCE:
                await answer.silence(self.sink, turn.utterance)
            else:
                await answer.at_stop(self.ctx, self.sink, turn.utterance, turn.early)
        finally:
            if transcription is not None:
                await transcription.close()
            await turn.close()

    async def audio_stop(self, _event: Event) -> None:
        turn, self.turn = self.turn, None
        if turn is None:
            raise GatewayError(BAD_REQUEST, "audio-stop arrived before audio-start")
        if not turn.listening:  # answered already: nothing to do, nothing to say
            _LOGGER.debug(
                "audio-stop after the turn ended; %d bytes of audio after it ignored",
                turn.ignored_bytes,
            )
            return
        if turn.rules is not None:
            left = decide(turn.rules, turn.heard(self.jobs.busy), Happening.AUDIO_STOP)
            self.ctx.metrics.turn_end[EndedBy.CLIENT] += 1
            self.ctx.metrics.too_noisy += turn.noisy() is not None
            _LOGGER.debug("Turn left to the client's audio-stop: %s", left.why)
        turn.phase = Phase.ANSWERED
        self.ctx.metrics.requests[Kind.STT] += 1
        try:
            await self.jobs.run(Kind.STT, self._answer(turn, Answer.AS_AT_STOP))
        except BaseException:  # the client left while the job before ran: this never started
            await turn.close()  # its early requests end with it
            raise

    async def close(self) -> None:
        await self._replace(None)
