"""Run scripts/demo as a user does, as a subprocess: once (--json), or kept running (--keep)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from voice_stack_dev.paths import REPO

DEMO = REPO / "scripts" / "demo"
RUN_TIMEOUT = 240  # one run, from nothing running to the report


def _argv(state_dir: Path, output: Path, *extra: str) -> list[str]:
    return [str(DEMO), "--json", "--state-dir", str(state_dir), "--output", str(output), *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "VOICE_STACK_SKIP_SETUP": "1"}  # scripts/test ran setup


def run_stopping_cleanly(
    argv: list[str], env: dict[str, str], limit: float
) -> tuple[int, str, str]:
    """Like subprocess.run, but a run over time gets SIGTERM first: the demo then stops the
    servers it started (a SIGKILL would orphan them)."""
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            stdout, stderr = proc.communicate(timeout=60)
            pytest.fail(f"demo took over {limit} s; stopped it:\n{stderr[-3000:]}")
    return proc.returncode, stdout, stderr


def run_demo(state_dir: Path, output: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    """One whole run; its exit code and its JSON report."""
    code, stdout, stderr = run_stopping_cleanly(_argv(state_dir, output, *extra), _env(),
                                                RUN_TIMEOUT)  # fmt: skip
    sys.stderr.write(stderr[-4000:])
    try:
        result: dict[str, Any] = json.loads(stdout)
    except json.JSONDecodeError:
        pytest.fail(f"demo printed no JSON (exit {code}):\n{stdout[-2000:]}")
    return code, result


def _read_report(stdout: IO[str], limit: float) -> dict[str, Any]:
    """The JSON report a kept demo prints before it waits (its last line is a lone "}")."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + limit
    text: list[str] = []
    while not text or text[-1].rstrip("\n") != "}":
        try:
            text.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            pytest.fail(f"no report within {limit:.0f} s:\n{''.join(text)[-2000:]}")
    result: dict[str, Any] = json.loads("".join(text))
    return result


@contextmanager
def kept_demo(
    state_dir: Path, output: Path
) -> Iterator[tuple[dict[str, Any], subprocess.Popen[str]]]:
    """`scripts/demo --keep`: its report once everything is up, and the running process.
    Leaving the block stops it with SIGTERM (the demo then stops every service)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    log = (state_dir / "kept-demo.stderr").open("w")
    proc = subprocess.Popen(
        [*_argv(state_dir, output), "--keep"],
        stdout=subprocess.PIPE, stderr=log, text=True, env=_env(),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        report = _read_report(proc.stdout, RUN_TIMEOUT)
        assert report["ok"], report.get("error")
        yield report, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
