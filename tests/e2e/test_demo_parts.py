"""The demo's pure pieces: form filling, saved state, HA's configuration and HTTP settings,
the report."""

from __future__ import annotations

import json
import signal
import socket
import stat
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from voice_stack_dev.assist_timings import Marks, PipelineEvent, extract_timings
from voice_stack_dev.demo import ha_config
from voice_stack_dev.demo.ha_config import LIGHT_UNIQUE_ID, configuration_yaml
from voice_stack_dev.demo.observe import EntityReading, last_used_slot
from voice_stack_dev.demo.provision import fill_form
from voice_stack_dev.demo.report import DemoReport, render
from voice_stack_dev.demo.services import DemoError, DemoState
from voice_stack_dev.demo.turns import Turn, check_command
from voice_stack_dev.procs import Service, free_port


def test_fill_form_answers_then_prefills_then_required_defaults() -> None:
    schema: list[dict[str, Any]] = [
        {"name": "url", "required": True},
        {"name": "slot", "required": True, "description": {"suggested_value": 2}},
        {"name": "max_tokens", "required": True, "description": {"suggested_value": 512}},
        {"name": "name", "required": True, "default": "Agent"},
        {"name": "optional_thing", "required": False},
        {"name": "advanced", "type": "expandable", "schema": [{"name": "timeout"}]},
    ]
    payload = fill_form(schema, {"url": "http://x", "max_tokens": 64, "timeout": 5})
    assert payload == {
        "url": "http://x",
        "slot": 2,
        "max_tokens": 64,
        "name": "Agent",
        "advanced": {"timeout": 5},
    }


def test_state_round_trip_is_private_and_keeps_free_ports(tmp_path: Path) -> None:
    state = DemoState()
    state.assign_ports()
    state.save(tmp_path)
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o600
    again = DemoState.load(tmp_path)
    assert again.proxy_key == state.proxy_key
    assert again.password == state.password
    with socket.socket() as busy:  # one of the saved ports is now taken by someone else
        busy.bind(("127.0.0.1", again.ports["proxy"]))
        busy.listen()
        again.assign_ports()
        assert again.ports["proxy"] != state.ports["proxy"]
    assert again.ports["hass"] == state.ports["hass"]
    assert len(set(again.ports.values())) == len(again.ports)


def test_configuration_is_minimal_yaml_with_the_light(tmp_path: Path) -> None:
    dashboard = tmp_path / "voice_stack_dashboard.yaml"
    text = configuration_yaml(8124, "/bin/ffmpeg", dashboard, tmp_path / "rec", http_block=True)
    config = yaml.safe_load(text)
    assert "default_config" not in config
    assert config["http"] == {"server_host": "127.0.0.1", "server_port": 8124}
    assert config["ffmpeg"]["ffmpeg_bin"] == "/bin/ffmpeg"
    light = config["template"][0]["light"][0]
    assert light["unique_id"] == LIGHT_UNIQUE_ID
    assert config["lovelace"]["dashboards"]["voice-stack"]["filename"] == dashboard.name
    plain = configuration_yaml(8124, "ff", None, tmp_path, http_block=False)
    assert "lovelace" not in yaml.safe_load(plain)
    assert "http" not in yaml.safe_load(plain)  # HA keeps its HTTP settings in its store


def _store(config_dir: Path, stable: dict[str, Any], pending: dict[str, Any] | None) -> Path:
    path = config_dir / ".storage" / "http"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"stable": stable, "pending": pending, "yaml_migration_done": True}
    path.write_text(json.dumps({"version": 3, "minor_version": 1, "key": "http", "data": data}))
    return path


OURS = {"server_host": ["127.0.0.1"], "server_port": 8124, "error": None}
EVERYWHERE = {"server_port": 8123, "error": None}  # HA's default: every interface


def test_confirmed_loopback_settings_are_kept(tmp_path: Path) -> None:
    store = _store(tmp_path, OURS, None)
    assert ha_config.needs_import(tmp_path, 8124) is False
    assert store.is_file()


