"""End of turn on the cut-off corpus (issue 22 item 4): when each setting ends the turn, whether
it cut the request short, and what transcript it got, against Home Assistant's fixed holds.

    PYTHONPATH=dev .cache/venv/ha11/bin/python bench/endpoint_bench.py [--quick] > result.json
    ... bench/endpoint_bench.py --asr fast --asr-delay-ms 80   # one mode, another modelled delay

Corpus: bench/endpoint_corpus.json (bench/voice_stack_bench/endpoint/corpus.py): complete
requests, requests with a pause where they cannot end, and with a pause where they look complete,
spoken by the speech server's piper voice with exact digital pauses; 0.3 s of silence before
each, silence after it up to HA's 15 s cap.

Through the gateway (the real voice-stack-gateway on the real speech server, faster-whisper
tiny.en), every utterance streamed in real time in 20 ms chunks by a client that does what HA's
Wyoming STT does (upload and read at once, the first transcript wins), with HA 2026.11's own
segmenter and microVAD (bench/voice_stack_bench/endpoint/ha_hold.py) deciding when audio-stop is
sent: the gateway's end of turn at STT_ENDPOINT_MS=400 (the default, with its 700 ms weak tier),
at 400 with one tier (STT_ENDPOINT_WEAK_MS=0), at 700, and at 0 (early transcription only, HA's
default hold ends every turn), and, when the gateway offers it,
STT_OWN_VAD=1 (no audio-stop until the cap). HA's three holds alone (0.25, 0.7, 1.25 s) on the
same audio: where the segmenter ends it, and the speech server's transcript of the audio up to
there, timed (what a plain STT after the hold answers).

ASR modes (`--asr`, both by default, in order; the same servers, gateways and audio): `real` is
the CPU whisper on every upload; `fast` is modelled, a GPU-class ASR: the speech server answers
with whisper's own transcript of the same speech after a fixed delay (`--asr-delay-ms`, 80 ms),
HA's holds alone included (their STT after the hold is that delay). Before the modes, whisper
transcribes once every audio a turn sends the speech server (voice_stack_bench.e2e.asr.prime, as
bench/voice_e2e.py primes it): the gateway's early request at each pause, and each hold's audio
up to its end. Each mode reports its settings side by side, its goals, and what it modelled.
A turn that fails (the gateway's error event, a closed connection, a timeout, the speech
server's error) is recorded for that utterance and setting as `{"error": ...}` and the run goes
on: the figures and goals are of the turns that completed, and each mode's `errors` (and the
top-level `errors`) list the others (report.py).
Progress to stderr, one JSON document to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from voice_stack_bench.asr_server import AsrServer
from voice_stack_bench.e2e.asr import asr_state, mode_facts, prime, set_asr_mode
from voice_stack_bench.endpoint.corpus import (
    BYTES_PER_MS,
    RATE,
    TIMEOUT,
    TRIM_LEVEL,
    Spoken,
    load_corpus,
    speak,
)
from voice_stack_bench.endpoint.gateways import GATEWAY_SETTINGS, Gateways, start_gateways
from voice_stack_bench.endpoint.ha_hold import HOLDS_S, HaHold, hold_end_ms
from voice_stack_bench.endpoint.report import report
from voice_stack_bench.endpoint.turns import (
    CAP_MS,
    CHUNK_BYTES,
    CHUNK_MS,
    LEAD_MS,
    TURN_ERRORS,
    failed,
    ha_hold_turn,
    held_audio,
    score,
    stream_turn,
    turn_reasons,
)
from voice_stack_bench.running import print_measured
from voice_stack_dev.paths import REPO
from voice_stack_dev.procs import Service
from voice_stack_dev.speech_asr import add_mode_arguments
from voice_stack_dev.speech_server import STT_MODEL, start_speech_server

EARLY_PAUSE_MS = 300  # the gateway's default STT_EARLY_PAUSE_MS: its early request's cut
MODELLED = (
    "every transcript_ms, and the ended_ms of turns the gateway ended (the transcript's arrival),"
    " rest on the modelled ASR: the speech server answering with whisper's transcript of the same"
    " speech, computed beforehand, after delay_ms; where HA's hold ended a turn (by ha_hold), its"
    " ended_ms and cut_short are measured on the audio by HA's segmenter, as in real mode"
)


HA_SETTINGS = {f"ha_{s}": s for s in HOLDS_S.values()}


def _hold(hold_s: float | None) -> HaHold | None:
    return HaHold(hold_s) if hold_s is not None else None


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


type HoldEnds = dict[str, dict[str, float | None]]  # utterance -> HA setting -> its end


def hold_ends(spoken: list[Spoken]) -> HoldEnds:
    """Where each of HA's holds ends each utterance's audio (None: it ran out of audio first);
    the segmenter is deterministic, so once is enough for every mode."""
    return {
        sp.entry.id: {
            name: hold_end_ms(sp.audio(LEAD_MS, CAP_MS), hold_s, CHUNK_BYTES)
            for name, hold_s in HA_SETTINGS.items()
        }
        for sp in spoken
    }


def asr_uploads(spoken: list[Spoken], ends: HoldEnds) -> list[bytes]:
    """Every audio a turn sends the speech server, as it is sent: the gateway's early request
    at each part's end (the stream so far, cut EARLY_PAUSE_MS into the silence), then each hold's
    audio up to its end (HA's hold alone, and the gateway transcribing at HA's audio-stop).
    Where a turn cuts inside the silence, the speech is the same (the memo's key)."""
    uploads = []
    for sp in spoken:
        audio = sp.audio(LEAD_MS, CAP_MS)
        uploads += [audio[: round((LEAD_MS + end + EARLY_PAUSE_MS) * BYTES_PER_MS)]
                    for _start, end in sp.spans_ms]  # fmt: skip
        uploads += [held_audio(audio, end)[1] for end in ends[sp.entry.id].values()]
    return uploads


async def run_gateways(
    gateways: Gateways, spoken: list[Spoken], results: dict[str, dict[str, Any]]
) -> None:
    """Each utterance through every gateway in turn (the order rotates)."""
    settings = [s for s in GATEWAY_SETTINGS if s.name in gateways.running]
    for i, sp in enumerate(spoken):
        audio = sp.audio(LEAD_MS, CAP_MS)
        for setting in settings[i % len(settings) :] + settings[: i % len(settings)]:
            port = gateways.running[setting.name][1]
            try:
                outcome = await stream_turn(port, audio, _hold(setting.hold_s))
            except TURN_ERRORS as err:
                results[sp.entry.id][setting.name] = failed(err)
                continue
            results[sp.entry.id][setting.name] = score(sp, outcome)
        log(f"  {sp.entry.id}: " + _brief(results[sp.entry.id], [s.name for s in settings]))


async def run_ha_holds(
    speech_url: str, spoken: list[Spoken], ends: HoldEnds, results: dict[str, dict[str, Any]]
) -> None:
    asr = AsrServer.speech_server(speech_url)
    async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
        for sp in spoken:
            audio = sp.audio(LEAD_MS, CAP_MS)
            for name, end in ends[sp.entry.id].items():
                try:
                    outcome = await ha_hold_turn(session, asr, audio, end)
                except TURN_ERRORS as err:
                    results[sp.entry.id][name] = failed(err)
                    continue
                results[sp.entry.id][name] = score(sp, outcome)
            log(f"  {sp.entry.id}: " + _brief(results[sp.entry.id], list(HA_SETTINGS)))


def _brief(row: dict[str, Any], names: list[str]) -> str:
    def one(r: dict[str, Any]) -> str:
        if "error" in r:
            return f"ERROR {r['error']}"
        return f"{r['ended_ms']:+.0f}{' CUT' if r['cut_short'] else ''}"

    return ", ".join(f"{n} {one(row[n])}" for n in names if n in row)


async def warm_up(gateways: Gateways, spoken: list[Spoken], n: int) -> None:
    """Models, pools and first connections, not measured."""
    for sp in spoken[:n]:
        for setting in GATEWAY_SETTINGS:
            if setting.name in gateways.running:
                port = gateways.running[setting.name][1]
                try:
                    await stream_turn(port, sp.audio(LEAD_MS, CAP_MS), _hold(setting.hold_s))
                except TURN_ERRORS as err:
                    log(f"  warm-up {sp.entry.id} {setting.name}: {failed(err)['error']}")


def setup_facts(
    args: argparse.Namespace, spoken: list[Spoken], logs: Path, primed: tuple[int, int]
) -> dict[str, Any]:
    trims = [t for sp in spoken for t in sp.trimmed_ms]
    return {
        "corpus": f"{len(spoken)} utterances of bench/endpoint_corpus.json"
        + (" (--quick)" if args.quick else ""),
        "audio": f"piper joe at {RATE} Hz, each part trimmed to its first and last sample above "
        f"|{TRIM_LEVEL}| and joined by exact digital silence; {LEAD_MS} ms of silence before, "
        f"silence after up to {CAP_MS} ms; {CHUNK_MS} ms chunks in real time",
        "piper_silence_trimmed_ms": {
            "before_max": max(t[0] for t in trims),
            "after_max": max(t[1] for t in trims),
        },
        "ha_hold": "HA 2026.11 VoiceCommandSegmenter(silence_seconds=S) on MicroVadSpeexEnhancer"
        "(0, 0, True) scores of 10 ms chunks (assist_pipeline defaults)",
        "ha_holds_alone": "the segmenter's end on the same audio; transcript: the speech server "
        "on the audio up to that end, timed from when HA can know the end (the end of the "
        f"{CHUNK_MS} ms chunk it ended in) (real: tiny.en; fast: modelled)",
        "asr_modes": list(args.asr),
        "asr": "real: faster-whisper tiny.en int8 on this CPU, every upload transcribed; fast: "
        f"MODELLED, a GPU-class ASR, whisper's own transcript of the same speech after "
        f"{args.asr_delay_ms:g} ms (asr_modes.fast.asr says how, and what it answered)",
        "priming": f"before the modes, whisper transcribed once each distinct speech a turn "
        f"sends the speech server: {primed[0]} of {primed[1]} uploads (the gateway's early "
        f"request at each pause, {EARLY_PAUSE_MS} ms into the silence, then each hold's audio "
        "up to its end; the same speech is the same memo key); fast mode answers with those",
        "gateway": f"voice-stack-gateway at {_commit(args.gateway_src)}, --stt-models "
        f"{STT_MODEL}, early transcription as by default (300 ms pause)",
        "times": "ms of audio after the last word (after_pause_ms: after the first part's last "
        "sound); a gateway's end is the transcript's arrival, a hold's its end in the audio; on "
        "the microphone's clock: the bench's lag in streaming (stream_lag_ms) is taken out",
        "cut_short": "the turn ended before the last word was over",
        "cpus": os.cpu_count(),
        "logs": str(logs),
    }


def _commit(gateway_src: Path | None) -> str:
    if gateway_src is not None:
        return f"the snapshot in {gateway_src}"
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    return f"the working tree (HEAD {head})"


@dataclass(frozen=True)
class Run:
    """What every mode runs on: the same servers, gateways and audio."""

    args: argparse.Namespace
    logs: Path
    speech_url: str
    gateways: Gateways
    spoken: list[Spoken]
    ends: HoldEnds
    classes: dict[str, str]


async def run_mode(run: Run, mode: str) -> dict[str, Any]:
    """Every utterance through every setting with the speech server in `mode`; the mode's
    report: its ASR said plainly, settings side by side per class, goals, every utterance."""
    delay = run.args.asr_delay_ms
    log(f"ASR mode {mode}" + (f" (modelled: {delay:g} ms)" if mode == "fast" else ""))
    load_start, started = os.getloadavg(), time.monotonic()
    before = await set_asr_mode(run.speech_url, mode, delay)
    log_at = {n: (run.logs / f"{n}.log").stat().st_size for n in run.gateways.running}
    await warm_up(run.gateways, run.spoken, 1 if run.args.quick else 2)
    results: dict[str, dict[str, Any]] = {sp.entry.id: {} for sp in run.spoken}
    log("streaming every utterance through every gateway in real time")
    await run_gateways(run.gateways, run.spoken, results)
    log("HA's holds alone on the same audio")
    await run_ha_holds(run.speech_url, run.spoken, run.ends, results)
    after = await asr_state(run.speech_url)
    reasons = {n: turn_reasons(run.logs / f"{n}.log", at) for n, at in log_at.items()}
    stt = "the STT (tiny.en)"
    if mode == "fast":
        stt = f"the STT (modelled: whisper's transcript after {delay:g} ms)"
    settings = {s.name: s.about for s in GATEWAY_SETTINGS if s.name in run.gateways.running}
    settings |= {n: f"HA's {s} s hold alone (its segmenter), then {stt}" for n, s in
                 HA_SETTINGS.items()}  # fmt: skip
    doc = report(run.spoken, results, settings, run.classes, LEAD_MS)
    facts = mode_facts(mode, delay, before, after)
    return {
        "asr": facts,
        **({"modelled_figures": MODELLED} if facts["modelled"] else {}),
        "gateway_turn_reasons": reasons,
        **doc,
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "elapsed_s": round(time.monotonic() - started, 1),
    }


async def run_modes(run: Run) -> tuple[tuple[int, int], dict[str, Any]]:
    """Whisper's transcripts primed (real mode), then every mode in order."""
    uploads = asr_uploads(run.spoken, run.ends)
    log(f"whisper transcribes every distinct speech a turn sends once ({len(uploads)} uploads)")
    await set_asr_mode(run.speech_url, "real", run.args.asr_delay_ms)
    primed = (await prime(run.speech_url, uploads), len(uploads))
    return primed, {mode: await run_mode(run, mode) for mode in run.args.asr}


def measure(
    args: argparse.Namespace, logs: Path, stop: Callable[[Service], None]
) -> dict[str, Any]:
    load_start = os.getloadavg()
    corpus = load_corpus()
    entries = tuple(e for e in corpus.entries if not args.quick or e.id in corpus.quick)
    log(f"starting the speech server (logs in {logs})")
    speech = start_speech_server(logs)
    stop(speech)
    log(f"synthesizing {len(entries)} utterances (cached under .cache/endpoint-corpus)")
    spoken = asyncio.run(speak(speech.url, entries))
    gateways = start_gateways(speech, logs, args.gateway_src, stop)
    try:
        log(f"gateways: {sorted(gateways.running)}; skipped: {gateways.skipped or 'none'}")
        run = Run(args, logs, speech.url, gateways, spoken, hold_ends(spoken), corpus.classes)
        primed, modes = asyncio.run(run_modes(run))
    finally:
        gateways.stop()
    return {
        "setup": setup_facts(args, spoken, logs, primed),
        "skipped": gateways.skipped,
        "goals": {mode: m["goals"] for mode, m in modes.items()},
        "errors": {mode: m["errors"] for mode, m in modes.items()},
        "asr_modes": modes,
        "load_average": {"start": load_start, "end": os.getloadavg()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the corpus's quick subset only")
    parser.add_argument(
        "--gateway-src", type=Path, help="run the gateway from this source tree (a snapshot)"
    )
    add_mode_arguments(parser)
    args = parser.parse_args()
    print_measured("endpoint-bench-", lambda logs, started: measure(args, logs, started))


if __name__ == "__main__":
    main()
