"""A small Home Assistant configuration for the demo: only what the voice pipeline needs.

No `default_config:` (recorder, discovery, cloud...): HA still sets up its always-on core
integrations (frontend, onboarding, analytics, ...), and we add the voice pieces and one light.
"""

from __future__ import annotations

import importlib
import json
import subprocess
from pathlib import Path

from ..paths import REPO, venv_bin

COMPONENT = REPO / "custom_components" / "voice_stack"
DASHBOARD = REPO / "dashboards" / "voice_stack.yaml"
DASHBOARD_URL = "voice-stack"
LIGHT_NAME = "Kitchen Light"
LIGHT_UNIQUE_ID = "voice_stack_demo_kitchen_light"
POWER = "kitchen_light_power"


def ffmpeg_binary() -> str:
    """HA's tts converts audio with ffmpeg; the imageio-ffmpeg wheel ships a static one.

    The package lives only in the ha11 environment the demo's HA runs in: from another
    environment (a test driving that HA), that environment's Python is asked where it is.
    """
    try:
        module = importlib.import_module("imageio_ffmpeg")
    except ModuleNotFoundError:
        script = "import imageio_ffmpeg; print(imageio_ffmpeg.get_ffmpeg_exe())"
        found = subprocess.run(
            [str(venv_bin("ha11", "python")), "-c", script],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return found.stdout.strip()
    return str(module.get_ffmpeg_exe())


def configuration_yaml(
    port: int, ffmpeg: str, dashboard: Path | None, recordings: Path, *, http_block: bool
) -> str:
    """configuration.yaml text (JSON-quoted scalars are valid YAML).

    `http_block`: only for HA to import its HTTP settings once (see http_config.py).
    """
    lines = [
        "homeassistant:",
        "  name: Voice Stack demo",
        "  time_zone: UTC",
        "  country: US",
        "  language: en",
        "  unit_system: metric",
        "  latitude: 52.37",
        "  longitude: 4.89",
        "  elevation: 0",
        *(["http:", "  server_host: 127.0.0.1", f"  server_port: {port}"] if http_block else []),
        "api:",
        "config:",
        "diagnostics:",  # the agent's own timings of each reply (cache reuse, slot)
        "repairs:",
        # The dashboard's history and statistics graphs (kept small: a demo's database).
        "recorder:",
        "  purge_keep_days: 3",
        "history:",
        "conversation:",
        "assist_pipeline:",
        # HA saves the audio each run fed to STT: the first place to look when STT mishears.
        f"  debug_recording_dir: {json.dumps(str(recordings))}",
        "ffmpeg:",
        f"  ffmpeg_bin: {json.dumps(ffmpeg)}",
        "logger:",
        "  default: warning",
        "  logs:",
        "    custom_components.voice_stack: info",
        "    homeassistant.components.wyoming: info",
        # The light's power lives in a helper that starts off on every boot.
        "input_boolean:",
        f"  {POWER}:",
        "    name: Kitchen light power",
        "    initial: false",
        "template:",
        "  - light:",
        f"      - name: {LIGHT_NAME}",
        f"        unique_id: {LIGHT_UNIQUE_ID}",
        f"        state: \"{{{{ is_state('input_boolean.{POWER}', 'on') }}}}\"",
        "        turn_on:",
        "          - action: input_boolean.turn_on",
        f"            target: {{entity_id: input_boolean.{POWER}}}",
        "        turn_off:",
        "          - action: input_boolean.turn_off",
        f"            target: {{entity_id: input_boolean.{POWER}}}",
    ]
    if dashboard is not None:
        lines += [
            "lovelace:",
            "  dashboards:",
            f"    {DASHBOARD_URL}:",
            "      mode: yaml",
            f"      filename: {json.dumps(dashboard.name)}",
            "      title: Voice Stack",
            "      icon: mdi:account-voice",
            "      show_in_sidebar: true",
        ]
    return "\n".join(lines) + "\n"


def write_config(config_dir: Path, port: int, *, http_block: bool) -> bool:
    """(Re)write configuration.yaml and link our integration; True if a dashboard was linked."""
    config_dir.mkdir(parents=True, exist_ok=True)
    components = config_dir / "custom_components"
    components.mkdir(exist_ok=True)
    _link(components / "voice_stack", COMPONENT)
    dashboard = None
    if DASHBOARD.is_file():
        dashboard = config_dir / "voice_stack_dashboard.yaml"
        _link(dashboard, DASHBOARD)
    recordings = config_dir.parent / "logs" / "pipeline-audio"
    text = configuration_yaml(port, ffmpeg_binary(), dashboard, recordings, http_block=http_block)
    (config_dir / "configuration.yaml").write_text(text)
    return dashboard is not None


def _link(link: Path, target: Path) -> None:
    """A symlink, so a kept demo runs the working tree's code."""
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    link.symlink_to(target)
