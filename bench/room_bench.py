"""End of turn in a room (issue 34): the cut-off corpus's three classes spoken in simulated rooms
under noise, through the gateway's settings and Home Assistant's own end of speech, side by side.

    PYTHONPATH=dev:bench .cache/venv/ha11/bin/python bench/room_bench.py [--quick] > result.json
    ... bench/room_bench.py --asr fast            # one ASR mode (both by default: fast, real)
    STT_OPENAI_KEY=... bench/room_bench.py --asr-server http://gpu-box:8000/v1 --asr-model NAME

Scenes (bench/voice_stack_bench/room): each utterance of bench/endpoint_corpus.json in a voice
(the speech server's piper, two espeak-ng voices), placed in a pyroomacoustics room (kitchen,
living room, open-plan hall: RT60 0.4-0.8 s, the talker 1.5-4 m away) under a noise (pink, HVAC,
babble, a TV, dishes and a door) at 5-30 dB SNR, or none; 0.3 s before the speech, noise to HA's
15 s cap. Fast mode runs the whole grid (3 rooms x (1 + 5 noises x 5 SNRs) cells, one utterance
of each class in each, voices rotating); real mode, whose whisper runs on every upload, the three
rooms with three noises HA's hold can end (pink, HVAC, dishes; babble and a TV run every setting
and HA to the 15 s cap) at 10 and 20 dB.

Each scene streams in real time, in 20 ms chunks, through every gateway setting at once (real
mode: one after the other, so the CPU whisper serves one setting's turn at a time): the
eagerness levels (STT_EAGERNESS low, medium (the default), high), medium without the ASR's
confidence (STT_UNSURE_LOGPROB=off: the words alone), and
STT_OWN_VAD=1 (no audio-stop), each but the last with HA 2026.11's segmenter at its default
0.7 s hold deciding audio-stop; and through wyoming-openai 0.8.0 behind the same hold (the
anchor's transcript). HA's three holds alone, with its noise suppression and auto gain off (its
default audio settings) and on (level 2, 31 dBFS), end the same audio where its segmenter says;
their transcript is the speech server's of the audio up to there. Lanes of gateways (`--lanes`)
play scenes side by side, one at a time per lane.

ASR modes: `real` is the CPU whisper (tiny.en); `fast` models a GPU-class ASR: the speech server
answers, after a fixed delay, with whisper's transcript of the same scene's audio up to the last
primed point the upload reaches (each part's end + 300 ms, primed beforehand; speech_asr's
prefix matching), so no upload in noise needs its exact audio primed. `--asr-server` measures your
own OpenAI-compatible ASR instead (mode `server`: the whole grid, every setting at once, as a GPU
serves them; its key from STT_OPENAI_KEY): the gateways, wyoming-openai and HA's holds all
transcribe there, and the complete-request goal is fast mode's.

Progress to stderr, one JSON document to stdout (room/turn_report.py's figures and goals).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from voice_stack_bench.asr_server import KEY_ENV, AsrServer, asr_env
from voice_stack_bench.e2e.asr import (
    asr_state,
    match_by_prefix,
    mode_facts,
    prime,
    prime_cuts_ms,
    set_asr_mode,
)
from voice_stack_bench.endpoint.corpus import BYTES_PER_MS, Spoken, load_corpus, speak
from voice_stack_bench.endpoint.gateways import DEFAULT_HOLD_S, Setting, start_gateways
from voice_stack_bench.endpoint.ha_hold import ENHANCED, HOLDS_S
from voice_stack_bench.endpoint.turns import CAP_MS, CHUNK_MS, LEAD_MS, turn_reasons
from voice_stack_bench.room.acoustics import ROOMS, impulse_response, measured_rt60
from voice_stack_bench.room.grid import PIPER, Grid, Planned
from voice_stack_bench.room.measure import scene_of
from voice_stack_bench.room.noise import KINDS
from voice_stack_bench.room.scene import SPEECH_DBFS
from voice_stack_bench.room.turn_report import figures, goals
from voice_stack_bench.room.turns import Heard, Hold, Target, heard, hold_ends, holds_alone, play
from voice_stack_bench.room.turns import targets as lane_targets
from voice_stack_bench.room.voices import speak_espeak
from voice_stack_bench.running import print_measured
from voice_stack_bench.stats import median_p90
from voice_stack_dev.gateway import start_wyoming_openai
from voice_stack_dev.procs import Service
from voice_stack_dev.speech_asr import MODES, add_mode_arguments
from voice_stack_dev.speech_server import start_speech_server

SETTINGS = (
    Setting("gateway_medium", {"STT_EAGERNESS": "medium"}, DEFAULT_HOLD_S,
            "the default, STT_EAGERNESS=medium; HA's 0.7 s hold behind"),
    Setting("gateway_high", {"STT_EAGERNESS": "high"}, DEFAULT_HOLD_S,
            "STT_EAGERNESS=high (the 2026-12-02 default, 400/700 ms); HA's 0.7 s hold behind"),
    Setting("gateway_low", {"STT_EAGERNESS": "low"}, DEFAULT_HOLD_S,
            "STT_EAGERNESS=low; HA's 0.7 s hold behind"),
    Setting("gateway_medium_words", {"STT_EAGERNESS": "medium", "STT_UNSURE_LOGPROB": "off"},
            DEFAULT_HOLD_S, "medium judging the words alone (no ASR confidence); HA's 0.7 s"
            " hold behind"),
    Setting("gateway_own_vad", {"STT_OWN_VAD": "1"}, None,
            "STT_OWN_VAD=1 (medium): the gateway ends every turn, no audio-stop before the cap"),
)  # fmt: skip
HOLDS = tuple(Hold(f"ha_{s}", s) for s in HOLDS_S.values()) + tuple(
    Hold(f"ha_{s}_enhanced", s, **ENHANCED) for s in HOLDS_S.values()
)
HOLD_NAMES = frozenset(h.name for h in HOLDS)
ROOM_NAMES = ("kitchen", "living", "hall")
REAL_NOISES = ("pink", "hvac", "dishes")  # real mode's: noises HA's own hold can end
BACKING = HOLDS[1]  # HA's default hold (0.7 s), its default audio settings
ANCHOR = "wyoming_openai"
SERVER = "server"  # --asr-server's mode


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def grid_of(mode: str, quick: bool, quick_ids: tuple[str, ...]) -> Grid:
    """The scenes of a mode: real mode's CPU whisper has time for fewer."""
    if quick:
        return Grid(("living",), ("hvac",), (10,), per_class=1, entry_ids=quick_ids)
    if mode == "real":
        return Grid(ROOM_NAMES, REAL_NOISES, (10, 20), per_class=1)
    return Grid(ROOM_NAMES, KINDS, (5, 10, 15, 20, 30), per_class=1)


