"""Before starting anything: is every package HA needs here? (`hass --skip-pip` never installs.)"""

from __future__ import annotations

import importlib.util
import sys

from .errors import DemoError

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