@pytest.mark.parametrize(
    ("stable", "pending", "port"),
    [
        (EVERYWHERE, {**OURS, "error": "not_promoted"}, 8124),  # a trial HA reverted
        (EVERYWHERE, {**OURS, "error": None}, 8124),  # a trial never confirmed
        (OURS, None, 9000),  # the port moved
        ({**OURS, "server_host": ["0.0.0.0"]}, None, 8124),
    ],
)
def test_anything_else_is_reset_and_imported_again(
    tmp_path: Path, stable: dict[str, Any], pending: dict[str, Any] | None, port: int
) -> None:
    store = _store(tmp_path, stable, pending)
    assert ha_config.needs_import(tmp_path, port) is True
    assert not store.exists()  # HA must not fall back to listening everywhere


def test_first_boot_imports(tmp_path: Path) -> None:
    assert ha_config.needs_import(tmp_path, 8124) is True
    (tmp_path / ".storage").mkdir()
    (tmp_path / ".storage" / "http").write_text("not json")
    assert ha_config.needs_import(tmp_path, 8124) is True


def test_last_used_slot_is_the_latest_task() -> None:
    slots = [{"id": 0, "id_task": 11}, {"id": 1, "id_task": 5}, {"id": 2, "id_task": -1}]
    assert last_used_slot(slots) == 0
    assert last_used_slot([{"id": 0, "id_task": -1}]) is None


def test_report_rounds_numbers_and_names_the_failure() -> None:
    result = DemoReport(
        sensors=[
            EntityReading("sensor.gen", "Generation speed", "5.41559", "tokens/s", None),
            EntityReading("binary_sensor.llm", "LLM server", "on", None, "connectivity"),
        ]
    )
    err = DemoError("speech server", "synthesis HTTP 500", "/logs/speech.log")
    result.error = {"service": err.service, "reason": err.reason, "log": err.log_path}
    text = render(result)
    assert "5.4 tokens/s" in text
    assert "FAILED: speech server: synthesis HTTP 500" in text
    assert "log: /logs/speech.log" in text


def _command(*, local: bool, light: str) -> Turn:
    timings = extract_timings([], Marks(speech_end=datetime.now(UTC), audio_end_sent=None,
                                        first_audio=None))  # fmt: skip
    return Turn(1, "command", "Turn on the kitchen light", 1.0, "Turn on the kitchen light.",
                "Turned on the light", local, "conversation.x", None, None, None, timings,
                "off", light, "", 0.0)  # fmt: skip


def test_the_report_says_the_gateway_ended_a_turn() -> None:
    """A transcript before the audio stopped: the report names the gateway, not HA's hold."""
    end = datetime.now(UTC)
    heard = [PipelineEvent("stt-end", end + timedelta(milliseconds=450))]
    marks = Marks(speech_end=end, audio_end_sent=end + timedelta(seconds=1), first_audio=None)
    turn = replace(_command(local=True, light="on"), timings=extract_timings(heard, marks))
    assert turn.timings.audio_stop_by == "transcript"
    assert "(the gateway answered at the pause)" in render(DemoReport(turns=[turn]))


def test_the_command_must_switch_the_light_when_ha_handles_commands() -> None:
    check_command(_command(local=True, light="on"), prefer_local=True)
    check_command(_command(local=False, light="off"), prefer_local=False)  # --commands-to-agent
    with pytest.raises(DemoError, match="the light is off"):
        check_command(_command(local=True, light="off"), prefer_local=True)
    with pytest.raises(DemoError, match="did not recognise"):
        check_command(_command(local=False, light="off"), prefer_local=True)


def test_a_service_that_ignores_sigterm_is_killed_and_its_log_says_so(tmp_path: Path) -> None:
    """The demo stops HA before its late saves are lost only if a kill is rare and visible."""
    port = free_port()
    stubborn = (
        "import signal, socket, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"s = socket.create_server(('127.0.0.1', {port})); time.sleep(60)"
    )
    log = tmp_path / "stubborn.log"
    service = Service("stubborn", [sys.executable, "-c", stubborn], port, log, None)
    service.stop_timeout = 0.2
    proc = service.start().proc
    assert proc is not None
    service.stop()
    assert proc.returncode == -signal.SIGKILL
    assert "stubborn ignored SIGTERM for 0.2 s: killed" in log.read_text()
