"""The Home Assistant the demo starts: the packages it needs, a small configuration with only what
the voice pipeline needs, and its HTTP server on 127.0.0.1 at the demo's port, confirmed.

No `default_config:` (recorder, discovery, cloud...): HA still sets up its always-on core
integrations (frontend, onboarding, analytics, ...), and we add the voice pieces and one light.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ha_client import HomeAssistantClient
from ..paths import REPO, venv_bin
from .services import DemoError

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

    `http_block`: only for HA to import its HTTP settings once (see `needs_import`).
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


# Home Assistant's HTTP server settings for the demo: 127.0.0.1 on the demo's port, confirmed.
#
# HA 2026.11 keeps these settings in its own store (`.storage/http`), not in YAML: a `http:`
# block is imported once, as a *pending* configuration on trial. Unless it is confirmed within
# 5 minutes (the countdown dialog's Confirm, websocket `http/config/promote`), HA marks it
# failed, restarts, and from then on uses the *stable* one, whose default listens on every
# interface at port 8123. Later boots ignore the YAML. So the demo does what HA asks a user to
# do: the first boot imports the block, the demo confirms it at once, and the block is removed.
# Before each start the store is checked: anything but a confirmed 127.0.0.1-only configuration
# on this run's port (a reverted trial, a port that moved) is reset, and imported again.
LOOPBACK = ["127.0.0.1"]
STORE = Path(".storage") / "http"


@dataclass(frozen=True)
class HttpSettings:
    """What HA reported after the demo confirmed its configuration."""

    hosts: list[str]
    port: int
    active: str  # HA's active_config_type: "stable" once confirmed
    imported_now: bool  # this run imported the YAML block and confirmed it


def _stored(config_dir: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((config_dir / STORE).read_text())["data"]
    except OSError, ValueError, KeyError, TypeError:
        return None
    return data


def _is_ours(config: object, port: int) -> bool:
    return (
        isinstance(config, dict)
        and config.get("server_host") == LOOPBACK
        and config.get("server_port") == port
    )


def needs_import(config_dir: Path, port: int) -> bool:
    """Before HA starts: True when configuration.yaml must carry the `http:` block.

    A store that is not exactly "confirmed, 127.0.0.1 only, this port, nothing pending" is
    removed, so HA imports the block afresh instead of falling back to listening everywhere.
    """
    data = _stored(config_dir)
    if data is not None and _is_ours(data.get("stable"), port) and data.get("pending") is None:
        return False
    (config_dir / STORE).unlink(missing_ok=True)
    return True


async def confirm(ha: HomeAssistantClient, port: int) -> HttpSettings:
    """After login: confirm an imported configuration and check what HA now runs."""
    current = await ha.ws("http/config")
    imported = current.get("active_config_type") == "pending"
    if imported:
        if not _is_ours(current.get("pending"), port):
            raise DemoError("Home Assistant", f"unexpected pending HTTP settings {current}")
        await ha.ws("http/config/promote")
        current = await ha.ws("http/config")
    stable = current.get("stable") or {}
    if not _is_ours(stable, port) or current.get("revert_at") is not None:
        raise DemoError(
            "Home Assistant",
            f"HTTP settings are not 127.0.0.1:{port} only: {stable} (revert at "
            f"{current.get('revert_at')})",
        )
    return HttpSettings(
        hosts=list(stable["server_host"]),
        port=int(stable["server_port"]),
        active=str(current.get("active_config_type")),
        imported_now=imported,
    )


async def dismiss_yaml_notice(ha: HomeAssistantClient) -> None:
    """The import leaves a "remove the http: block" repair; the demo has removed it."""
    listing = await ha.ws("repairs/list_issues")
    for issue in listing.get("issues", []):
        if issue.get("domain") == "http" and issue.get("issue_id") == "deprecated_yaml":
            await ha.ws(
                "repairs/ignore_issue", domain="http", issue_id="deprecated_yaml", ignore=True
            )


# Before starting anything: is every package HA needs here? (`hass --skip-pip` never installs.)
# module -> requirement (HA 2026.11.0's manifests) of what the demo's HA sets up.
REQUIRED = {
    "hass_frontend": "home-assistant-frontend (frontend)",
    "haffmpeg": "ha-ffmpeg (ffmpeg, needed by tts)",
    "imageio_ffmpeg": "imageio-ffmpeg (the ffmpeg binary for tts)",
    "mutagen": "mutagen (tts)",
    "pymicro_vad": "pymicro-vad (assist_pipeline)",
    "pyspeex_noise": "pyspeex-noise (assist_pipeline)",
    "hassil": "hassil (conversation)",
    "home_assistant_intents": "home-assistant-intents (conversation)",
    "wyoming": "wyoming (wyoming)",
    "numpy": "numpy (camera, needed by ai_task)",
    "turbojpeg": "PyTurboJPEG (camera, needed by ai_task)",
}


def check_environment() -> None:
    """Fail early, naming the missing packages, rather than deep inside HA's log."""
    missing = [req for module, req in REQUIRED.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise DemoError(
            f"Home Assistant environment ({sys.prefix})",
            "missing packages: " + ", ".join(missing) + "; run scripts/setup",
        )
