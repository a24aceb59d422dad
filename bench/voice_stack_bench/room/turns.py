"""The room bench's turns (bench/room_bench.py): each scene streamed in real time through every
gateway setting at once (with the real CPU whisper, one setting after the other), as Home
Assistant streams it, and each of HA's holds alone on the same audio; lanes of gateways run
scenes side by side, one scene at a time per lane, so a gateway's log holds one turn at a time
and the early requests a turn made are counted from it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from voice_stack_bench.asr_server import AsrServer
from voice_stack_bench.endpoint.corpus import TIMEOUT, Spoken
from voice_stack_bench.endpoint.gateways import Gateways, Setting
from voice_stack_bench.endpoint.ha_hold import HaHold, hold_end_ms
from voice_stack_bench.endpoint.turns import (
    CAP_MS,
    CHUNK_BYTES,
    LEAD_MS,
    TURN_ERRORS,
    failed,
    ha_hold_turn,
    score,
    stream_turn,
)

if TYPE_CHECKING:  # the room's packages (pyroomacoustics) are not in every venv that plays turns
    from .grid import Planned
    from .scene import Scene

_EARLY = re.compile(r"Early transcription \d+ of \d+ started")
_NOISY = "too noisy to judge pauses"
type Row = dict[str, Any]


@dataclass(frozen=True)
class Hold:
    """One of HA's end-of-speech settings: a hold, with its audio enhancements off or on."""

    name: str
    silence_s: float
    auto_gain_dbfs: int = 0
    noise_suppression: int = 0

    def fresh(self) -> HaHold:
        return HaHold(self.silence_s, self.auto_gain_dbfs, self.noise_suppression)


@dataclass(frozen=True)
class Heard:
    """A scene as the bench plays it: the plan, its spoken utterance (the entry's id made the
    scene's name, so rows key by scene), and its audio from the stream's start to the cap."""

    planned: Planned
    spoken: Spoken
    audio: bytes


def heard(planned: Planned, spoken: Spoken, make: Callable[[Planned, Spoken], Scene]) -> Heard:
    return Heard(planned, spoken, make(planned, spoken).audio(LEAD_MS, CAP_MS))


def hold_ends(scene: Heard, holds: Iterable[Hold]) -> dict[str, float | None]:
    """Where each hold ends the scene's audio (None: it ran out of audio first)."""
    return {
        h.name: hold_end_ms(scene.audio, h.silence_s, CHUNK_BYTES, h.auto_gain_dbfs,
                            h.noise_suppression)
        for h in holds
    }  # fmt: skip


def _log_size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _turn_log(path: Path, start: int) -> str:
    with path.open("rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")


@dataclass(frozen=True)
class Target:
    """A Wyoming STT server a lane streams to: its port, its debug log (a gateway's; None for
    the anchor), and whether HA's hold sends audio-stop (False: the gateway's own VAD)."""

    port: int
    log: Path | None
    backed: bool


def targets(gateways: Gateways, settings: tuple[Setting, ...], logs: Path, lane: str
            ) -> dict[str, Target]:  # fmt: skip
    """A lane's gateways as targets (their logs are named by start_gateways' `lane`)."""
    return {
        s.name: Target(gateways.running[s.name][1], logs / f"{s.name}{lane}.log",
                       s.hold_s is not None)
        for s in settings if s.name in gateways.running
    }  # fmt: skip


async def _one(target: Target, scene: Heard, backing: Hold) -> Row:
    """One turn, scored, with the early requests and the noise verdicts its log counts."""
    start = _log_size(target.log) if target.log else 0
    try:
        outcome = await stream_turn(
            target.port, scene.audio, backing.fresh() if target.backed else None
        )
    except TURN_ERRORS as err:
        return failed(err)
    row = score(scene.spoken, outcome)
    if target.log is not None:
        text = _turn_log(target.log, start)
        row["early_requests"] = len(_EARLY.findall(text))
        row["too_noisy"] = _NOISY in text
    return row


async def play(
    lane: dict[str, Target], scene: Heard, backing: Hold, *, alone: bool = False
) -> dict[str, Row]:
    """The scene through every target of one lane: at once, or (`alone`) one target after the
    other, so a CPU whisper transcribes one setting's requests at a time, as on a box with one
    satellite (at once, six settings' requests queued behind each other)."""
    if alone:
        return {name: await _one(t, scene, backing) for name, t in lane.items()}
    rows = await asyncio.gather(*(_one(t, scene, backing) for t in lane.values()))
    return dict(zip(lane, rows, strict=True))


async def holds_alone(
    asr: AsrServer, scene: Heard, ends: dict[str, float | None]
) -> dict[str, Row]:
    """Each hold alone on the scene: its end, then the ASR server's transcript up to it."""
    rows: dict[str, Row] = {}
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        for name, end in ends.items():
            try:
                outcome = await ha_hold_turn(session, asr, scene.audio, end)
            except TURN_ERRORS as err:
                rows[name] = failed(err)
                continue
            rows[name] = score(scene.spoken, outcome)
    return rows
