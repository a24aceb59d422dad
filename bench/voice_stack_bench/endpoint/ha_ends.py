"""Home Assistant's end of speech (ha_hold.py) on a folder of audio files, for a bench that runs
outside HA's environment (bench/vad_bench.py runs in the gw venv; HA is in ha11):

    PYTHONPATH=dev:bench .cache/venv/ha11/bin/python -m voice_stack_bench.endpoint.ha_ends DIR \
        [--hold-s 0.7] [--chunk-ms 20]

DIR holds 16 kHz 16-bit mono PCM files (*.pcm); prints one JSON document: where HA's segmenter
ended each (ms of audio passed on, null if it ran out of audio first, by file stem) and the
versions it ran. Progress to stderr.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path

from .ha_hold import BYTES_PER_MS, HOLDS_S, hold_end_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--hold-s", type=float, default=HOLDS_S["default"])
    parser.add_argument("--chunk-ms", type=int, default=20)
    args = parser.parse_args()
    files = sorted(args.folder.glob("*.pcm"))
    ends: dict[str, float | None] = {}
    for i, path in enumerate(files, 1):
        ends[path.stem] = hold_end_ms(path.read_bytes(), args.hold_s, args.chunk_ms * BYTES_PER_MS)
        if i % 100 == 0 or i == len(files):
            print(f"  HA's segmenter: {i}/{len(files)}", file=sys.stderr, flush=True)
    versions = {p: importlib.metadata.version(p) for p in ("homeassistant", "pymicro-vad")}
    doc = {"hold_s": args.hold_s, "chunk_ms": args.chunk_ms, "versions": versions, "ends_ms": ends}
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
