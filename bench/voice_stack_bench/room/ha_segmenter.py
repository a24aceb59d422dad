"""Home Assistant's own end of speech on the room corpus's scenes: its segmenter needs HA, which
is only in the ha11 venv, while the detectors' packages are only in the gw venv. The scenes'
audio is written to a folder as it is made, and voice_stack_bench.endpoint.ha_ends runs over it
in ha11 once every scene is measured (after the detectors, so it does not share their CPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from voice_stack_dev.paths import REPO, venv_bin

HA_PYTHON = venv_bin("ha11", "python")
HOLD_S = 0.7  # HA's default "finished speaking detection"
CHUNK_MS = 20  # a satellite's chunks, as the gateway's detectors are fed
TIMEOUT_S = 1800


class HaSegmenter:
    """Collects scenes' audio, then asks HA's segmenter where it ends each."""

    def __init__(self, python: Path = HA_PYTHON) -> None:
        if not python.is_file():
            raise FileNotFoundError(f"{python} not found: HA's segmenter runs in the ha11 venv "
                                    "(scripts/setup provisions it)")  # fmt: skip
        self._python = python
        self._folder = Path(tempfile.mkdtemp(prefix="vad-bench-ha-"))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def add(self, key: str, audio: bytes) -> None:
        (self._folder / f"{key}.pcm").write_bytes(audio)

    def ends(self) -> dict[str, Any]:
        """{"ends_ms": {key: ms of audio passed on, or None}, "versions": ..., ...}."""
        env = {**os.environ, "PYTHONPATH": f"{REPO / 'dev'}{os.pathsep}{REPO / 'bench'}"}
        argv = [str(self._python), "-m", "voice_stack_bench.endpoint.ha_ends", str(self._folder),
                "--hold-s", str(HOLD_S), "--chunk-ms", str(CHUNK_MS)]  # fmt: skip
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, text=True, check=False,
                              timeout=TIMEOUT_S)  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"HA's segmenter failed ({done.returncode}); its stderr is above")
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc
