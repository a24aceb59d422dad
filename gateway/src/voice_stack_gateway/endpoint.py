"""End of turn in the gateway: when an utterance's early transcript is back, the pause it was
cut at has lasted `--stt-endpoint-ms` (counted in audio frames) with no speech after the cut,
and its words read as a complete request (complete.py), the transcript is sent at once, before
the client's audio-stop. Home Assistant's Wyoming STT returns the first transcript it reads and
stops uploading, so its own silence hold (0.7 s) is not waited out. Words that read complete only
weakly (the last word may be the ASR's rendering of a cut-off "the" or "to": "in it", "me too")
wait for the longer `--stt-endpoint-weak-ms` instead.

Otherwise nothing changes: the client's audio-stop ends the turn, as before, and speech after
the cut still means the whole audio is transcribed; with the gateway's own VAD (own_vad.py) the
gateway ends those turns too. Every decision (and the reason a turn was left to the client)
goes to the debug log; /metrics counts every outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from .complete import Verdict, judge
from .early import EarlyTranscription
from .metrics import EndedBy, Metrics
from .own_vad import Without, hold_for, own_stop
from .transcription import Transcription

_LOGGER = logging.getLogger(__name__)


class TurnEnd:
    """One utterance's end of turn: checked after every audio chunk and whenever an early
    transcript comes back; `end` starts the answer and says whether it could."""

    def __init__(
        self,
        metrics: Metrics,
        early: EarlyTranscription,
        endpoint_ms: int,
        language: str | None,
        end: Callable[[Transcription | Without], bool],
        *,
        weak_ms: int = 0,
        hold_ms: int | None = None,
    ) -> None:
        self._metrics = metrics
        self._early = early
        self._endpoint_ms = endpoint_ms
        # a weak verdict's endpoint (0: the same as a strong one's; never shorter)
        self._weak_ms = max(endpoint_ms, weak_ms)
        self._language = language
        self._end = end
        # the gateway's own VAD: it ends every turn (None: the client does)
        self._hold_ms = None if hold_ms is None else hold_for(language, hold_ms)
        self._watched: Transcription | None = None
        self._verdict: tuple[Transcription, Verdict] | None = None
        self._watchers: set[asyncio.Task[None]] = set()
        self.why = "no pause after speech"  # why the turn has not ended yet
        self.over = False

    def check(self) -> None:
        if self.over:
            return
        current = self._early.current
        if current is None:
            if self._early.cuts:
                self.why = "speech after the last cut"
        else:
            self._watch_once(current)
            ready = self._ready(current)
            if ready is not None:
                self._finish(current, EndedBy.GATEWAY, ready)
                return
        if self._hold_ms is not None:
            stop = own_stop(self._early, self._hold_ms, self.why)
            if stop is not None:
                self._finish(stop.answer, stop.by, stop.why)

    def _finish(self, answer: Transcription | Without, by: EndedBy, why: str) -> None:
        if not self._end(answer):
            self.why = "the answer to an earlier request was still being sent"
            return
        if not isinstance(answer, Without):
            self._early.take()  # the answer's now: the utterance no longer drops or closes it
        self.over = True
        self._metrics.turn_end[by] += 1
        who = "the gateway" if by is EndedBy.GATEWAY else "the gateway's own VAD"
        _LOGGER.debug("Turn ended by %s before audio-stop: %s", who, why)

    def _watch_once(self, current: Transcription) -> None:
        if current is not self._watched:
            self._watched = current
            task = asyncio.create_task(self._watch(current), name="stt turn end")
            self._watchers.add(task)
            task.add_done_callback(self._watchers.discard)

    def _ready(self, current: Transcription) -> str | None:
        """Why the turn may end now; None (and `why` says what is missing) if it may not."""
        text = current.text
        if text is None:
            what = "failed" if current.done else "was not back yet"
            self.why = f"early transcription {self._early.cuts} {what}"
            return None
        words = text.strip()
        verdict = self._judge(current, words)
        pause = self._early.pause_ms
        weak = verdict.weak and self._weak_ms > self._endpoint_ms
        needed = self._weak_ms if weak else self._endpoint_ms
        if not verdict.complete:
            self.why = f"{words!r} does not read complete: {verdict.why}"
        elif self._early.speech_after_cut:
            self.why = "speech after the last cut"
        elif pause < needed:
            self.why = (
                f"{words!r} reads complete only weakly ({verdict.why}), but the pause was"
                f" {pause} ms (< the weak endpoint's {needed} ms)"
                if weak
                else f"{words!r} reads complete, but the pause was {pause} ms"
            )
        else:
            limit = f"the weak endpoint's {needed} ms" if weak else f"{needed} ms"
            return f"a {pause} ms pause (>= {limit}), {words!r}: {verdict.why}"
        return None

    def left(self) -> None:
        """audio-stop came first: the client ended the turn."""
        if self.over:
            return
        self.over = True
        self._metrics.turn_end[EndedBy.CLIENT] += 1
        _LOGGER.debug("Turn left to the client's audio-stop: %s", self.why)

    async def close(self) -> None:
        self.over = True
        watchers, self._watchers = set(self._watchers), set()
        for task in watchers:
            task.cancel()
        for task in watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _judge(self, transcription: Transcription, words: str) -> Verdict:
        """Each early transcript is judged once."""
        if self._verdict is None or self._verdict[0] is not transcription:
            self._verdict = (transcription, judge(words, self._language))
            _LOGGER.debug("Early transcript %d: %r: %s", self._early.cuts, words, self._verdict[1])
        return self._verdict[1]

    async def _watch(self, transcription: Transcription) -> None:
        await transcription.finished()
        self.check()