def spoken_as_scene(planned: Planned, piper: dict[str, Spoken]) -> Spoken:
    """The utterance in the planned voice, its id the scene's name (rows are keyed by it)."""
    sp = (
        piper[planned.entry.id]
        if planned.voice == PIPER
        else speak_espeak(planned.entry, planned.voice)
    )
    return replace(sp, entry=replace(sp.entry, id=planned.name))


def facts_of(scene: Heard) -> dict[str, Any]:
    p = scene.planned
    return {"class": p.entry.kind, "entry": p.entry.id, "text": p.entry.text,
            "pause_ms": p.entry.pause_ms, "voice": p.voice, "room": p.cell.room,
            "noise": p.cell.noise, "snr": p.cell.snr,
            "last_word_at_ms": round(LEAD_MS + scene.spoken.spans_ms[-1][1], 1)}  # fmt: skip


def _ends(scene: Heard) -> dict[str, float | None]:
    return hold_ends(scene, HOLDS)


def all_hold_ends(scenes: list[Heard]) -> list[dict[str, float | None]]:
    """HA's segmenter is deterministic: each hold's end on each scene, once, on both cores."""
    fork = multiprocessing.get_context("fork")  # the scenes are already in this process
    with ProcessPoolExecutor(max_workers=min(2, os.cpu_count() or 1), mp_context=fork) as pool:
        return list(pool.map(_ends, scenes, chunksize=4))


def primes(scenes: list[Heard]) -> list[bytes]:
    """What fast mode answers from: each scene's audio up to each of asr.prime_cuts_ms."""
    return [s.audio[: round((LEAD_MS + at) * BYTES_PER_MS)]
            for s in scenes for at in prime_cuts_ms(s.spoken.spans_ms)]  # fmt: skip


