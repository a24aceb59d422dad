"""Speech detectors side by side on the room corpus (issue 34): the gateway's detector (alone, and
with STT_OWN_VAD's microVAD and HA's hold), its predecessor, webrtcvad as tuned, HA's own
microVAD, Silero and TEN VAD; how soon each sees the pause after the last word, the pauses it
sees inside words, the corpus's pauses it misses, its CPU per 20 ms frame; beside Home
Assistant's own end of speech (its segmenter at the default 0.7 s hold) on the same audio. The
voices: piper, two espeak-ng voices, and "recorded", human speech (pocketsphinx 5.1.1's test
recordings, room/recorded.py; its sdist is fetched from PyPI into .cache/recorded on the first
run), reported by voice like the others.

    PYTHONPATH=dev:bench .cache/venv/gw/bin/python bench/vad_bench.py [--quick] > result.json

Runs in the gw venv (the detectors and the room simulation); HA's segmenter runs in the ha11
venv, in a subprocess. The scenes: bench/voice_stack_bench/room (grid.py says which, measure.py
how, vad_report.py the figures, facts.py the setup block). Progress to stderr, one JSON document
to stdout.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from voice_stack_bench.room.run import run
from voice_stack_dev.speech_server import start_speech_server


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def bench(quick: bool, speech_url: str | None = None) -> dict[str, Any]:
    """The bench on the speech server at `speech_url`, or on one it starts and stops."""
    if speech_url is not None:
        return run(quick, speech_url, log)
    logs = Path(tempfile.mkdtemp(prefix="vad-bench-"))
    log(f"starting the speech server (logs in {logs})")
    speech = start_speech_server(logs)
    try:
        return run(quick, speech.url, log)
    finally:
        speech.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a tiny grid (a smoke test)")
    parser.add_argument("--speech-url", help="a running speech server (default: start one)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the server on the way out
    print(json.dumps(bench(args.quick, args.speech_url), indent=1))


if __name__ == "__main__":
    main()
