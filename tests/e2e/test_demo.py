"""The demo end to end: every real part on loopback, three spoken requests through HA's Assist.

The demo runs as a subprocess (scripts/demo --json), so no phcc socket rules apply here. The
first run provisions a fresh HA; the second must reuse it (same entry, same pipeline).
"""

from __future__ import annotations

import json
import math
import os
import wave
from pathlib import Path
from typing import Any

import pytest

from voice_stack_dev.paths import REPO, venv_bin

from .demo_process import run_demo, run_stopping_cleanly

pytestmark = pytest.mark.timeout(600)
PARTS = (
    "silence_hold_ms",
    "stt_wait_ms",
    "agent_first_token_ms",
    "first_sentence_ms",
    "tts_first_byte_ms",
)


@pytest.fixture(scope="module")
def demo_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tmp_path_factory.mktemp("demo-state"), tmp_path_factory.mktemp("demo-output")


@pytest.fixture(scope="module")
def first_run(demo_dirs: tuple[Path, Path]) -> dict[str, Any]:
    code, result = run_demo(*demo_dirs)
    assert code == 0, f"demo failed: {result.get('error')}"
    return result


def _sensor(result: dict[str, Any], entity_prefix: str, name_part: str) -> dict[str, Any]:
    for reading in result["sensors"]:
        if reading["entity_id"].startswith(entity_prefix) and name_part in reading["name"].lower():
            found: dict[str, Any] = reading
            return found
    pytest.fail(f"no {entity_prefix}* '{name_part}' in {[r['name'] for r in result['sensors']]}")


def test_command_is_handled_by_ha_intents_and_the_light_turns_on(
    first_run: dict[str, Any],
) -> None:
    command = first_run["turns"][0]
    assert command["kind"] == "command"
    assert "kitchen light" in command["transcript"].lower()
    assert command["answered_locally"] is True
    assert (command["light_before"], command["light_after"]) == ("off", "on")
    assert first_run["provisioning"]["setup"]["prefer_local_intents"] is True


def test_question_is_answered_by_our_agent_on_its_slot(first_run: dict[str, Any]) -> None:
    question = first_run["turns"][1]
    agent = first_run["provisioning"]["setup"]["agent"]
    assert question["answered_locally"] is False
    assert question["engine"] == agent["entity_id"]
    assert question["reply"]
    assert question["agent"]["slot"] == agent["slot"]
    assert question["slot_used"] == agent["slot"]  # llama-server's /slots agrees


def test_follow_up_reuses_the_whole_previous_turn_from_the_slot_cache(
    first_run: dict[str, Any],
) -> None:
    question, follow_up = first_run["turns"][1:]
    assert follow_up["conversation_id"] == question["conversation_id"]
    assert follow_up["agent"]["slot"] == question["agent"]["slot"]
    before = question["agent"]["cached_tokens"] + question["agent"]["prompt_tokens"]
    assert follow_up["agent"]["cached_tokens"] >= before


def test_each_request_reports_end_of_speech_to_first_audio_with_its_parts(
    first_run: dict[str, Any],
) -> None:
    for turn in first_run["turns"]:
        timings = turn["timings"]
        parts = [timings[name] for name in PARTS]
        assert all(part is not None and part >= 0 for part in parts), timings
        assert timings["to_first_audio_ms"] > 0
        assert math.isclose(sum(parts), timings["to_first_audio_ms"], abs_tol=1.0)
        assert timings["audio_stop_by"] in ("vad", "transcript", "end of audio")
        assert {"stt", "intent", "tts"} <= set(timings["stage_ms"])


def test_the_model_without_tools_raises_no_repair(first_run: dict[str, Any]) -> None:
    plan = first_run["plan"]
    assert (plan["tool_calling"], plan["control"]) == (False, False)
    assert first_run["repairs"] == []


def test_home_assistant_listens_on_loopback_only(first_run: dict[str, Any]) -> None:
    http = first_run["provisioning"]["setup"]["http"]
    assert http["hosts"] == ["127.0.0.1"]
    assert http["active"] == "stable"
    assert http["imported_now"] is True


def test_reply_audio_is_written(first_run: dict[str, Any], demo_dirs: tuple[Path, Path]) -> None:
    for turn in first_run["turns"]:
        with wave.open(str(demo_dirs[1] / f"reply-{turn['number']}.wav")) as wav:
            assert wav.getnframes() / wav.getframerate() > 0.5
        assert turn["reply_audio_s"] > 0.5


def test_speed_and_health_sensors_have_values(first_run: dict[str, Any]) -> None:
    speed = _sensor(first_run, "sensor.", "generation speed")
    assert float(speed["state"]) > 0
    reuse = _sensor(first_run, "sensor.", "cache reuse")
    assert 0 <= float(reuse["state"]) <= 100
    health = [r for r in first_run["sensors"] if r["device_class"] == "connectivity"]
    assert len(health) >= 3
    assert all(r["state"] == "on" for r in health), health
    assert all(s["health"] == "ok" for s in first_run["services"])


def test_home_assistant_reports_nothing_about_our_integration(
    first_run: dict[str, Any], demo_dirs: tuple[Path, Path]
) -> None:
    """HA names a custom integration that blocks its event loop or uses an API wrongly."""
    log = (demo_dirs[0] / "logs" / "home-assistant.log").read_text()
    assert "Voice Stack" in log or "voice_stack" in log  # the log is the demo's HA's
    reported = [line for line in log.splitlines() if "custom integration 'voice_stack'" in line]
    assert reported == []


def test_second_run_reuses_what_is_provisioned(
    first_run: dict[str, Any], demo_dirs: tuple[Path, Path]
) -> None:
    code, again = run_demo(*demo_dirs)
    assert code == 0, f"second run failed: {again.get('error')}"
    setup, first = again["provisioning"]["setup"], first_run["provisioning"]["setup"]
    assert again["provisioning"]["reused"]
    killed = [
        line
        for line in (demo_dirs[0] / "logs" / "home-assistant.log").read_text().splitlines()
        if line.startswith("[voice-stack]")
    ]  # a kill loses HA's late saves: say so if the pipeline was not found again
    assert setup["pipeline_id"] == first["pipeline_id"], killed
    assert setup["voice_stack_entry"] == first["voice_stack_entry"]
    assert setup["http"]["imported_now"] is False  # HA kept the confirmed settings
    assert again["turns"][1]["slot_used"] == setup["agent"]["slot"]
    assert again["turns"][0]["light_after"] == "on"


def test_failure_names_the_service_and_its_log(tmp_path: Path) -> None:
    """With nothing provisioned, the demo stops at once and says which part and where to look."""
    empty_cache = tmp_path / "cache"
    empty_cache.mkdir()
    argv = [
        str(venv_bin("ha11", "python")),
        "-m",
        "voice_stack_dev.demo",
        "--json",
        "--state-dir",
        str(tmp_path / "state"),
        "--output",
        str(tmp_path / "out"),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO / "dev"), "VOICE_STACK_CACHE": str(empty_cache)}
    code, stdout, _stderr = run_stopping_cleanly(argv, env, 120)
    assert code == 1
    result = json.loads(stdout)
    assert not result["ok"]
    error = result["error"]
    assert error["service"]
    assert error["reason"]
    assert error["log"]