class Lanes:
    """Every lane's targets: a gateway per setting and a wyoming-openai."""

    def __init__(self, speech: Service, asr: AsrServer, logs: Path, args: argparse.Namespace,
                 stop: Callable[[Service], None]) -> None:  # fmt: skip
        self.speech_url = speech.url
        self.asr = asr
        self.lanes: list[dict[str, Target]] = []
        self.skipped: dict[str, str] = {}
        for i in range(args.lanes):
            lane = f".lane{i}"
            gateways = start_gateways(
                speech, logs, args.gateway_src, stop, settings=SETTINGS, lane=lane, asr=asr
            )
            self.skipped |= gateways.skipped
            targets = lane_targets(gateways, SETTINGS, logs, lane)
            anchor = start_wyoming_openai(
                asr.v1, f"{speech.url}/v1", logs / f"{ANCHOR}{lane}.log", stt_model=asr.model,
                env=asr_env(asr),
            )  # fmt: skip
            stop(anchor)
            targets[ANCHOR] = Target(anchor.port, None, backed=True)
            self.lanes.append(targets)
        self.names = list(self.lanes[0])


async def run_scenes(lanes: Lanes, scenes: list[Heard], ends: list[dict[str, float | None]],
                     real: bool) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Every scene through one lane (lanes side by side), then HA's holds alone on it."""
    results: dict[str, dict[str, Any]] = {}
    queue: asyncio.Queue[tuple[Heard, dict[str, float | None]]] = asyncio.Queue()
    for item in zip(scenes, ends, strict=True):
        queue.put_nowait(item)

    async def worker(lane: dict[str, Target]) -> None:
        await play(lane, scenes[0], BACKING)  # warm-up: models, pools, first connections
        while not queue.empty():
            scene, _ends = queue.get_nowait()
            results[scene.planned.name] = await play(lane, scene, BACKING, alone=real)
            if len(results) % 20 == 0:
                log(f"  {len(results)}/{len(scenes)} scenes")

    # real mode: one lane, its settings one after the other, so whisper transcribes one turn's
    # requests at a time, as on one box (HA's holds alone below are timed the same way)
    await asyncio.gather(*(worker(lane) for lane in lanes.lanes[: 1 if real else None]))
    log("HA's holds alone on the same audio")  # after: a miss's whisper slows no other turn
    for scene, scene_ends in zip(scenes, ends, strict=True):
        results[scene.planned.name] |= await holds_alone(lanes.asr, scene, scene_ends)
    return results


async def run_mode(mode: str, args: argparse.Namespace, lanes: Lanes, scenes: list[Heard],
                   logs: Path) -> dict[str, Any]:  # fmt: skip
    log(f"ASR mode {mode}: {len(scenes)} scenes; HA's holds on each")
    started, load = time.monotonic(), os.getloadavg()
    ends = all_hold_ends(scenes)
    speech_url = lanes.speech_url
    primed, before = (0, None) if mode == SERVER else await ready(speech_url, mode, args, scenes)
    log_at = log_sizes(logs)
    log("streaming every scene through every setting in real time")
    results = await run_scenes(lanes, scenes, ends, mode == "real")
    asr = (
        server_facts(lanes.asr)
        if before is None
        else mode_facts(mode, args.asr_delay_ms, before, await asr_state(speech_url))
    )
    facts = {s.planned.name: facts_of(s) for s in scenes}
    names = lanes.names + [h.name for h in HOLDS]
    return {
        "asr": asr,
        "primed": primed,
        "goals": goals(facts, results, names, mode, CAP_MS),
        "figures": figures(facts, results, names),
        "gateway_turn_reasons": {n: turn_reasons(logs / n, at) for n, at in log_at.items()},
        "stream_lag_ms": stream_lag(results),
        "scenes": [{"name": n, **facts[n], "results": results[n]} for n in facts],
        "load_average": {"start": load, "end": os.getloadavg()},
        "elapsed_s": round(time.monotonic() - started, 1),
    }


async def ready(speech_url: str, mode: str, args: argparse.Namespace, scenes: list[Heard]
                ) -> tuple[int, dict[str, Any]]:  # fmt: skip
    """The speech server in `mode` (fast: its transcripts primed first): how many uploads were
    primed, and its state."""
    await set_asr_mode(speech_url, "real", args.asr_delay_ms)
    primed = 0
    if mode == "fast":
        uploads = primes(scenes)
        log(f"whisper transcribes each scene up to each part's end ({len(uploads)} uploads)")
        primed = await prime(speech_url, uploads)
    return primed, await set_asr_mode(speech_url, mode, args.asr_delay_ms)


def server_facts(asr: AsrServer) -> dict[str, Any]:
    return {"mode": SERVER, "modelled": False, "asr": f"{asr.v1}, model {asr.model}"}


