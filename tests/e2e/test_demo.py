"""The demo end to end: every real part on loopback, one spoken request through HA's Assist.

The demo runs as a subprocess (scripts/demo --json), so no phcc socket rules apply here. The
first run provisions a fresh HA; the second must reuse it (same entry, same pipeline).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import wave
from pathlib import Path
from typing import Any

import pytest

from voice_stack_dev.paths import REPO, venv_bin

DEMO = REPO / "scripts" / "demo"
RUN_TIMEOUT = 240  # one run; the whole module stays under pytest-timeout below

pytestmark = pytest.mark.timeout(600)


def _run_demo(state_dir: Path, output: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    argv = [str(DEMO), "--json", "--state-dir", str(state_dir), "--output", str(output), *extra]
    env = {**os.environ, "VOICE_STACK_SKIP_SETUP": "1"}  # scripts/test ran setup
    code, stdout, stderr = _run_stopping_cleanly(argv, env, RUN_TIMEOUT)
    sys.stderr.write(stderr[-4000:])
    try:
        result = json.loads(stdout)
    except json.JSONDecodeError:
        pytest.fail(f"demo printed no JSON (exit {code}):\n{stdout[-2000:]}")
    return code, result


def _run_stopping_cleanly(
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


@pytest.fixture(scope="module")
def demo_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tmp_path_factory.mktemp("demo-state"), tmp_path_factory.mktemp("demo-output")


@pytest.fixture(scope="module")
def first_run(demo_dirs: tuple[Path, Path]) -> dict[str, Any]:
    code, result = _run_demo(*demo_dirs)
    assert code == 0, f"demo failed: {result.get('error')}"
    return result


def _sensor(result: dict[str, Any], entity_prefix: str, name_part: str) -> dict[str, Any]:
    for reading in result["sensors"]:
        if reading["entity_id"].startswith(entity_prefix) and name_part in reading["name"].lower():
            return reading
    pytest.fail(f"no {entity_prefix}* '{name_part}' in {[r['name'] for r in result['sensors']]}")


def test_spoken_request_reaches_our_agent_on_its_slot(first_run: dict[str, Any]) -> None:
    result = first_run
    assert result["ok"]
    assert not result["reused"]
    assert "kitchen light" in result["transcript"].lower()
    assert result["agent_entity"].startswith("conversation.")
    assert result["processed_locally"] is False  # not HA's built-in intents
    assert result["reply"]
    assert result["reply_type"] != "error", result["reply"]
    assert result["agent_slot"] is not None
    assert result["slot_used"] == result["agent_slot"]  # llama-server's /slots agrees
    assert {"stt", "intent", "tts"} <= set(result["stage_ms"])


def test_reply_audio_is_written(first_run: dict[str, Any], demo_dirs: tuple[Path, Path]) -> None:
    wav_path = demo_dirs[1] / "reply.wav"
    with wave.open(str(wav_path)) as wav:
        assert wav.getnframes() / wav.getframerate() > 0.5
    assert first_run["reply_audio_s"] > 0.5


def test_speed_and_health_sensors_have_values(first_run: dict[str, Any]) -> None:
    speed = _sensor(first_run, "sensor.", "generation speed")
    assert float(speed["state"]) > 0
    reuse = _sensor(first_run, "sensor.", "cache reuse")
    assert 0 <= float(reuse["state"]) <= 100
    health = [r for r in first_run["sensors"] if r["device_class"] == "connectivity"]
    assert len(health) >= 3
    assert all(r["state"] == "on" for r in health), health
    assert all(s["health"] == "ok" for s in first_run["services"].values())


def test_second_run_reuses_what_is_provisioned(
    first_run: dict[str, Any], demo_dirs: tuple[Path, Path]
) -> None:
    code, again = _run_demo(*demo_dirs)
    assert code == 0, f"second run failed: {again.get('error')}"
    assert again["reused"]
    assert again["pipeline_id"] == first_run["pipeline_id"]
    assert again["voice_stack_entry"] == first_run["voice_stack_entry"]
    assert again["slot_used"] == again["agent_slot"]


def test_failure_names_the_service_and_its_log(tmp_path: Path) -> None:
    """With nothing provisioned, the demo stops at once and says which part and where to look."""
    empty_cache = tmp_path / "cache"
    empty_cache.mkdir()
    argv = [str(venv_bin("ha11", "python")), "-m", "voice_stack_dev.demo", "--json",
            "--state-dir", str(tmp_path / "state"), "--output", str(tmp_path / "out")]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "dev"), "VOICE_STACK_CACHE": str(empty_cache)}
    code, stdout, _stderr = _run_stopping_cleanly(argv, env, 120)
    assert code == 1
    result = json.loads(stdout)
    assert not result["ok"]
    error = result["error"]
    assert error["service"]
    assert error["reason"]
    assert error["log"]