def stream_lag(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """How late the bench streamed the audio when a turn ended (taken out of its times), over
    every streamed turn: what the measure corrects for."""
    lags = [row["stream_lag_ms"] for rows in results.values() for name, row in rows.items()
            if "stream_lag_ms" in row and name not in HOLD_NAMES]  # fmt: skip
    return median_p90(lags) | {"max": max(lags)} if lags else {"n": 0}


def log_sizes(logs: Path) -> dict[str, int]:
    """Where each gateway log ends now: a mode's turn reasons are read from there on."""
    return {f.name: f.stat().st_size for f in logs.glob("gateway_*.log")}


def setup_facts(args: argparse.Namespace, grids: dict[str, Grid]) -> dict[str, Any]:
    return {
        "grids": {mode: g.describe() for mode, g in grids.items()},
        "rooms": {
            name: {
                "about": r.describe(),
                "rt60_measured_s": round(measured_rt60(impulse_response(r)), 2),
            }
            for name, r in ROOMS.items()
        },
        "speech": (
            f"{SPEECH_DBFS:g} dBFS while the dry speech sounds; SNR: that level over the"
            " noise's mean power; 0.3 s before the speech, noise throughout, up to the 15 s cap"
        ),
        "settings": {s.name: s.about for s in SETTINGS}
        | {ANCHOR: "wyoming-openai 0.8.0, HA's 0.7 s hold behind"}
        | {
            h.name: f"HA 2026.11's segmenter alone, {h.silence_s:g} s hold, auto gain"
            f" {h.auto_gain_dbfs} dBFS, noise suppression {h.noise_suppression}; its STT from"
            f" the end of the {CHUNK_MS} ms chunk it ended in"
            for h in HOLDS
        },
        "times": "ms of audio after the last word: a gateway's end is its transcript's arrival,"
        " a hold's its end in the audio; transcript_ms: the transcript's arrival; on the"
        " microphone's clock: the bench's lag in streaming the audio (stream_lag_ms, its own"
        " event loop running every lane) is taken out",
        "lanes": args.lanes,
        "cpus": os.cpu_count(),
    }


def measure(args: argparse.Namespace, logs: Path, stop: Callable[[Service], None]) -> Any:
    corpus = load_corpus()
    speech = start_speech_server(logs)
    stop(speech)
    piper = {sp.entry.id: sp for sp in asyncio.run(speak(speech.url, corpus.entries))}
    grids = {m: grid_of(m, args.quick, corpus.quick) for m in args.asr}
    asr = (
        AsrServer(args.asr_server, args.asr_model, os.environ.get(KEY_ENV) or None)
        if args.asr_server
        else AsrServer.speech_server(speech.url)
    )
    lanes = Lanes(speech, asr, logs, args, stop)
    modes = {}
    for mode, grid in grids.items():
        scenes = [heard(p, spoken_as_scene(p, piper), scene_of) for p in grid.plan(corpus.entries)]
        modes[mode] = asyncio.run(
            _with_match(speech.url, run_mode(mode, args, lanes, scenes, logs))
        )
    return {"setup": setup_facts(args, grids), "skipped": lanes.skipped,
            "goals": {m: r["goals"] for m, r in modes.items()}, "asr_modes": modes}  # fmt: skip


def _v1_url(value: str) -> str:
    url = value.strip().rstrip("/")
    if not re.fullmatch(r"https?://[^/\s]+(/\S*)?/v1", url):
        raise argparse.ArgumentTypeError(f"an http(s) URL ending in /v1, got {value!r}")
    return url


async def _with_match(speech_url: str, run: Any) -> Any:
    """Prefix matching on for the run: fast mode's answers in noise."""
    await match_by_prefix(speech_url)
    return await run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="one room, quiet and one noise, 6 scenes"
    )
    parser.add_argument("--lanes", type=int, default=3, help="scenes played side by side")
    parser.add_argument("--gateway-src", type=Path, help="run the gateway from this tree")
    add_mode_arguments(parser)
    parser.add_argument(
        "--asr-server", type=_v1_url, metavar="URL",
        help="your OpenAI-compatible ASR's base URL (ending in /v1; its key from"
        f" {KEY_ENV}): the one mode `server`, in place of --asr",
    )  # fmt: skip
    parser.add_argument(
        "--asr-model", default="whisper-1", help="the model --asr-server transcribes with"
    )
    args = parser.parse_args()
    if args.asr_server:
        if args.asr != MODES:
            parser.error("--asr-server is its own mode: leave out --asr")
        args.asr = (SERVER,)
    print_measured("room-bench-", lambda logs, started: measure(args, logs, started))


if __name__ == "__main__":
    main()
